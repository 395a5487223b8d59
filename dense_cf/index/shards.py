"""The export directory's shard layout: the one place that names, lists, checks and reads it.

:mod:`dense_cf.retrieval.export` writes the shards (with :func:`shard_name`); the faiss, JAX
and re-ranking indexes read them through :class:`ExportShards`. Layout (module docstring of
``retrieval/export.py``)::

    embeddings-00000.npy   float16/float32 [n_k, D]
    ids-00000.npy          int64 [n_k]
    ...                    (pids-K.txt, spids-K.npy, shard-K.json: the writer's own)
    manifest.json          written last; its ``count`` is the rows of a complete export
    SHA256SUMS             sha256 of every shard file and the manifest (``files.write_sums``)

Shards are read through memory maps: only the rows asked for are paged in. Before an export is
read its files are checked against ``SHA256SUMS`` (:func:`verify_export`, once per process).
"""

from __future__ import annotations

import json
import os
import re
from typing import Iterable, Iterator

import numpy as np

from dense_cf import files

__all__ = ["EMBEDDINGS_RE", "MANIFEST", "SHARD_FILE_RE", "ExportShards", "check_ids",
           "check_unique", "check_vectors", "list_shards", "shard_name", "verify_export",
           "REBUILD_EXPORT_FILE"]

MANIFEST = "manifest.json"
EMBEDDINGS_RE = re.compile(r"^embeddings-(\d+)\.npy$")
# Every per-shard file the writer makes (what a shorter re-export removes beyond its last).
SHARD_FILE_RE = re.compile(r"(?:embeddings|ids|pids|spids|shard)-(\d{5})\.(?:npy|txt|json)")


def shard_name(kind: str, k: int, ext: str = "npy") -> str:
    """``<kind>-<k:05d>.<ext>``, e.g. ``embeddings-00003.npy``."""
    return f"{kind}-{k:05d}.{ext}"


# How to rebuild a damaged export file: its shard is re-encoded (a shard with a file missing is
# not done), or, for manifest.json, every shard is checked again and the manifest rewritten.
REBUILD_EXPORT_FILE = ("delete that file and run the same command again (its shard is "
                       "re-encoded; other shards are kept)")


def verify_export(emb_dir: str, only: Iterable[str] | None = None) -> bool:
    """Checks an export's files (``only``: these names) against its ``SHA256SUMS``; raises
    :class:`~dense_cf.files.IntegrityError` naming the first changed file. False when the
    export has no ``SHA256SUMS`` (written before checksums): nothing to check."""
    sums = os.path.join(emb_dir, files.SUMS_NAME)
    if not os.path.exists(sums):
        return False
    files.verify_sums(sums, REBUILD_EXPORT_FILE, only)
    return True


def list_shards(emb_dir: str) -> list[tuple[str, str]]:
    """(embeddings-K.npy, ids-K.npy) path pairs of an export directory, by shard number."""
    if not os.path.isdir(emb_dir):
        raise FileNotFoundError(f"embedding directory {emb_dir} does not exist")
    found = []
    for name in os.listdir(emb_dir):
        m = EMBEDDINGS_RE.match(name)
        if m:
            found.append((int(m.group(1)), os.path.join(emb_dir, name),
                          os.path.join(emb_dir, f"ids-{m.group(1)}.npy")))
    if not found:
        raise ValueError(f"no embedding shards (embeddings-XXXXX.npy) in {emb_dir}")
    found.sort()
    return [(e, i) for _, e, i in found]


def check_ids(ids: np.ndarray, where: str) -> np.ndarray:
    """``ids`` as int64 after checking they are a 1-D array of non-negative integers."""
    ids = np.asarray(ids)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"{where}: ids must be a 1-D integer array, got {ids.dtype} {ids.shape}")
    ids = ids.astype(np.int64, copy=False)
    if ids.size and ids.min() < 0:
        raise ValueError(f"{where}: ids must be >= 0 (faiss uses -1 for 'no result')")
    return ids


def check_vectors(v: np.ndarray, where: str, dim: int | None = None) -> np.ndarray:
    """``v`` after checking it is a 2-D float array (of ``dim`` columns when given)."""
    v = np.asarray(v)
    if v.ndim != 2 or not np.issubdtype(v.dtype, np.floating):
        raise ValueError(f"{where}: embeddings must be a 2-D float array, got {v.dtype} {v.shape}")
    if dim is not None and v.shape[1] != dim:
        raise ValueError(f"{where}: embedding dim {v.shape[1]} != {dim} of the first chunk")
    return v


def check_unique(ids: np.ndarray, where: str) -> None:
    u, counts = np.unique(ids, return_counts=True)
    if len(u) != len(ids):
        dup = u[counts > 1][:5].tolist()
        raise ValueError(f"{where}: duplicate ids, e.g. {dup}")


class ExportShards:
    """An export directory's shards, checked: one float dimension, an ids file per shard with
    one id per row, ids unique, and the row count of ``manifest.json`` when there is one (a
    mismatch is a partial or mixed export). Rows are numbered shard after shard.

    Reads: rows by position (:meth:`read`, :meth:`sample`, :meth:`chunks`) or by id
    (:meth:`locate`, :meth:`gather`). Exports number rows 0..N-1 shard after shard, so when
    every shard's ids are one contiguous range only (first id, count) per shard is kept for
    the id map; otherwise a sorted id table (16 bytes per row).
    """

    def __init__(self, emb_dir: str):
        self.dir = emb_dir
        self.files = list_shards(emb_dir)  # raises on an empty or missing directory
        verify_export(emb_dir)
        counts, self.dim, first, all_ids = [], None, None, []
        for emb_path, ids_path in self.files:
            arr = np.load(emb_path, mmap_mode="r")  # the header only; no data is read
            try:
                check_vectors(arr, emb_path)
                if self.dim is None:
                    self.dim, first = int(arr.shape[1]), emb_path
                elif arr.shape[1] != self.dim:
                    raise ValueError(f"{emb_path}: embedding dim {arr.shape[1]} != {self.dim} "
                                     f"of {first}")
                n = int(arr.shape[0])
            finally:
                del arr
            if not os.path.exists(ids_path):
                raise FileNotFoundError(f"{ids_path} missing (ids of {emb_path})")
            ids = check_ids(np.load(ids_path), ids_path)
            if len(ids) != n:
                raise ValueError(f"{ids_path}: {len(ids)} ids for {n} rows of {emb_path}")
            counts.append(n)
            all_ids.append(ids)
        self.counts = np.asarray(counts, np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self.n = int(self.counts.sum())
        if self.n == 0:
            raise ValueError(f"{emb_dir}: embedding shards hold 0 rows")
        self._id_map(all_ids)
        self._check_manifest()
        self._maps: dict[int, np.ndarray] = {}

    @property
    def rows(self) -> list[int]:
        """Rows per shard."""
        return [int(c) for c in self.counts]

    def ids(self) -> np.ndarray:
        """int64 [n]: the id of every row, in row order."""
        return np.concatenate([np.load(i).astype(np.int64, copy=False) for _, i in self.files])

    def _id_map(self, all_ids: list[np.ndarray]) -> None:
        firsts = [int(ids[0]) if len(ids) else 0 for ids in all_ids]
        contiguous = all(np.array_equal(ids, f + np.arange(len(ids)))
                         for ids, f in zip(all_ids, firsts))
        if contiguous:
            order = np.argsort(firsts, kind="stable")
            starts = np.asarray(firsts, np.int64)[order]
            contiguous = not np.any(starts[1:] < (starts + self.counts[order])[:-1])
        if contiguous:  # disjoint ranges: ids are unique
            self._id_starts, self._order, self._table = starts, order, None
            return
        ids = np.concatenate(all_ids)
        check_unique(ids, self.dir)
        sort = np.argsort(ids, kind="stable")
        shard = np.repeat(np.arange(len(self.files)), self.counts)
        row = np.concatenate([np.arange(c) for c in self.counts])
        self._table = (ids[sort], shard[sort], row[sort])

    def _check_manifest(self) -> None:
        # The exporter writes manifest.json last; a count mismatch means a partial export.
        path = os.path.join(self.dir, MANIFEST)
        if not os.path.exists(path):
            return
        try:
            with open(path) as f:
                count = json.load(f).get("count")
        except (OSError, ValueError, AttributeError):
            return
        if isinstance(count, int) and count != self.n:
            raise ValueError(f"{path} says count={count} but the shards hold {self.n} rows "
                             "(incomplete or mixed export)")

    def _array(self, shard: int, keep: bool) -> np.ndarray:
        if shard not in self._maps:
            if not keep:  # one open map at a time: pages are dropped as a scan moves on
                self._maps.clear()
            self._maps[shard] = np.load(self.files[shard][0], mmap_mode="r")
        return self._maps[shard]

    # by position ---------------------------------------------------------------------------
    def read(self, lo: int, hi: int, out: np.ndarray) -> None:
        """Rows [lo, hi) into ``out[:hi - lo]`` (converted to its dtype)."""
        f = int(np.searchsorted(self.starts, lo, side="right")) - 1
        at = lo
        while at < hi:
            a, z = at - self.starts[f], min(hi, self.starts[f + 1]) - self.starts[f]
            out[at - lo:at - lo + z - a] = self._array(f, keep=False)[a:z]
            at += z - a
            f += 1
        if hi >= self.n:
            self._maps.clear()

    def sample(self, size: int, seed: int) -> np.ndarray:
        """float32 rows drawn uniformly without replacement (in row order), one shard read at
        a time, sequentially: random memory-mapped reads would be slower on disk."""
        rows = np.sort(np.random.default_rng(seed).choice(self.n, size=min(size, self.n),
                                                          replace=False))
        out = np.empty((len(rows), self.dim), np.float32)
        filled = 0
        for (emb_path, _), start, n in zip(self.files, self.starts, self.counts):
            lo, hi = np.searchsorted(rows, [start, start + n])
            if hi > lo:
                out[filled:filled + hi - lo] = np.load(emb_path)[rows[lo:hi] - start]
                filled += hi - lo
        return out

    def chunks(self) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
        """(shard file name, vectors, int64 ids) of each non-empty shard, one held at a time."""
        for emb_path, ids_path in self.files:
            v = np.load(emb_path)
            ids = np.load(ids_path).astype(np.int64, copy=False)
            if len(v):
                yield os.path.basename(emb_path), v, ids
            del v, ids

    # by id ---------------------------------------------------------------------------------
    @property
    def lookup_bytes(self) -> int:
        """RAM of the id -> row map (0 for contiguous exports)."""
        return 0 if self._table is None else int(sum(a.nbytes for a in self._table))

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard, row) of each id (int64 [n] each); raises on an id the export lacks."""
        ids = np.asarray(ids, np.int64)
        if self._table is None:
            pos = np.searchsorted(self._id_starts, ids, side="right") - 1
            shard = self._order[np.maximum(pos, 0)]
            row = ids - self._id_starts[np.maximum(pos, 0)]
            bad = (pos < 0) | (row >= self.counts[shard])
        else:
            table_ids, table_shard, table_row = self._table
            pos = np.minimum(np.searchsorted(table_ids, ids), len(table_ids) - 1)
            bad = table_ids[pos] != ids
            shard, row = table_shard[pos], table_row[pos]
        if np.any(bad):
            raise ValueError(f"{self.dir}: ids {ids[bad][:5].tolist()} returned by the index are "
                             "not in the export (index built from another export?)")
        return shard, row

    def gather(self, ids: np.ndarray) -> np.ndarray:
        """float32 [n, D] stored vectors of ``ids``, read shard by shard in row order
        (sequential-ish reads of the memory maps, which stay open for the next call)."""
        shard, row = self.locate(ids)
        out = np.empty((len(ids), self.dim), np.float32)
        for s in np.unique(shard):
            sel = np.nonzero(shard == s)[0]
            sel = sel[np.argsort(row[sel], kind="stable")]
            out[sel] = self._array(int(s), keep=True)[row[sel]]
        return out
