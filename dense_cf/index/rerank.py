"""Compressed index + exact re-ranking from memory-mapped export shards (docs/scale.md,
"Index: 21M × 768 in 8 GB").

A :class:`RerankIndex` wraps any :class:`~dense_cf.index.base.Index` (typically a compressed
faiss index, the only thing kept in RAM: IVF-PQ codes, inverted lists, coarse centroids; or a
16-bit JaxIndex), asks it for the top ``depth`` candidates of each query, reads those
candidates' stored vectors from the export shards ``embeddings-K.npy`` opened with
``np.load(mmap_mode="r")`` and returns the top k by their exact inner products. The shards are
never loaded whole: only the candidate rows are read, through the page cache (which the kernel
may drop; it is not the process's RSS).

Scores are the inner products of the float32 query with the stored rows (float16 rows are
widened to float32), i.e. the scores a flat index built from the same shards gives, so every
candidate that is in the exact top-k comes back with its exact score and rank. Results:
scores float32 descending, equal scores by lower id, missing results id -1 / score -inf (as
``DenseIndex.search``).

Saved form: the wrapped index's directory (its ``index.json`` and files) plus
``rerank.json`` = candidate depth, the export directory and its fingerprint (name, size and
mtime of every shard file, the export manifest's sha256). :meth:`RerankIndex.load` refuses an
export that changed since (a re-export writes new files), naming the file that differs.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from dense_cf import files
from dense_cf.index.base import Index, merge_topk
from dense_cf.index.faiss_index import (
    _GPU_MAX_K,
    IndexSpec,
    build_index_from_dir,
    bytes_per_vector,
)
from dense_cf.index.shards import ExportShards, list_shards

__all__ = ["RERANK_NAME", "RerankIndex", "build_rerank_index", "is_rerank_index",
           "projected_bytes", "rerank_topk", "source_fingerprint"]

RERANK_NAME = "rerank.json"
_RERANK_FORMAT = "dense_cf.rerank"
_GATHER_BYTES = 64 << 20  # candidate rows (float32) held at once while re-ranking


# --------------------------------------------------------------------------------------------
# The export shards, memory-mapped
# --------------------------------------------------------------------------------------------

def source_fingerprint(emb_dir: str) -> dict[str, Any]:
    """What a re-ranking index records about its export directory: every embeddings/ids shard
    as [name, size, mtime_ns] and the sha256 of ``manifest.json`` (None when absent)."""
    shards = []
    for emb_path, ids_path in list_shards(emb_dir):
        for path in (emb_path, ids_path):
            st = os.stat(path)
            shards.append([os.path.basename(path), int(st.st_size), int(st.st_mtime_ns)])
    manifest = os.path.join(emb_dir, "manifest.json")
    digest = None
    if os.path.exists(manifest):
        with open(manifest, "rb") as f:
            digest = files.content_sha256([f.read()])
    return {"shards": shards, "manifest_sha256": digest}


def _fingerprint_difference(want: dict[str, Any], have: dict[str, Any]) -> str | None:
    """A sentence naming the first difference between two fingerprints, or None."""
    old = {s[0]: s[1:] for s in want.get("shards", [])}
    new = {s[0]: s[1:] for s in have.get("shards", [])}
    for name in sorted(set(old) | set(new)):
        if name not in new:
            return f"{name} is gone"
        if name not in old:
            return f"{name} is new"
        if old[name] != new[name]:
            return (f"{name} changed (size, mtime {old[name][0]}, {old[name][1]} -> "
                    f"{new[name][0]}, {new[name][1]})")
    if want.get("manifest_sha256") != have.get("manifest_sha256"):
        return "manifest.json changed"
    return None


# --------------------------------------------------------------------------------------------
# Re-ranking (pure given the rows)
# --------------------------------------------------------------------------------------------

def rerank_topk(queries: np.ndarray, cand_ids: np.ndarray, vectors: np.ndarray, k: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Top k of each query's candidates by exact inner product.

    ``queries`` [Q, D], ``cand_ids`` [Q, R] (-1 = no candidate), ``vectors`` [Q, R, D] the
    candidates' stored vectors (anything at a -1). Returns (scores [Q, k], ids [Q, k]) ordered
    as :func:`merge_topk` (score desc, lower id on ties, missing last as (-inf, -1)).
    """
    q = np.asarray(queries, np.float32)
    scores = np.einsum("qd,qrd->qr", q, np.asarray(vectors, np.float32))
    return merge_topk([scores], [cand_ids], k)


# --------------------------------------------------------------------------------------------
# The index
# --------------------------------------------------------------------------------------------

class RerankIndex:
    """Any ``base`` index whose top ``depth`` candidates are re-scored exactly from the export
    shards in ``source_dir`` (module docstring). Searches like ``DenseIndex``.

    ``fingerprint`` (from a saved index) is checked against the export now; None records the
    export as it is.
    """

    def __init__(self, base: Index, source_dir: str, depth: int, *,
                 fingerprint: dict[str, Any] | None = None, where: str = ""):
        depth = int(depth)
        if depth < 1:
            raise ValueError(f"re-ranking depth must be >= 1, got {depth}")
        if getattr(base, "on_gpu", False) and depth > _GPU_MAX_K:
            raise ValueError(f"re-ranking depth {depth} exceeds the faiss GPU limit {_GPU_MAX_K} "
                             "on candidates: lower it or search the compressed index on CPU")
        have = source_fingerprint(source_dir)
        if fingerprint is not None:
            diff = _fingerprint_difference(fingerprint, have)
            if diff is not None:
                raise ValueError(f"{where or 'rerank index'}: the export {source_dir} is not the "
                                 f"one this index was built from ({diff}); rebuild the index")
        self.rows = ExportShards(source_dir)
        if self.rows.dim != base.dim or self.rows.n != base.ntotal:
            raise ValueError(f"{where or 'rerank index'}: export {source_dir} holds "
                             f"{self.rows.n} x {self.rows.dim}, the index {base.ntotal} x "
                             f"{base.dim}: rebuild the index")
        self.base = base
        self.source_dir = os.path.abspath(source_dir)
        self.depth = depth
        self.fingerprint = have

    # The base index's read-only surface ----------------------------------------------------
    spec = property(lambda self: self.base.spec)
    dim = property(lambda self: self.base.dim)
    ntotal = property(lambda self: self.base.ntotal)
    kind = property(lambda self: self.base.kind)
    on_gpu = property(lambda self: getattr(self.base, "on_gpu", False))
    num_shards = property(lambda self: self.base.num_shards)
    build_info = property(lambda self: self.base.build_info)
    faiss_indexes = property(lambda self: self.base.faiss_indexes)  # a faiss base only

    def __repr__(self) -> str:
        return f"RerankIndex({self.base!r}, depth={self.depth}, source={self.source_dir!r})"

    def set_search_params(self, *, nprobe: int | None = None, ef_search: int | None = None,
                          depth: int | None = None) -> None:
        """Changes the base index's nprobe / ef_search (a faiss base) and the candidate depth."""
        if nprobe is not None or ef_search is not None:
            self.base.set_search_params(nprobe=nprobe, ef_search=ef_search)
        if depth is not None:
            self.depth = int(depth)

    def search(self, queries: np.ndarray, k: int, *, batch_size: int | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k by exact inner product among the base index's top max(depth, k) candidates:
        (scores float32 [Q, k], ids int64 [Q, k])."""
        q = np.asarray(queries, np.float32)
        k = int(k)
        depth = max(self.depth, k)
        # batch_size only when asked: Index.search is (queries, k).
        _, cand = self.base.search(q, depth, **({"batch_size": batch_size} if batch_size else {}))
        # Gather in slices of queries so the float32 candidate rows stay under _GATHER_BYTES.
        step = max(1, _GATHER_BYTES // (depth * self.dim * 4))
        out_s = np.empty((len(q), k), np.float32)
        out_i = np.empty((len(q), k), np.int64)
        for b in range(0, len(q), step):
            c = cand[b:b + step]
            valid = c >= 0
            vec = np.zeros(c.shape + (self.dim,), np.float32)
            vec[valid] = self.rows.gather(c[valid])
            out_s[b:b + step], out_i[b:b + step] = rerank_topk(q[b:b + step], c, vec, k)
        return out_s, out_i

    def save(self, directory: str) -> dict[str, Any]:
        """The base index's files, then ``rerank.json`` (depth, export directory, fingerprint)."""
        manifest = self.base.save(directory)
        record = {"format": _RERANK_FORMAT, "version": 1, "depth": self.depth,
                  "source": self.source_dir, "fingerprint": self.fingerprint}
        files.write_json(os.path.join(directory, RERANK_NAME), record)
        return dict(manifest, rerank=record)

    @classmethod
    def load(cls, directory: str, base: Index, *, source_dir: str | None = None) -> "RerankIndex":
        """Reads the ``rerank.json`` written by :meth:`save` around ``base``, the index saved in
        the same ``directory`` (opened by ``kinds.load``, whatever its kind). ``source_dir``
        overrides the recorded export directory (a moved one); its shards must still match the
        recorded fingerprint."""
        path = os.path.join(directory, RERANK_NAME)
        record = files.read_json(path)
        if not isinstance(record, dict) or record.get("format") != _RERANK_FORMAT:
            raise ValueError(f"{path}: not a re-ranking index record (missing or another format)")
        return cls(base, source_dir or record["source"], record["depth"],
                   fingerprint=record["fingerprint"], where=path)


def is_rerank_index(directory: str) -> bool:
    """Whether ``directory`` holds a saved :class:`RerankIndex` (its ``rerank.json``)."""
    return os.path.exists(os.path.join(directory, RERANK_NAME))


def build_rerank_index(emb_dir: str, spec: IndexSpec, depth: int, *,
                       progress: bool = True) -> RerankIndex:
    """Builds ``spec``'s compressed index from the export shards in ``emb_dir``
    (:func:`build_index_from_dir`, streaming) and re-ranks its top ``depth`` from them."""
    return RerankIndex(build_index_from_dir(emb_dir, spec, progress=progress), emb_dir, depth)


def projected_bytes(spec: IndexSpec, n: int, dim: int, *, stored_bytes: int = 2
                    ) -> dict[str, int]:
    """Arithmetic RAM / disk of a re-ranking index over ``n`` vectors: ``ram`` = codes + ids in
    the inverted lists (``bytes_per_vector``) + coarse centroids (nlist x dim float32) + PQ
    codebooks (256 x dim float32); ``mmap_disk`` = the export shards (n x dim x stored_bytes)
    read through the page cache, not RSS. ``spec.nlist`` must be set."""
    nlist = int(spec.nlist or 0)
    lists = int(bytes_per_vector(spec, dim) * n)
    centroids = nlist * dim * 4
    codebooks = (2 ** spec.pq_nbits) * dim * 4 if spec.kind == "ivfpq" else 2 * dim * 4
    return {"lists": lists, "centroids": centroids, "codebooks": codebooks,
            "ram": lists + centroids + codebooks, "mmap_disk": int(n) * dim * stored_bytes}

