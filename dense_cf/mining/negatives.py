"""BM25 hard-negative mining for any DPR biencoder file (docs/method.md §8; DPR's BM25 negatives, docs/method.md §9).

``python -m dense_cf.mining.negatives --input biencoder-x.json[.gz] --corpus psgs_w100.tsv[.gz]
--output out.json[.gz] [--num_negatives 30 --top_k 100 --answer_mode string|regex
--index_dir DIR --existing replace|append]``

For each question, the corpus is ranked with BM25 (``bm25s``) over ``title + " " + text``, as
DPR's Lucene index did, and the best ``num_negatives`` passages are kept as
``hard_negative_ctxs`` (``{title, text, score, title_score: 0, passage_id}``, DPR's fields),
skipping

* the question's positives: same passage id (a ``wiki:`` prefix is ignored) or same title and
  text up to case and whitespace (so corpus duplicates of a positive are excluded too);
* answer-bearing passages: DPR's ``has_answer`` on the passage text (docs/method.md §6, ``answer_mode``);
* passages already among the kept hard negatives (append mode) and text duplicates;
* passages with BM25 score ≤ 0 (no query term in common: not a *hard* negative).

The rest of every record is written back unchanged (extra keys included). The index (bm25s
matrices + a random-access passage store) is saved to ``--index_dir`` and reused by later runs,
so the 21M-passage corpus is tokenised and indexed once. Questions are mined in shards written
to ``<output>.parts/`` (:mod:`dense_cf.mining.writers`); an interrupted run restarts where it
stopped and produces the same file. Bad input records are skipped and counted (``--strict``
raises instead); the summary (also in ``<output>.meta.json``) reports them.

Reusable pieces (model mining, :mod:`dense_cf.mining.model_negatives`, uses them too):
:class:`PassageStore`, :class:`BM25Index`, :func:`select_negatives`, :func:`mine_file`; and
:func:`bm25_negatives` for in-memory callers (``synthetic._mine_hard_negatives`` could call it).
"""

from __future__ import annotations

import array
import json
import os
import re
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterable, Iterator, Mapping, Sequence

import numpy as np
from absl import logging

from dense_cf.text import answers as answers_lib
from dense_cf.datasets import formats
from dense_cf.datasets.formats import BiencoderExample, SkipReport
from dense_cf.mining.writers import ShardedParts
from absl import flags
from absl import app, flags

__all__ = [
    "PassageStore", "BM25Index", "select_negatives", "bm25_negatives",
    "passage_key", "normalize_pid", "mine_file", "mine_bm25", "MiningStats",
]

EXISTING_MODES = ("replace", "append")
_INDEX_FORMAT = 1


# ---------------------------------------------------------------------------------------------
# Identity of passages


def normalize_pid(pid: Any) -> str | None:
    """Passage id as compared across files: str, without DPR's ``wiki:`` prefix."""
    if pid is None:
        return None
    s = str(pid).strip()
    return s[5:] if s.startswith("wiki:") else s


def passage_key(title: str, text: str) -> tuple[str, str]:
    """Title and text up to case and whitespace: how a positive without an id is recognised."""
    return " ".join(title.split()).casefold(), " ".join(text.split()).casefold()


# ---------------------------------------------------------------------------------------------
# Reading biencoder files with the raw records (extra keys survive the rewrite)


# ---------------------------------------------------------------------------------------------
# Random-access passage store


class PassageStore:
    """The corpus rows on disk for random access by row: ``passages.jsonl`` + ``offsets.npy``.

    Line ``i`` of ``passages.jsonl`` is the JSON array ``[id, title, text]`` of corpus row ``i``
    (TSV order, bad rows skipped); ``offsets.npy`` (int64 [n+1]) holds the byte offsets. The file
    is memory-mapped, so 21M passages cost page cache, not Python objects.
    """

    DATA, OFFSETS = "passages.jsonl", "offsets.npy"

    def __init__(self, directory: str) -> None:
        self.directory = directory
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
        t0 = time.perf_counter()
        with open(os.path.join(directory, PassageStore.DATA), "wb") as f:
            pos = 0
            for pid, text, title in rows:
                line = (json.dumps([pid, title, text], ensure_ascii=False) + "\n").encode("utf-8")
                f.write(line)
                pos += len(line)
                offsets.append(pos)
                if on_row is not None:
                    on_row(pid, text, title)
                n = len(offsets) - 1
                if log_every and n % log_every == 0:
                    logging.info("indexed %d passages (%.0f passages/s)", n,
                                 n / max(time.perf_counter() - t0, 1e-9))
        np.save(os.path.join(directory, PassageStore.OFFSETS), np.frombuffer(offsets, np.int64))
        return len(offsets) - 1


def corpus_fingerprint(path: str) -> dict[str, Any]:
    """What identifies a corpus file cheaply: name and size (content is checked by row count)."""
    return {"name": os.path.basename(path), "bytes": os.path.getsize(path)}


def _check_fingerprint(directory: str, meta: Mapping[str, Any], corpus: str | None) -> None:
    if corpus is None or not meta.get("corpus"):  # built from in-memory rows: nothing to check
        return
    want, have = corpus_fingerprint(corpus), meta["corpus"]
    if want["bytes"] != have["bytes"]:
        raise ValueError(
            f"{directory} was built from {have['name']} ({have['bytes']} bytes), not {corpus} "
            f"({want['bytes']} bytes): pass another --index_dir or delete it to rebuild")
    if want["name"] != have["name"]:
        logging.warning("%s was built from a file named %s; using it for %s (same size)",
                        directory, have["name"], corpus)


def _build_atomically(directory: str, build: Callable[[str], None]) -> None:
    """Runs ``build(tmp_dir)`` and renames the result to ``directory`` (a crash leaves nothing)."""
    if os.path.isdir(directory) and os.listdir(directory):
        raise ValueError(f"{directory} exists but holds no complete index or store (no "
                         f"meta.json/store.json): delete it or pass another directory")
    parent = os.path.dirname(os.path.abspath(directory))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=os.path.basename(directory) + ".tmp-", dir=parent)
    try:
        build(tmp)
        if os.path.isdir(directory) and not os.listdir(directory):
            os.rmdir(directory)
        os.rename(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def open_store(corpus: str, directory: str, *, skip_bad: bool = True,
               report: SkipReport | None = None) -> PassageStore:
    """The passage store of ``corpus`` in ``directory``, built on first use.

    ``directory`` may also be a :class:`BM25Index` directory (it holds the same store).
    """
    meta_path = os.path.join(directory, "store.json")
    if os.path.exists(os.path.join(directory, "meta.json")):  # a BM25 index dir holds a store
        meta_path = os.path.join(directory, "meta.json")
    if not os.path.exists(meta_path):
        def build(tmp: str) -> None:
            rep = report if report is not None else SkipReport()
            n = PassageStore.write(tmp, formats.read_corpus_tsv(corpus, skip_bad=skip_bad,
                                                                report=rep))
            _write_json(os.path.join(tmp, "store.json"),
                        {"format": _INDEX_FORMAT, "corpus": corpus_fingerprint(corpus),
                         "passages": n, "skipped_rows": rep.count(corpus)})
        _build_atomically(directory, build)
    with open(meta_path) as f:
        _check_fingerprint(directory, json.load(f), corpus)
    return PassageStore(directory)


def _write_json(path: str, obj: Any) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, default=str)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# BM25 index (bm25s)

# bm25s's default tokenisation (scikit-learn's CountVectorizer pattern, lowercase, English
# stop words), applied by one function to passages and questions so both always agree.
TOKEN_PATTERN = r"(?u)\b\w\w+\b"
_TOKEN_RE = re.compile(TOKEN_PATTERN)


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN
    return frozenset(STOPWORDS_EN)


def bm25_tokenize(text: str, stopwords: Collection[str]) -> list[str]:
    """Lowercased ``\\w\\w+`` tokens minus stop words (bm25s's default tokeniser)."""
    return [t for t in _TOKEN_RE.findall(text.lower()) if t not in stopwords]


def bm25_document(title: str, text: str) -> str:
    """What BM25 indexes for a passage: title and text, as DPR's Lucene index."""
    return f"{title} {text}"


class BM25Index:
    """bm25s over ``title + text`` of a corpus, with its :class:`PassageStore`.

    ``directory`` layout: ``bm25/`` (bm25s ``save``; loaded with ``mmap=True``), the store files
    and ``meta.json`` (written last: parameters, corpus fingerprint, bm25s version).
    """

    def __init__(self, retriever, store: PassageStore, meta: Mapping[str, Any],
                 tmp: tempfile.TemporaryDirectory | None = None) -> None:
        self.retriever, self.store, self.meta = retriever, store, dict(meta)
        self._tmp = tmp  # keeps an unnamed index's directory alive with the object
        self._stopwords = _stopwords()

    def __len__(self) -> int:
        return len(self.store)

    @classmethod
    def open(cls, corpus: str | None, directory: str | None, *, k1: float = 0.9, b: float = 0.4,
             method: str = "lucene", skip_bad: bool = True,
             report: SkipReport | None = None) -> "BM25Index":
        """Loads the index in ``directory`` or builds it from ``corpus`` (saved there if given).

        Defaults k1 = 0.9, b = 0.4 are Lucene/Anserini's, as used by Pyserini's BM25 for DPR.
        """
        if directory and os.path.exists(os.path.join(directory, "meta.json")):
            index = cls.load(directory)
            _check_fingerprint(directory, index.meta, corpus)
            want = {"k1": k1, "b": b, "method": method}
            have = {key: index.meta["bm25"][key] for key in want}
            if want != have:
                logging.warning("%s was built with %s; using it (not %s)", directory, have, want)
            logging.info("BM25 index loaded from %s (%d passages)", directory, len(index))
            return index
        if corpus is None:
            raise FileNotFoundError(f"no BM25 index in {directory} and no corpus to build one")
        rows = formats.read_corpus_tsv(corpus, skip_bad=skip_bad,
                                       report=report if report is not None else SkipReport())
        extra = {"corpus": corpus_fingerprint(corpus)}
        return cls.build(rows, directory, k1=k1, b=b, method=method, meta=extra)

    @classmethod
    def build(cls, rows: Iterable[tuple[str, str, str]], directory: str | None = None, *,
              k1: float = 0.9, b: float = 0.4, method: str = "lucene",
              meta: Mapping[str, Any] | None = None) -> "BM25Index":
        """Indexes (id, text, title) rows; saved to ``directory``, else to a private temp dir."""
        import bm25s  # lazy: heavy import (pulls in JAX)

        stop = _stopwords()
        vocab: dict[str, int] = {}
        docs: list[array.array] = []

        def on_row(pid: str, text: str, title: str) -> None:
            ids = array.array("i")  # ~4 bytes/token instead of a list of Python ints
            for tok in bm25_tokenize(bm25_document(title, text), stop):
                tid = vocab.get(tok)
                if tid is None:
                    tid = vocab[tok] = len(vocab)
                ids.append(tid)
            docs.append(ids)

        def build(out: str) -> None:
            t0 = time.perf_counter()
            n = PassageStore.write(out, rows, on_row)
            if n == 0:
                raise ValueError("the corpus has no passages")
            tok_s = time.perf_counter() - t0
            retriever = bm25s.BM25(k1=k1, b=b, method=method)
            retriever.index(bm25s.tokenization.Tokenized(ids=docs, vocab=vocab),
                            create_empty_token=False, show_progress=False)
            docs.clear()
            retriever.save(os.path.join(out, "bm25"), show_progress=False)
            info = {"format": _INDEX_FORMAT, "passages": n,
                    "bm25": {"k1": k1, "b": b, "method": method,
                             "bm25s_version": str(getattr(bm25s, "__version__", "unknown"))},
                    "tokenizer": {"pattern": TOKEN_PATTERN, "lower": True, "stopwords": "en",
                                  "document": "title + ' ' + text"},
                    "vocab_size": len(vocab), "tokenize_s": tok_s,
                    "index_s": time.perf_counter() - t0 - tok_s, **dict(meta or {})}
            _write_json(os.path.join(out, "meta.json"), info)  # last: marks the index complete
            logging.info("BM25 index: %d passages, %d terms, %.1f s", n, len(vocab),
                         time.perf_counter() - t0)

        if directory:
            _build_atomically(directory, build)
            return cls.load(directory)
        tmp = tempfile.TemporaryDirectory(prefix="dense_cf_bm25-")
        build(tmp.name)
        index = cls.load(tmp.name)
        index._tmp = tmp
        return index

    @classmethod
    def load(cls, directory: str) -> "BM25Index":
        import bm25s

        with open(os.path.join(directory, "meta.json")) as f:
            meta = json.load(f)
        if meta.get("format") != _INDEX_FORMAT:
            raise ValueError(f"{directory}: index format {meta.get('format')}, expected "
                             f"{_INDEX_FORMAT}: delete it to rebuild")
        retriever = bm25s.BM25.load(os.path.join(directory, "bm25"), mmap=True,
                                    show_progress=False)
        store = PassageStore(directory)
        if len(store) != retriever.scores["num_docs"]:
            raise ValueError(f"{directory}: store has {len(store)} passages, BM25 matrix "
                             f"{retriever.scores['num_docs']}: delete it to rebuild")
        return cls(retriever, store, meta)

    def search(self, questions: Sequence[str], k: int, *, threads: int = 0
               ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k corpus rows by BM25: (rows int64 [Q, k], scores float32 [Q, k]), best first."""
        k = min(int(k), len(self))
        if not questions:
            return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
        q_tokens = [bm25_tokenize(q, self._stopwords) for q in questions]
        # "auto" = bm25s's JAX top-k when JAX is installed (it is here): numpy's argpartition
        # is far slower on the mostly-zero score vector of a large corpus.
        docs, scores = self.retriever.retrieve(q_tokens, k=k, show_progress=False,
                                               n_threads=threads, backend_selection="auto")
        return np.asarray(docs, np.int64).reshape(len(questions), k), \
            np.asarray(scores, np.float32).reshape(len(questions), k)


# ---------------------------------------------------------------------------------------------
# Selecting negatives from a ranking


@dataclass
class MiningStats:
    """Counts of what mining kept and why candidates were excluded."""

    counts: Counter = field(default_factory=Counter)

    def add(self, other: Mapping[str, int]) -> None:
        self.counts.update(other)

    def as_dict(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))


def _ctx(pid: str, title: str, text: str, score: float) -> dict[str, Any]:
    """A DPR hard-negative ctx (title_score 0, as in DPR's files for non-title matches)."""
    return {"title": title, "text": text, "score": round(float(score), 4), "title_score": 0,
            "passage_id": pid}


def select_negatives(ranked: Iterable[tuple[int, float]],
                     lookup: Callable[[int], tuple[str, str, str]], *,
                     answers: Sequence[str], exclude_pids: Collection[str] = (),
                     exclude_keys: Collection[tuple[str, str]] = (), num: int,
                     answer_mode: str = "string", min_score: float | None = None,
                     skip_top: int = 0, stats: Counter | None = None) -> list[dict[str, Any]]:
    """The first ``num`` acceptable passages of ``ranked`` = (corpus row, score), best first.

    ``lookup(row)`` gives (id, title, text). Excluded, counted in ``stats`` under the name in
    brackets: the first ``skip_top`` ranks [skipped_top], rows with score ≤ ``min_score`` when
    given [excluded_low_score], ids in ``exclude_pids`` (normalised) [excluded_id], (title, text)
    keys in ``exclude_keys`` (see :func:`passage_key`) [excluded_text], repeats of an already
    selected text [excluded_duplicate] and answer-bearing texts (docs/method.md §6) [excluded_answer].
    """
    stats = stats if stats is not None else Counter()
    ex_pids = {normalize_pid(p) for p in exclude_pids}
    ex_keys = set(exclude_keys)
    picked: set[tuple[str, str]] = set()
    out: list[dict[str, Any]] = []
    for rank, (row, score) in enumerate(ranked):
        if len(out) >= num:
            break
        if row < 0:  # faiss pads short result lists with -1
            continue
        if rank < skip_top:
            stats["skipped_top"] += 1
            continue
        if min_score is not None and score <= min_score:
            stats["excluded_low_score"] += 1
            continue
        pid, title, text = lookup(int(row))
        key = passage_key(title, text)
        if normalize_pid(pid) in ex_pids:
            stats["excluded_id"] += 1
            continue
        if key in ex_keys:
            stats["excluded_text"] += 1
            continue
        if key in picked:
            stats["excluded_duplicate"] += 1
            continue
        if answers_lib.has_answer(answers, text, answer_mode):
            stats["excluded_answer"] += 1
            continue
        picked.add(key)
        out.append(_ctx(pid, title, text, score))
    return out


def bm25_negatives(index: BM25Index, questions: Sequence[str],
                   answers: Sequence[Sequence[str]], positive_ids: Sequence[Collection[str]], *,
                   num_negatives: int = 30, top_k: int = 100, answer_mode: str = "string",
                   threads: int = 0, batch_size: int = 1024,
                   stats: Counter | None = None) -> list[list[dict[str, Any]]]:
    """BM25 hard negatives (DPR ctx dicts) for in-memory questions; positives given by id."""
    out: list[list[dict[str, Any]]] = []
    for b in range(0, len(questions), batch_size):
        rows, scores = index.search(questions[b:b + batch_size], top_k, threads=threads)
        for i in range(len(rows)):
            q = b + i
            out.append(select_negatives(zip(rows[i].tolist(), scores[i].tolist()),
                                        index.store.get, answers=answers[q],
                                        exclude_pids=positive_ids[q], num=num_negatives,
                                        answer_mode=answer_mode, min_score=0.0, stats=stats))
    return out


# ---------------------------------------------------------------------------------------------
# Mining a biencoder file (shared by BM25 and model mining)

# rank(questions) -> per question a list of (corpus row, score), best first.
RankFn = Callable[[list[str]], list[list[tuple[int, float]]]]


def _exclusions(ex: BiencoderExample, existing: str) -> tuple[set[str], set[tuple[str, str]]]:
    ctxs = list(ex.positive_ctxs)
    if existing == "append":
        ctxs += ex.hard_negative_ctxs  # never mine a passage twice
    pids = {normalize_pid(p.passage_id) for p in ctxs if p.passage_id is not None}
    keys = {passage_key(p.title, p.text) for p in ctxs}
    return pids, keys


def mine_file(input_path: str, output: str, *, rank: RankFn,
              lookup: Callable[[int], tuple[str, str, str]], settings: Mapping[str, Any],
              num_negatives: int, answer_mode: str = "string", existing: str = "replace",
              min_score: float | None = None, skip_top: int = 0, shard_size: int = 5000,
              batch_size: int = 1024, work_dir: str | None = None, keep_parts: bool = False,
              skip_bad: bool = True, writer: bool = True) -> dict[str, Any]:
    """Mines ``hard_negative_ctxs`` for every record of ``input_path`` into ``output``.

    Records are processed in shards of ``shard_size`` (resumable, see :mod:`writers`), questions
    ranked ``batch_size`` at a time by ``rank``. ``existing`` = "replace" drops the input's hard
    negatives; "append" keeps them first and adds up to ``num_negatives`` new ones. ``writer``
    False (non-zero hosts of a multi-host job) computes but writes nothing. Returns the summary.
    """
    if existing not in EXISTING_MODES:
        raise ValueError(f"existing must be one of {EXISTING_MODES}, got {existing!r}")
    if num_negatives < 1 or shard_size < 1 or batch_size < 1:
        raise ValueError("num_negatives, shard_size and batch_size must be >= 1")
    work_dir = work_dir or f"{output}.parts"
    settings = {**dict(settings), "input": os.path.abspath(input_path),
                "input_bytes": os.path.getsize(input_path), "num_negatives": num_negatives,
                "answer_mode": answer_mode, "existing": existing, "skip_top": skip_top,
                "min_score": min_score, "shard_size": shard_size}
    parts = ShardedParts(work_dir, settings, read_only=not writer)
    report = SkipReport()
    stats = MiningStats()
    t0 = time.perf_counter()
    timing = {"mined": 0, "reused_shards": 0}

    def process(shard: int, records: list[tuple[int, dict, BiencoderExample]]) -> None:
        if parts.is_done(shard):
            stats.add(parts.stats(shard))
            timing["reused_shards"] += 1
            logging.info("shard %d already mined, reused", shard)
            return
        counts: Counter = Counter()
        out: list[dict] = []
        for b in range(0, len(records), batch_size):
            batch = records[b:b + batch_size]
            ranked = rank([ex.question for _, _, ex in batch])
            for (_, raw, ex), cands in zip(batch, ranked):
                pids, keys = _exclusions(ex, existing)
                mined = select_negatives(cands, lookup, answers=ex.answers, exclude_pids=pids,
                                         exclude_keys=keys, num=num_negatives,
                                         answer_mode=answer_mode, min_score=min_score,
                                         skip_top=skip_top, stats=counts)
                rec = dict(raw)
                old = list(raw.get("hard_negative_ctxs") or []) if existing == "append" else []
                rec["hard_negative_ctxs"] = old + mined
                counts["questions"] += 1
                counts["negatives"] += len(mined)
                counts["questions_short"] += len(mined) < num_negatives
                out.append(rec)
            timing["mined"] += len(batch)
            dt = time.perf_counter() - t0
            logging.info("shard %d: %d/%d questions; %d mined this run (%.1f q/s)", shard,
                         min(b + batch_size, len(records)), len(records), timing["mined"],
                         timing["mined"] / max(dt, 1e-9))
        parts.write(shard, out, counts)
        stats.add(counts)

    shard, buf, n_records = 0, [], 0
    done = parts.is_done(0)  # a done shard's records are read (for counts) but not kept
    for index, raw, ex in formats.iter_biencoder_records(input_path, skip_bad=skip_bad,
                                                         report=report):
        n_records = index + 1
        while index // shard_size > shard:
            process(shard, buf)
            shard, buf = shard + 1, []
            done = parts.is_done(shard)
        if raw is not None and not done:
            buf.append((index, raw, ex))
    num_shards = -(-n_records // shard_size)
    if shard < num_shards:
        process(shard, buf)
    if report.total:
        report.log()
    summary = {"input": input_path, "output": output, "records": n_records,
               "skipped_records": report.total,
               "skipped_by_reason": {f"{r}": n for (_, r), n in sorted(report.counts.items())},
               "shards": num_shards, "reused_shards": timing["reused_shards"],
               "mined_this_run": timing["mined"],
               "questions_per_s": timing["mined"] / max(time.perf_counter() - t0, 1e-9),
               "stats": stats.as_dict(), "settings": settings}
    if writer:
        written = parts.assemble(output, num_shards)
        summary["written"] = written
        _write_json(f"{output}.meta.json", summary)
        if not keep_parts:
            parts.remove()
    logging.info("mined %s -> %s: %s", input_path, output, json.dumps(summary["stats"]))
    return summary


def mine_bm25(input_path: str, corpus: str | None, output: str, *, num_negatives: int = 30,
              top_k: int = 100, answer_mode: str = "string", index_dir: str | None = None,
              existing: str = "replace", threads: int = 0, batch_size: int = 1024,
              shard_size: int = 5000, work_dir: str | None = None, keep_parts: bool = False,
              skip_bad: bool = True, k1: float = 0.9, b: float = 0.4) -> dict[str, Any]:
    """BM25 hard negatives for a biencoder file (see the module docstring); returns the summary."""
    if top_k < num_negatives:
        raise ValueError(f"top_k ({top_k}) must be >= num_negatives ({num_negatives})")
    corpus_report = SkipReport()
    index = BM25Index.open(corpus, index_dir, k1=k1, b=b, skip_bad=skip_bad,
                           report=corpus_report)
    if corpus_report.total:
        corpus_report.log()
    if not index_dir:
        logging.warning("no --index_dir: the BM25 index is discarded after this run "
                        "(pass --index_dir to build it once and reuse it)")

    def rank(questions: list[str]) -> list[list[tuple[int, float]]]:
        rows, scores = index.search(questions, top_k, threads=threads)
        return [list(zip(r.tolist(), s.tolist())) for r, s in zip(rows, scores)]

    settings = {"kind": "bm25", "top_k": top_k, "bm25": index.meta["bm25"],
                "tokenizer": index.meta["tokenizer"], "corpus_passages": len(index),
                "corpus": index.meta.get("corpus")}
    summary = mine_file(input_path, output, rank=rank, lookup=index.store.get, settings=settings,
                        num_negatives=num_negatives, answer_mode=answer_mode, existing=existing,
                        min_score=0.0, shard_size=shard_size, batch_size=batch_size,
                        work_dir=work_dir, keep_parts=keep_parts, skip_bad=skip_bad)
    summary["corpus_skipped_rows"] = corpus_report.total
    return summary


def main(argv: Sequence[str]) -> None:
    del argv
    f = flags.FLAGS
    summary = mine_bm25(f.input, f.corpus, f.output, num_negatives=f.num_negatives,
                        top_k=f.top_k, answer_mode=f.answer_mode, index_dir=f.index_dir,
                        existing=f.existing, threads=f.threads, batch_size=f.batch_size,
                        shard_size=f.shard_size, work_dir=f.work_dir, keep_parts=f.keep_parts,
                        skip_bad=not f.strict, k1=f.k1, b=f.b)
    print(json.dumps(summary, indent=2, default=str))


def define_common_flags(flags) -> None:
    """Flags shared by the BM25 and model miners."""
    flags.DEFINE_string("input", None, "DPR biencoder JSON[.gz] whose questions are mined for.")
    flags.DEFINE_string("corpus", None, "Corpus TSV[.gz] (id, text, title), e.g. psgs_w100.tsv.")
    flags.DEFINE_string("output", None, "Output biencoder JSON[.gz] with hard_negative_ctxs.")
    flags.DEFINE_integer("num_negatives", 30, "Hard negatives kept per question.")
    flags.DEFINE_enum("answer_mode", "string", ["string", "regex"],
                      "DPR has_answer mode (regex for CuratedTREC).")
    flags.DEFINE_enum("existing", "replace", list(EXISTING_MODES),
                      "Input hard negatives: replace them, or keep them and append mined ones.")
    flags.DEFINE_integer("batch_size", 1024, "Questions ranked per batch.")
    flags.DEFINE_integer("shard_size", 5000, "Input records per resumable output shard.")
    flags.DEFINE_string("work_dir", None, "Shard directory (default: <output>.parts).")
    flags.DEFINE_bool("keep_parts", False, "Keep the shard directory after assembly.")
    flags.DEFINE_bool("strict", False, "Raise on the first bad input record instead of skipping.")
    flags.mark_flags_as_required(["input", "output"])


if __name__ == "__main__":
    define_common_flags(flags)
    flags.DEFINE_integer("top_k", 100, "BM25 passages retrieved per question.")
    flags.DEFINE_string("index_dir", None, "Where the BM25 index is saved/loaded (build once).")
    flags.DEFINE_integer("threads", 0, "bm25s retrieval threads (0 = sequential, -1 = all).")
    flags.DEFINE_float("k1", 0.9, "BM25 k1 (Lucene/Anserini default).")
    flags.DEFINE_float("b", 0.4, "BM25 b (Lucene/Anserini default).")
    app.run(main)
