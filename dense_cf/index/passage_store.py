"""Random access to corpus rows on disk: the passage store of BM25 and model mining.

Moved from ``mining/negatives.py``; :class:`dense_cf.index.bm25.BM25Index` directories hold one
too. Corpus rows are DPR's TSV rows (docs/method.md §8).
"""

from __future__ import annotations

import array
import json
import os
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np
from absl import logging

from dense_cf import files
from dense_cf.datasets import formats
from dense_cf.datasets.formats import SkipReport
from dense_cf.progress import Progress

__all__ = ["PassageStore", "CorpusChangedError", "corpus_fingerprint", "check_fingerprint",
           "build_atomically", "verify_built", "open_store", "write_meta_json", "INDEX_FORMAT"]

# Version of the on-disk layout of stores and BM25 indexes (meta.json / store.json "format").
INDEX_FORMAT = 1


class PassageStore:
    """The corpus rows on disk for random access by row: ``passages.jsonl`` + ``offsets.npy``.

    Line ``i`` of ``passages.jsonl`` is the JSON array ``[id, title, text]`` of corpus row ``i``
    (TSV order, bad rows skipped); ``offsets.npy`` (int64 [n+1]) holds the byte offsets. The file
    is memory-mapped, so 21M passages cost page cache, not Python objects. The directory's
    ``SHA256SUMS`` (written last by its builder) is checked before anything is read.
    """

    DATA, OFFSETS = "passages.jsonl", "offsets.npy"

    def __init__(self, directory: str) -> None:
        self.directory = directory
        verify_built(directory, "passage store")
        self.offsets = np.load(os.path.join(directory, self.OFFSETS), mmap_mode="r")
        path = os.path.join(directory, self.DATA)
        size = os.path.getsize(path)
        if size != int(self.offsets[-1]):
            raise ValueError(f"{path}: {size} bytes, offsets.npy expects {int(self.offsets[-1])} "
                             "(incomplete store: delete the directory to rebuild it)")
        self._data = np.memmap(path, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def get(self, row: int) -> tuple[str, str, str]:
        """(id, title, text) of corpus row ``row``."""
        lo, hi = int(self.offsets[row]), int(self.offsets[row + 1])
        pid, title, text = json.loads(self._data[lo:hi].tobytes().decode("utf-8"))
        return pid, title, text

    def rows(self) -> Iterator[tuple[str, str, str]]:
        """(id, text, title) in corpus order: the corpus TSV's own row layout (for export)."""
        with open(os.path.join(self.directory, self.DATA), encoding="utf-8") as f:
            for line in f:
                pid, title, text = json.loads(line)
                yield pid, text, title

    def ids(self) -> Iterator[str]:
        """Passage ids in corpus order."""
        for pid, _, _ in self.rows():
            yield pid

    @staticmethod
    def write(directory: str, rows: Iterable[tuple[str, str, str]],
              on_row: Callable[[str, str, str], None] | None = None,
              log_every: int = 1_000_000) -> int:
        """Writes (id, text, title) rows into ``directory``; returns the count.

        ``on_row(id, text, title)`` sees every row as it is written (the BM25 builder tokenises
        in the same pass, so the TSV is read once).
        """
        os.makedirs(directory, exist_ok=True)
        offsets = array.array("q", [0])
        # Rows are streamed (total unknown): lines every ``log_every`` rows and at least every
        # DEFAULT_EVERY_S seconds.
        progress = Progress("passage store", unit="passages", every_n=log_every or None)
        with open(os.path.join(directory, PassageStore.DATA), "wb") as f:
            pos = 0
            for pid, text, title in rows:
                line = (json.dumps([pid, title, text], ensure_ascii=False) + "\n").encode("utf-8")
                f.write(line)
                pos += len(line)
                offsets.append(pos)
                if on_row is not None:
                    on_row(pid, text, title)
                progress.update(1)
        np.save(os.path.join(directory, PassageStore.OFFSETS), np.frombuffer(offsets, np.int64))
        progress.done()
        return len(offsets) - 1


class CorpusChangedError(files.UserError, ValueError):
    """The corpus file differs from the one a store (or BM25 index) was built from."""


def corpus_fingerprint(path: str) -> dict[str, Any]:
    """What identifies a corpus file: name, size, mtime and the sha256 of its bytes."""
    st = os.stat(path)
    return {"name": os.path.basename(path), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns,
            "sha256": files.file_sha256(path)}


def check_fingerprint(directory: str, meta: Mapping[str, Any], corpus: str | None) -> None:
    """Raises :class:`CorpusChangedError` if ``directory`` was built from a corpus of other
    content than ``corpus`` (an edited passage, rows reordered: same size, other bytes). The
    file is hashed only when its size or mtime differ from the recorded ones; a record without
    a sha256 (older stores) is checked by size alone."""
    if corpus is None or not meta.get("corpus"):  # built from in-memory rows: nothing to check
        return
    have, st = meta["corpus"], os.stat(corpus)
    changed = st.st_size != have["bytes"]
    now = None
    if not changed and have.get("sha256") and st.st_mtime_ns != have.get("mtime_ns"):
        now = files.file_sha256(corpus)
        changed = now != have["sha256"]
    if changed:
        what = (f"{have['bytes']} bytes recorded, now {st.st_size}" if now is None else
                f"sha256 {have['sha256'][:12]}… recorded, now {now[:12]}…")
        raise CorpusChangedError(
            f"{corpus} changed since {directory} was built from {have['name']} ({what}): the "
            f"passages there, and any export or index made from them, are of the old file. "
            f"Rebuild them from the new file (dense_cf.cli.eval_retrieval --rebuild_changed_corpus, "
            f"or delete {directory}), or restore the old corpus")
    if os.path.basename(corpus) != have["name"]:
        logging.warning("%s was built from a file named %s; using it for %s (same content)",
                        directory, have["name"], corpus)


_UNVERIFIED_WARNED: set[str] = set()


def verify_built(directory: str, what: str) -> None:
    """Checks the ``SHA256SUMS`` of a store or BM25 index directory (every file, once per
    process while unchanged): a changed byte is :class:`files.IntegrityError` naming the file
    and saying to delete ``directory`` (it is rebuilt from its corpus). A directory built before
    checksums existed is used unverified, with one warning."""
    rebuild = (f"delete {directory} and run the same command again (the {what} is rebuilt "
               f"from its corpus)")
    if not files.verify_dir(directory, rebuild) and directory not in _UNVERIFIED_WARNED:
        _UNVERIFIED_WARNED.add(directory)
        logging.warning("%s: a %s without %s (built by an older version): used unverified; "
                        "delete it to rebuild it with checksums", directory, what, files.SUMS_NAME)


def build_atomically(directory: str, build: Callable[[str], None]) -> None:
    """Runs ``build(tmp_dir)`` and renames the result to ``directory`` (``files.build_dir_atomically``:
    a crash leaves a staging directory that the next build removes; modes follow the umask)."""
    if os.path.isdir(directory) and os.listdir(directory):
        raise ValueError(f"{directory} exists but holds no complete index or store (no "
                         f"meta.json/store.json): delete it or pass another directory")
    files.build_dir_atomically(directory, build)


def open_store(corpus: str, directory: str, *, skip_bad: bool = True,
               report: SkipReport | None = None, rebuild_changed: bool = False) -> PassageStore:
    """The passage store of ``corpus`` in ``directory``, built on first use. A store of a
    changed corpus is :class:`CorpusChangedError`, or rebuilt with ``rebuild_changed``.

    ``directory`` may also be a :class:`BM25Index` directory (it holds the same store).
    """
    meta_path = os.path.join(directory, "store.json")
    if os.path.exists(os.path.join(directory, "meta.json")):  # a BM25 index dir holds a store
        meta_path = os.path.join(directory, "meta.json")
    stale = False
    if rebuild_changed and os.path.exists(meta_path) and meta_path.endswith("store.json"):
        try:
            with open(meta_path) as f:
                check_fingerprint(directory, json.load(f), corpus)
        except CorpusChangedError as e:
            logging.warning("%s; rebuilding it", str(e).split(": the passages there")[0])
            stale = True
    if stale or not os.path.exists(meta_path):
        def build(tmp: str) -> None:
            rep = report if report is not None else SkipReport()
            n = PassageStore.write(tmp, formats.read_corpus_tsv(corpus, skip_bad=skip_bad,
                                                                report=rep))
            if report is None and rep.total:
                rep.log()   # the caller's report is the caller's to log
            write_meta_json(os.path.join(tmp, "store.json"),
                        {"format": INDEX_FORMAT, "corpus": corpus_fingerprint(corpus),
                         "passages": n, "skipped_rows": rep.count(corpus),
                         "skipped_by_reason": {r: k for (f, r), k in sorted(rep.counts.items())
                                               if f == os.fspath(corpus)}})
            files.seal_dir(tmp)  # last: checked by every open (PassageStore)
        if stale:  # the old store is swapped out once the new one is complete
            files.build_dir_atomically(directory, build, replace=True)
        else:
            build_atomically(directory, build)
    # before its store.json (or a BM25 index's meta.json) is trusted
    verify_built(directory, "BM25 index" if meta_path.endswith("meta.json") else "passage store")
    with open(meta_path) as f:
        check_fingerprint(directory, json.load(f), corpus)
    return PassageStore(directory)


def write_meta_json(path: str, obj: Any) -> None:
    """Writes ``obj`` as indented JSON, atomically (:func:`files.atomic_open`)."""
    with files.atomic_open(path) as f:
        json.dump(obj, f, indent=2, default=str)
