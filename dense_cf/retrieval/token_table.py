"""Pre-tokenised corpus: every passage's word pieces once, as a uint16 token table beside the
corpus TSV, so an export slices arrays instead of tokenising (issue 47;
../shared/reviews/gpu-levers.md §5.2 lever 2: tokenisation was 40 % of the export's time).

Layout, a directory ``<corpus>.tokens-<key>/`` (``key``: the tokenizer's and ``max_p_len``'s
hash, so each vocabulary/length has its own table)::

    tokens.npy     uint16 [T]       every passage's row, back to back
    offsets.npy    int64  [n + 1]   passage i is tokens[offsets[i]:offsets[i + 1]]
    pid_hash.npy   uint64 [n]       blake2b-64 of the passage ids, sorted
    pid_row.npy    int64  [n]       the corpus row of each sorted hash
    table.json     written last: format, max_p_len, tokenizer sha256, the corpus file's size,
                   mtime and sha256, and the rows' fingerprint (``export.rows_fingerprint``,
                   the export manifest's ``corpus``)

A row is exactly what ``inputs.tokens.tokenize_passages`` pads: ``[CLS] title [SEP] text``
cut to ``max_p_len - 1`` plus ``[SEP]``; :meth:`TokenTable.tokenize` pads it the same way, so an
export from the table equals the TSV export bit for bit (tests/test_token_table.py). A table
whose corpus file changed (size or mtime, then its sha256) or whose tokenizer differs is
rebuilt; a passage id the table lacks is an error naming it. ``SHA256SUMS`` (``files.write_sums``)
holds the sha256 of the arrays and ``table.json``; a table whose bytes changed since is refused
when opened, in one line naming the file (issue 49).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from absl import logging

from dense_cf import files
from dense_cf.datasets.formats import read_corpus_tsv
from dense_cf.inputs.tokens import passage_rows, special_ids
from dense_cf.retrieval.export import rows_fingerprint

FORMAT = 1
TABLE_JSON = "table.json"
_ARRAYS = ("tokens.npy", "offsets.npy", "pid_hash.npy", "pid_row.npy")
_BUILD_CHUNK = 20_000


def tokenizer_sha256(tokenizer) -> str:
    """sha256 of the tokenizer's whole JSON (vocabulary, normaliser, pre-tokeniser)."""
    return hashlib.sha256(tokenizer.to_str().encode("utf-8")).hexdigest()


def pid_hashes(pids: Sequence[str]) -> np.ndarray:
    """uint64 blake2b-64 of each passage id."""
    return np.fromiter((int.from_bytes(hashlib.blake2b(p.encode("utf-8"), digest_size=8).digest(),
                                       "little") for p in pids), np.uint64, count=len(pids))


def table_dir(corpus: str, tokenizer, max_p_len: int) -> str:
    key = files.sha256_hex(FORMAT, tokenizer_sha256(tokenizer), int(max_p_len))[:12]
    return f"{os.path.abspath(corpus)}.tokens-{key}"


def _file_state(path: str) -> dict[str, Any]:
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


class TokenTable:
    """A loaded table (memory-mapped); :meth:`tokenize` is ``export_passages``'s ``tokenize``."""

    def __init__(self, path: str) -> None:
        self.path = path
        if os.path.exists(os.path.join(path, files.SUMS_NAME)):  # tables of issue 49 on
            files.verify_sums(os.path.join(path, files.SUMS_NAME),
                              f"delete {path} and run the same command again to rebuild it")
        with open(os.path.join(path, TABLE_JSON), encoding="utf-8") as f:
            self.meta = json.load(f)
        self.max_p_len = int(self.meta["max_p_len"])
        self.tokens = np.load(os.path.join(path, "tokens.npy"), mmap_mode="r")
        self.offsets = np.load(os.path.join(path, "offsets.npy"))
        self.pid_hash = np.load(os.path.join(path, "pid_hash.npy"))
        self.pid_row = np.load(os.path.join(path, "pid_row.npy"))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def rows_of(self, pids: Sequence[str]) -> np.ndarray:
        """Corpus rows of passage ids; an id not in the table raises, naming it."""
        h = pid_hashes(pids)
        at = np.searchsorted(self.pid_hash, h)
        at = np.minimum(at, len(self.pid_hash) - 1)
        missing = np.flatnonzero(self.pid_hash[at] != h)
        if missing.size:
            raise ValueError(f"{self.path}: passage id {pids[int(missing[0])]!r} is not in the "
                             f"token table ({self.meta['corpus_file']}); rebuild it "
                             f"(delete the directory) or export from the TSV")
        return self.pid_row[at]

    def padded(self, rows: np.ndarray, pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """int32 ids/mask [len(rows), max_p_len] of corpus rows, as ``tokenize_passages``."""
        start, end = self.offsets[rows], self.offsets[rows + 1]
        lengths = (end - start).astype(np.int64)
        mask = (np.arange(self.max_p_len)[None] < lengths[:, None]).astype(np.int32)
        ids = np.full((len(rows), self.max_p_len), pad_id, np.int32)
        flat = np.repeat(start - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths) + \
            np.arange(int(lengths.sum()))
        ids[mask.astype(bool)] = self.tokens[flat] if flat.size else []
        return ids, mask

    def tokenize(self, chunk: Sequence[tuple[str, str, str]]) -> tuple[np.ndarray, np.ndarray]:
        """Rows (id, text, title) -> padded ids/mask, looked up by id."""
        return self.padded(self.rows_of([r[0] for r in chunk]))


def _chunked(rows, size: int) -> Iterator[list]:
    chunk: list = []
    for r in rows:
        chunk.append(r)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def build(corpus: str, tokenizer, max_p_len: int, out: str | None = None) -> TokenTable:
    """Tokenises ``corpus`` (a DPR TSV) once into a table (module docstring); atomic (a temp
    directory renamed into place)."""
    if tokenizer.get_vocab_size() > np.iinfo(np.uint16).max + 1:
        raise ValueError(f"a uint16 token table holds ids < 65536; the tokenizer has "
                         f"{tokenizer.get_vocab_size()}")
    out = out or table_dir(corpus, tokenizer, max_p_len)
    tmp = f"{out}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    t0 = time.perf_counter()
    state = _file_state(corpus)
    _, sep_id = special_ids(tokenizer)
    parts: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    pids: list[str] = []
    pending: list[tuple[str, str, str]] = []

    def flush() -> None:
        if not pending:
            return
        bodies, _, _, _ = passage_rows(tokenizer, [r[2] for r in pending], [r[1] for r in pending],
                                       keep=max_p_len, sentences=False)
        rows = [b[:max_p_len - 1] + [sep_id] for b in bodies]  # = inputs.tokens.pad_rows
        lengths.append(np.fromiter((len(r) for r in rows), np.int64, count=len(rows)))
        parts.append(np.fromiter((t for r in rows for t in r), np.uint16))
        pids.extend(r[0] for r in pending)
        pending.clear()

    def tap() -> Iterator[tuple[str, str, str]]:
        for row in read_corpus_tsv(corpus, skip_bad=True):
            pending.append(row)
            if len(pending) == _BUILD_CHUNK:
                flush()
            yield row

    fingerprint = rows_fingerprint(tap(), source=os.path.abspath(corpus))
    flush()
    n = fingerprint["passages"]
    offsets = np.zeros(n + 1, np.int64)
    if n:
        np.cumsum(np.concatenate(lengths), out=offsets[1:])
    hashes = pid_hashes(pids)
    order = np.argsort(hashes, kind="stable")
    if n and np.any(hashes[order][1:] == hashes[order][:-1]):
        raise ValueError(f"{corpus}: two passage ids share a 64-bit hash; the token table "
                         "cannot index this corpus")
    files.atomic_save_npy(os.path.join(tmp, "tokens.npy"),
                          np.concatenate(parts) if parts else np.zeros(0, np.uint16))
    files.atomic_save_npy(os.path.join(tmp, "offsets.npy"), offsets)
    files.atomic_save_npy(os.path.join(tmp, "pid_hash.npy"), hashes[order])
    files.atomic_save_npy(os.path.join(tmp, "pid_row.npy"), order.astype(np.int64))
    meta = {"format": FORMAT, "max_p_len": int(max_p_len),
            "tokenizer_sha256": tokenizer_sha256(tokenizer),
            "corpus_file": os.path.abspath(corpus), **state,
            "corpus_file_sha256": files.file_sha256(corpus), "corpus": fingerprint,
            "passages": n, "tokens": int(offsets[-1]),
            "build_s": round(time.perf_counter() - t0, 2)}
    files.write_json(os.path.join(tmp, TABLE_JSON), meta)
    files.write_sums(os.path.join(tmp, files.SUMS_NAME),  # checked by TokenTable (issue 49)
                     [os.path.join(tmp, n) for n in (*_ARRAYS, TABLE_JSON)])
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    logging.info("token table %s: %d passages, %d tokens in %.1f s", out, n, meta["tokens"],
                 meta["build_s"])
    return TokenTable(out)


def _current(path: str, corpus: str, tokenizer, max_p_len: int) -> bool:
    try:
        with open(os.path.join(path, TABLE_JSON), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return False
    if meta.get("format") != FORMAT or meta.get("max_p_len") != int(max_p_len) or \
            meta.get("tokenizer_sha256") != tokenizer_sha256(tokenizer):
        return False
    state = _file_state(corpus)
    if state == {"size": meta.get("size"), "mtime_ns": meta.get("mtime_ns")}:
        return True
    # touched: the same bytes still count (a copy, a restored mtime)
    return state["size"] == meta.get("size") and \
        files.file_sha256(corpus) == meta.get("corpus_file_sha256")


def open_table(corpus: str, tokenizer, max_p_len: int) -> TokenTable:
    """The table of ``corpus`` for this tokenizer and length: reused when current, else built."""
    path = table_dir(corpus, tokenizer, max_p_len)
    if _current(path, corpus, tokenizer, max_p_len):
        return TokenTable(path)
    if os.path.exists(path):
        logging.info("token table %s is stale (corpus or tokenizer changed): rebuilding", path)
    return build(corpus, tokenizer, max_p_len, path)
