"""FAISS retrieval index over exported passage embeddings (inner product = DPR score).

Kinds (``IndexSpec.kind``) and what one vector costs in the index (D = dim, plus the
8-byte int64 id that every kind stores):

    flat    IndexIDMap(IndexFlatIP)            exact     4*D bytes
    hnsw    IndexIDMap(IndexHNSWFlat, IP)      approx.   4*D + ~8*hnsw_m bytes (graph links)
    sq8     IndexIDMap(IndexScalarQuantizer)   approx.   D bytes (8-bit per dimension)
    ivfsq   IndexIVFScalarQuantizer (8-bit)    approx.   D bytes
    ivfpq   IndexIVFPQ                         approx.   pq_m*pq_nbits/8 bytes

Why it matters: the DPR Wikipedia corpus is 21M passages x 768 dims; as float32 that is
21e6 * 768 * 4 = 64.5 GB, which is where DPR users hit MemoryError with a flat index.
sq8 needs ~16 GB; IVF-PQ with the default pq_m = 96 for D = 768 needs 21e6 * (96 + 8) bytes
= ~2.2 GB (codes ~2.0 GB + ids).

Building streams: a training sample (at most ``train_size`` rows, drawn uniformly with
``seed``) is gathered first, then vectors are added in batches of ``add_batch_size``, so the
compressed kinds never hold all float32 vectors in RAM; flat/hnsw hold them by design (the
index storage is reserved up front when the row count is known, so vector growth does not
double the peak). ``shards > 1`` splits the rows contiguously over several faiss indexes
(for IVF kinds they share one trained quantizer) and ``search`` merges their top-k.

Results: ``search`` returns scores (float32, descending) and int64 ids; equal scores are
ordered by lower id. Missing results (k > ntotal, or an approximate index that found fewer)
are id -1 with score -inf. Which of several tied candidates at the k-th place a single faiss
index keeps is faiss's choice (it keeps the earliest inserted).

GPU: with ``use_gpu="auto"`` (default) and a faiss build with GPUs, flat / ivfpq / ivfsq are
moved with ``faiss.index_cpu_to_all_gpus`` (sharded over the GPUs); hnsw and sq8 have no faiss
GPU implementation and stay on the CPU. ``save`` always writes CPU indexes.

Without faiss (an accelerator host without the ``[cpu]``/``[tpu]``/``[gpu]`` extra) this module
still imports: its spec and the export-directory reader serve ``rerank`` and ``kinds``;
building or loading a faiss index raises ImportError (:func:`require_faiss`; docs/scale.md,
"Without faiss").
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import time
from typing import IO, Any, Iterable, Iterator, Sequence

import numpy as np
from absl import logging

from dense_cf import files
from dense_cf.index.base import (
    MANIFEST_NAME,
    DictSpec,
    check_search_args,
    is_saved_index,
    merge_topk,
)
from dense_cf.index.shards import ExportShards, check_ids, check_unique, check_vectors
from dense_cf.index.shards import list_shards as list_embedding_shards
from dense_cf.progress import Progress, timed

try:
    import faiss
except ImportError as _err:  # jax search needs none of it: see require_faiss
    faiss = None
    _FAISS_IMPORT_ERROR: ImportError | None = _err
else:
    _FAISS_IMPORT_ERROR = None

__all__ = [
    "FAISS_INSTALL",
    "FORMAT",
    "GPU_KINDS",
    "KINDS",
    "MANIFEST_NAME",
    "DenseIndex",
    "IndexSpec",
    "ShardedIndex",
    "auto_nlist",
    "build_index",
    "build_index_from_dir",
    "bytes_per_vector",
    "default_pq_m",
    "faiss_available",
    "is_saved_index",
    "list_embedding_shards",
    "merge_topk",
    "require_faiss",
]

KINDS: tuple[str, ...] = ("flat", "hnsw", "ivfpq", "sq8", "ivfsq")
GPU_KINDS = frozenset({"flat", "ivfpq", "ivfsq"})  # faiss has GPU versions of these only
_TRAINED_KINDS = frozenset({"ivfpq", "sq8", "ivfsq"})
_IVF_KINDS = frozenset({"ivfpq", "ivfsq"})
_GPU_MAX_K = 2048  # faiss GPU k-selection limit (also the nprobe limit)
_GPU_MAX_PQ_BYTES = 96  # largest GPU IVFPQ code size (needs float16 lookup tables)

# setup.py's extras: one faiss build per machine (README "Install").
FAISS_INSTALL = ('pip install -e ".[cpu]" (faiss-cpu; [tpu] brings it too) or '
                 'pip install -e ".[gpu]" (faiss-gpu-cu12)')
FORMAT = _FORMAT = "dense_cf.index"  # the manifest "format" of a saved DenseIndex
_FORMAT_VERSION = 1
# What makes two builds differ (nprobe / ef_search / threads are search-time settings).
_BUILD_FIELDS = ("kind", "nlist", "pq_m", "pq_nbits", "hnsw_m", "ef_construction", "train_size",
                 "seed")


# --------------------------------------------------------------------------------------------
# Spec
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class IndexSpec(DictSpec):
    """What index to build and how to search it. The metric is always inner product.

    ``nlist`` / ``pq_m`` = None choose defaults at build time (``auto_nlist``,
    ``default_pq_m``); the built index's ``spec`` holds the resolved values.
    """

    kind: str = "flat"
    metric: str = "ip"
    hnsw_m: int = 32
    ef_construction: int = 200
    ef_search: int = 128
    nlist: int | None = None
    nprobe: int = 32
    pq_m: int | None = None
    pq_nbits: int = 8
    train_size: int = 262_144
    seed: int = 0
    use_gpu: bool | str = "auto"
    shards: int = 1
    omp_threads: int | None = None
    query_batch_size: int = 4096
    add_batch_size: int = 32_768

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"IndexSpec.kind must be one of {KINDS}, got {self.kind!r}")
        if self.metric != "ip":
            raise ValueError(f"IndexSpec.metric must be 'ip' (DPR scores are dot products), "
                             f"got {self.metric!r}")
        if self.use_gpu not in ("auto", True, False):
            raise ValueError(f"IndexSpec.use_gpu must be 'auto', True or False, got {self.use_gpu!r}")
        positive = ("hnsw_m", "ef_construction", "ef_search", "nprobe", "pq_nbits", "train_size",
                    "shards", "query_batch_size", "add_batch_size")
        for name in positive:
            if int(getattr(self, name)) < 1:
                raise ValueError(f"IndexSpec.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("nlist", "pq_m", "omp_threads"):
            v = getattr(self, name)
            if v is not None and int(v) < 1:
                raise ValueError(f"IndexSpec.{name} must be >= 1 or None, got {v}")

    def build_record(self) -> dict[str, Any]:
        """What a built index records about this spec (the retriever rebuilds when it differs):
        the build settings under ``index``; search-time ones (nprobe, ef_search, threads) not."""
        return {"index": {f: getattr(self, f) for f in _BUILD_FIELDS}}


def auto_nlist(n: int, n_train: int | None = None) -> int:
    """IVF list count ~ 4*sqrt(n), at most n_train/39 (faiss wants >= 39 points per centroid
    to train) and 65536; at least 1."""
    nlist = int(round(4 * math.sqrt(max(n, 1))))
    cap = 65_536
    if n_train is not None:
        cap = min(cap, max(1, n_train // 39))
    return max(1, min(nlist, cap, max(n, 1)))


def default_pq_m(dim: int) -> int:
    """Largest divisor of ``dim`` that is <= min(dim/4, 96): ~4 dims per sub-quantizer for
    small D, capped at 96 bytes (the largest GPU IVFPQ code). 768 -> 96, 128 -> 32, 32 -> 8."""
    limit = max(1, min(dim // 4, _GPU_MAX_PQ_BYTES))
    for m in range(limit, 0, -1):
        if dim % m == 0:
            return m
    return 1


def bytes_per_vector(spec: IndexSpec, dim: int) -> float:
    """Approximate index bytes per stored vector, id included (see the module docstring)."""
    ids = 8
    if spec.kind == "flat":
        return 4 * dim + ids
    if spec.kind == "hnsw":
        return 4 * dim + 2 * spec.hnsw_m * 4 * 1.1 + ids  # level-0 links + ~10% upper levels
    if spec.kind in ("sq8", "ivfsq"):
        return dim + ids
    pq_m = spec.pq_m or default_pq_m(dim)
    return pq_m * spec.pq_nbits / 8 + ids


def _resolve(spec: IndexSpec, n: int | None, dim: int, n_train: int | None) -> IndexSpec:
    """Fills nlist / pq_m defaults and checks them against dim and the training sample."""
    changes: dict[str, Any] = {}
    if spec.kind in _IVF_KINDS:
        nlist = spec.nlist
        if nlist is None:
            if n is None:
                raise ValueError("the number of vectors is unknown (streamed input): pass "
                                 "n_total= or set IndexSpec.nlist")
            nlist = auto_nlist(n, n_train)
        if n_train is not None and n_train < nlist:
            raise ValueError(f"{spec.kind}: {n_train} training vectors < nlist={nlist}; "
                             f"lower nlist or provide more vectors")
        changes["nlist"] = int(nlist)
    if spec.kind == "ivfpq":
        pq_m = spec.pq_m or default_pq_m(dim)
        if dim % pq_m:
            raise ValueError(f"ivfpq: pq_m={pq_m} must divide the dimension {dim}")
        if n_train is not None and n_train < 2 ** spec.pq_nbits:
            raise ValueError(f"ivfpq: {n_train} training vectors < 2**pq_nbits="
                             f"{2 ** spec.pq_nbits} PQ centroids")
        changes["pq_m"] = int(pq_m)
    return dataclasses.replace(spec, **changes)


# --------------------------------------------------------------------------------------------
# faiss index construction and placement
# --------------------------------------------------------------------------------------------

def faiss_available() -> bool:
    """Whether ``import faiss`` succeeded when this module was imported."""
    return faiss is not None


def require_faiss(what: str) -> None:
    """Raises ImportError naming the package and its install line when faiss is absent."""
    if faiss is None:
        raise ImportError(f"{what} needs faiss, which does not import here "
                          f"({_FAISS_IMPORT_ERROR}); install it with {FAISS_INSTALL}, or use "
                          "eval.index=jax (dense_cf.index.jax_search), which needs no faiss",
                          name="faiss") from _FAISS_IMPORT_ERROR


def _new_cpu_index(spec: IndexSpec, dim: int) -> faiss.Index:
    ip = faiss.METRIC_INNER_PRODUCT
    if spec.kind == "flat":
        return faiss.IndexIDMap(faiss.IndexFlatIP(dim))
    if spec.kind == "hnsw":
        h = faiss.IndexHNSWFlat(dim, spec.hnsw_m, ip)
        h.hnsw.efConstruction = spec.ef_construction
        h.hnsw.efSearch = spec.ef_search
        return faiss.IndexIDMap(h)  # HNSW itself cannot add_with_ids
    if spec.kind == "sq8":
        return faiss.IndexIDMap(faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_8bit, ip))
    quantizer = faiss.IndexFlatIP(dim)  # the python wrapper keeps it alive with the IVF index
    if spec.kind == "ivfpq":
        ivf = faiss.IndexIVFPQ(quantizer, dim, spec.nlist, spec.pq_m, spec.pq_nbits, ip)
        ivf.pq.cp.seed = spec.seed
    else:  # ivfsq
        ivf = faiss.IndexIVFScalarQuantizer(quantizer, dim, spec.nlist,
                                            faiss.ScalarQuantizer.QT_8bit, ip, True)
    ivf.cp.seed = spec.seed  # k-means seed: builds are reproducible
    ivf.nprobe = min(spec.nprobe, spec.nlist)
    return ivf


def _num_gpus() -> int:
    # faiss-cpu has get_num_gpus() (returns 0) but no StandardGpuResources.
    if not hasattr(faiss, "StandardGpuResources"):
        return 0
    return int(faiss.get_num_gpus())


def _want_gpu(spec: IndexSpec) -> bool:
    """Whether this spec's index goes to GPU; raises when use_gpu=True cannot be honoured."""
    if spec.use_gpu is False:
        return False
    ngpu = _num_gpus()
    if spec.use_gpu is True:
        if ngpu == 0:
            raise RuntimeError(
                "IndexSpec.use_gpu=True but no GPU is usable: faiss.get_num_gpus() = "
                f"{faiss.get_num_gpus()}, GPU build = {hasattr(faiss, 'StandardGpuResources')} "
                "(install faiss-gpu, or use use_gpu='auto' / False)")
        if spec.kind not in GPU_KINDS:
            raise ValueError(f"kind {spec.kind!r} has no faiss GPU implementation (GPU kinds: "
                             f"{sorted(GPU_KINDS)}); use use_gpu='auto' or False")
        return True
    if ngpu > 0 and spec.kind not in GPU_KINDS:
        logging.info("index: %s has no faiss GPU implementation; staying on CPU", spec.kind)
    return ngpu > 0 and spec.kind in GPU_KINDS


def _gpu_options(kind: str) -> Any:
    co = faiss.GpuMultipleClonerOptions()
    co.shard = True  # split the vectors over the GPUs instead of replicating them
    if kind == "ivfpq":
        co.useFloat16 = True  # float16 lookup tables: required beyond 48 bytes per code
    return co


def _to_gpu(index: faiss.Index, kind: str) -> faiss.Index:
    return faiss.index_cpu_to_all_gpus(index, co=_gpu_options(kind))


def _set_search_params(index: faiss.Index, spec: IndexSpec, on_gpu: bool) -> None:
    name, value = None, None
    if spec.kind in _IVF_KINDS:
        name, value = "nprobe", min(spec.nprobe, spec.nlist or spec.nprobe)
        if on_gpu:
            value = min(value, _GPU_MAX_K)
    elif spec.kind == "hnsw":
        name, value = "efSearch", spec.ef_search
    if name is None:
        return
    ps_cls = getattr(faiss, "GpuParameterSpace", None) if on_gpu else None
    (ps_cls or faiss.ParameterSpace)().set_index_parameter(index, name, value)


def _reserve(index: faiss.Index, kind: str, n: int) -> None:
    """Pre-sizes flat/hnsw storage and the id map for n vectors.

    faiss grows these std::vectors geometrically; growing a multi-GB buffer copies it, so peak
    RAM would reach ~2-3x the data. resize(n) then resize(0) keeps the capacity.
    """
    if kind not in ("flat", "hnsw") or n <= 0:
        return
    sub = faiss.downcast_index(index.index)
    storage = faiss.downcast_index(sub.storage) if kind == "hnsw" else sub
    storage.codes.resize(n * storage.code_size)
    storage.codes.resize(0)
    index.id_map.resize(n)
    index.id_map.resize(0)


def _write_index(index: faiss.Index, f: IO[bytes]) -> None:
    """``faiss.write_index`` into an open binary file (faiss streams it through ``f.write``)."""
    faiss.write_index(index, faiss.PyCallbackIOWriter(f.write))


def _train(index: faiss.Index, sample: np.ndarray, spec: IndexSpec, use_gpu: bool) -> None:
    clustering = None
    if use_gpu and spec.kind in _IVF_KINDS:
        # k-means assignment on the GPU(s); the trained index is moved afterwards. Training an
        # index already split over GPUs would train each piece separately.
        clustering = _to_gpu(faiss.IndexFlatIP(sample.shape[1]), "flat")
        faiss.extract_index_ivf(index).clustering_index = clustering
    index.train(sample)
    if clustering is not None:
        faiss.extract_index_ivf(index).clustering_index = None  # do not keep a dangling pointer


# --------------------------------------------------------------------------------------------
# DenseIndex
# --------------------------------------------------------------------------------------------

class DenseIndex:
    """One or more faiss indexes of the same kind searched as one (scores merged by top-k).

    Attributes: ``spec`` (resolved), ``dim``, ``ntotal``, ``on_gpu``, ``num_shards``,
    ``build_info`` (train/add seconds etc. when built here, else {}).
    """

    def __init__(self, indexes: Sequence[faiss.Index], spec: IndexSpec, dim: int, *,
                 on_gpu: bool = False, build_info: dict[str, Any] | None = None):
        if not indexes:
            raise ValueError("DenseIndex needs at least one faiss index")
        for ix in indexes:
            if ix.d != dim:
                raise ValueError(f"faiss index has dim {ix.d}, expected {dim}")
        self._indexes = list(indexes)
        self.spec = spec
        self.dim = int(dim)
        self.on_gpu = bool(on_gpu)
        self.build_info: dict[str, Any] = dict(build_info or {})

    @property
    def ntotal(self) -> int:
        return int(sum(ix.ntotal for ix in self._indexes))

    @property
    def num_shards(self) -> int:
        return len(self._indexes)

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def faiss_indexes(self) -> list[faiss.Index]:
        """The underlying faiss indexes (one per shard)."""
        return list(self._indexes)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(kind={self.kind!r}, dim={self.dim}, ntotal={self.ntotal}, "
                f"shards={self.num_shards}, on_gpu={self.on_gpu})")

    def set_search_params(self, *, nprobe: int | None = None, ef_search: int | None = None) -> None:
        """Changes nprobe (IVF kinds) / ef_search (hnsw) for later searches."""
        changes = {k: v for k, v in (("nprobe", nprobe), ("ef_search", ef_search)) if v is not None}
        self.spec = dataclasses.replace(self.spec, **changes)
        for ix in self._indexes:
            _set_search_params(ix, self.spec, self.on_gpu)

    def search(self, queries: np.ndarray, k: int, *, batch_size: int | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k by inner product: (scores float32 [Q, k], ids int64 [Q, k]).

        Queries go to faiss in batches of ``batch_size`` (default spec.query_batch_size).
        """
        q, k = check_search_args(queries, k, self.dim)
        if self.on_gpu and k > _GPU_MAX_K:
            raise ValueError(f"k={k} exceeds the faiss GPU limit {_GPU_MAX_K}")
        if self.spec.omp_threads:
            faiss.omp_set_num_threads(int(self.spec.omp_threads))
        bs = int(batch_size or self.spec.query_batch_size)
        nq = q.shape[0]
        out_s = np.empty((nq, k), np.float32)
        out_i = np.empty((nq, k), np.int64)
        for b in range(0, nq, bs):
            qb = np.ascontiguousarray(q[b:b + bs], dtype=np.float32)
            res = [ix.search(qb, k) for ix in self._indexes]
            out_s[b:b + bs], out_i[b:b + bs] = merge_topk([r[0] for r in res],
                                                          [r[1] for r in res], k)
        return out_s, out_i

    def _cpu_indexes(self) -> list[faiss.Index]:
        if not self.on_gpu:
            return list(self._indexes)
        return [faiss.index_gpu_to_cpu(ix) for ix in self._indexes]

    def save(self, directory: str) -> dict[str, Any]:
        """Writes ``shard-XXXXX.faiss`` per shard (CPU form) and ``index.json``; returns the
        manifest. Every file is written atomically (:mod:`dense_cf.files`), the manifest last."""
        os.makedirs(directory, exist_ok=True)
        shards = []
        for s, ix in enumerate(self._cpu_indexes()):
            name = f"shard-{s:05d}.faiss"
            try:
                with files.atomic_open(os.path.join(directory, name), "wb") as f:
                    _write_index(ix, f)
            except files.DiskFullError as e:  # say what the whole shard needs, not the part
                need = int(bytes_per_vector(self.spec, self.dim) * ix.ntotal) + (1 << 16)
                raise files.DiskFullError.for_path(os.path.join(directory, name), need,
                                                   estimate=True) from e.__cause__
            shards.append({"file": name, "ntotal": int(ix.ntotal)})
        manifest = {"format": _FORMAT, "version": _FORMAT_VERSION, "kind": self.kind,
                    "dim": self.dim, "ntotal": self.ntotal, "spec": self.spec.to_dict(),
                    "shards": shards, "faiss_version": faiss.__version__}
        files.write_json(os.path.join(directory, MANIFEST_NAME), manifest)
        # Checksums last: a reader checks every shard and the manifest against them.
        files.write_sums(os.path.join(directory, files.SUMS_NAME),
                         [os.path.join(directory, n) for n in [MANIFEST_NAME, *(x["file"] for x in shards)]])
        keep = {x["file"] for x in shards}
        for name in os.listdir(directory):  # shards of an earlier, larger save; killed writers'
            if (re.fullmatch(r"shard-\d+\.faiss", name) and name not in keep) or \
                    files.is_tmp_name(name):
                files.remove_if_exists(os.path.join(directory, name))
        return manifest

    @classmethod
    def load(cls, directory: str, *, use_gpu: bool | str | None = None,
             omp_threads: int | None = None) -> "DenseIndex":
        """Reads an index written by ``save``; ``use_gpu`` / ``omp_threads`` override the
        saved spec (a saved "auto" is re-decided on this machine)."""
        path = os.path.join(directory, MANIFEST_NAME)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no {MANIFEST_NAME} in {directory} (not a saved DenseIndex)")
        sums = os.path.join(directory, files.SUMS_NAME)
        if os.path.exists(sums):  # indexes saved before checksums have none: read unverified
            files.verify_sums(sums, f"delete {directory} and run the same command again to "
                                    "rebuild the index from its export")
        with open(path) as f:
            manifest = json.load(f)
        if manifest.get("format") != _FORMAT or manifest.get("version") != _FORMAT_VERSION:
            raise ValueError(f"{path}: unsupported index format "
                             f"{manifest.get('format')!r} v{manifest.get('version')!r}")
        require_faiss(f"loading the faiss {manifest.get('kind')!r} index in {directory}")
        spec = IndexSpec.from_dict(manifest["spec"])
        changes: dict[str, Any] = {}
        if use_gpu is not None:
            changes["use_gpu"] = use_gpu
        if omp_threads is not None:
            changes["omp_threads"] = omp_threads
        spec = dataclasses.replace(spec, **changes)
        if spec.omp_threads:
            faiss.omp_set_num_threads(int(spec.omp_threads))
        dim = int(manifest["dim"])
        indexes = []
        for entry in manifest["shards"]:
            fpath = os.path.join(directory, entry["file"])
            ix = faiss.read_index(fpath)
            if ix.d != dim or ix.ntotal != entry["ntotal"]:
                raise ValueError(f"{fpath}: dim/ntotal {ix.d}/{ix.ntotal} do not match the "
                                 f"manifest {dim}/{entry['ntotal']}")
            indexes.append(ix)
        on_gpu = _want_gpu(spec)
        if on_gpu:
            indexes = [_to_gpu(ix, spec.kind) for ix in indexes]
        for ix in indexes:
            _set_search_params(ix, spec, on_gpu)
        out_cls = ShardedIndex if len(indexes) > 1 else DenseIndex
        return out_cls(indexes, spec, dim, on_gpu=on_gpu)


class ShardedIndex(DenseIndex):
    """A DenseIndex over several faiss indexes: each is searched and the top-k merged
    (score desc, lower id on ties). ``from_parts`` combines separately built indexes, e.g.
    one per embedding directory; their ids must not overlap."""

    @classmethod
    def from_parts(cls, parts: Sequence[DenseIndex]) -> "ShardedIndex":
        if not parts:
            raise ValueError("ShardedIndex.from_parts needs at least one index")
        first = parts[0]
        for p in parts[1:]:
            if p.dim != first.dim or p.kind != first.kind or p.on_gpu != first.on_gpu:
                raise ValueError(f"cannot combine {p!r} with {first!r}: dim, kind and device "
                                 "must match")
        indexes = [ix for p in parts for ix in p.faiss_indexes]
        spec = dataclasses.replace(first.spec, shards=len(indexes))
        return cls(indexes, spec, first.dim, on_gpu=first.on_gpu)


# --------------------------------------------------------------------------------------------
# Vector sources (array, directory of shards, iterator of chunks)
# --------------------------------------------------------------------------------------------

class _ArraySource:
    def __init__(self, vectors: np.ndarray, ids: np.ndarray | None, batch: int):
        self.vectors = check_vectors(vectors, "build_index")
        self.n, self.dim = map(int, self.vectors.shape)
        if ids is None:
            ids = np.arange(self.n, dtype=np.int64)
        self.ids = check_ids(ids, "build_index")
        if len(self.ids) != self.n:
            raise ValueError(f"build_index: {len(self.ids)} ids for {self.n} vectors")
        check_unique(self.ids, "build_index")
        self.batch = batch

    def sample(self, size: int, seed: int) -> np.ndarray:
        rows = np.sort(np.random.default_rng(seed).choice(self.n, size=min(size, self.n),
                                                          replace=False))
        return np.ascontiguousarray(self.vectors[rows], dtype=np.float32)

    def chunks(self) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
        yield "array", self.vectors, self.ids


class _IterSource:
    """One pass over (vectors, ids) chunks; the training sample is the first rows."""

    def __init__(self, chunks: Iterable[tuple[np.ndarray, np.ndarray]], n_total: int | None):
        self._it = iter(chunks)
        self._buffer: list[tuple[np.ndarray, np.ndarray]] = []
        self.n = n_total
        first = self._next()
        if first is None:
            raise ValueError("build_index: the chunk iterator is empty")
        self._buffer.append(first)
        self.dim = int(first[0].shape[1])

    def _next(self) -> tuple[np.ndarray, np.ndarray] | None:
        try:
            v, ids = next(self._it)
        except StopIteration:
            return None
        where = "build_index chunk"
        v = check_vectors(v, where, getattr(self, "dim", None))
        ids = check_ids(ids, where)
        if len(ids) != len(v):
            raise ValueError(f"{where}: {len(ids)} ids for {len(v)} vectors")
        return v, ids

    def sample(self, size: int, seed: int) -> np.ndarray:
        del seed  # a one-pass stream cannot be sampled uniformly: the prefix is used
        have = sum(len(v) for v, _ in self._buffer)
        while have < size:
            nxt = self._next()
            if nxt is None:
                self.n = have  # the whole stream fit in the buffer
                break
            self._buffer.append(nxt)
            have += len(nxt[0])
        return np.ascontiguousarray(np.concatenate([v for v, _ in self._buffer])[:size],
                                    dtype=np.float32)

    def chunks(self) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
        k = 0
        while self._buffer:
            v, ids = self._buffer.pop(0)
            yield f"chunk {k}", v, ids
            k += 1
        while (nxt := self._next()) is not None:
            yield f"chunk {k}", nxt[0], nxt[1]
            k += 1


# --------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------

def _shard_bounds(n: int, shards: int) -> list[int]:
    return [s * n // shards for s in range(shards + 1)]


def _build(source: Any, spec: IndexSpec, progress: bool) -> DenseIndex:
    require_faiss(f"building a faiss {spec.kind!r} index")
    if spec.omp_threads:
        faiss.omp_set_num_threads(int(spec.omp_threads))
    use_gpu = _want_gpu(spec)
    dim = source.dim
    t0 = time.perf_counter()
    sample = None
    if spec.kind in _TRAINED_KINDS:
        sample = source.sample(spec.train_size, spec.seed)
    spec = _resolve(spec, source.n, dim, None if sample is None else len(sample))

    template = _new_cpu_index(spec, dim)
    if sample is not None:
        with timed(f"index: training {spec.kind} on {sample.shape[0]} x {sample.shape[1]} vectors",
                   f"index: trained {spec.kind}", enabled=progress):
            _train(template, sample, spec, use_gpu)
        n_train = len(sample)
        del sample
    else:
        n_train = 0
    t_train = time.perf_counter() - t0

    n = source.n
    bounds = _shard_bounds(n, spec.shards) if n is not None else None
    if spec.kind in _TRAINED_KINDS:  # shards share the trained quantizer / codebooks
        cpu_parts = [faiss.clone_index(template) for _ in range(spec.shards - 1)] + [template]
    else:
        cpu_parts = [template] + [_new_cpu_index(spec, dim) for _ in range(spec.shards - 1)]
    t1 = time.perf_counter()  # add time includes allocating the storage
    if bounds is not None and not use_gpu:
        for s, ix in enumerate(cpu_parts):
            _reserve(ix, spec.kind, bounds[s + 1] - bounds[s])
    parts = [_to_gpu(ix, spec.kind) for ix in cpu_parts] if use_gpu else cpu_parts
    del cpu_parts, template
    for ix in parts:
        _set_search_params(ix, spec, use_gpu)

    # Add: rows go to shards contiguously when n is known, else chunk by chunk round-robin.
    # No enumerate(): its cached result tuple would keep the previous chunk alive while the
    # source loads the next one.
    added, bs, c = 0, spec.add_batch_size, -1
    label = ""
    meter = Progress(f"index: {spec.kind} add", n, unit="vectors", every_s=10.0, enabled=progress,
                     detail=lambda: label)
    for label, vecs, ids in source.chunks():
        c += 1
        x = xi = None
        for b in range(0, len(vecs), bs):
            x = np.ascontiguousarray(vecs[b:b + bs], dtype=np.float32)
            xi = np.ascontiguousarray(ids[b:b + bs])
            if bounds is None:
                parts[c % len(parts)].add_with_ids(x, xi)
            else:
                for s in range(len(parts)):
                    a, z = max(bounds[s], added), min(bounds[s + 1], added + len(x))
                    if z > a:
                        parts[s].add_with_ids(x[a - added:z - added], xi[a - added:z - added])
            added += len(x)
            meter.set(added)
        # Drop this chunk before the loop asks the source for the next one (peak = 1 chunk).
        del vecs, ids, x, xi
    if n is not None and added != n:
        raise ValueError(f"expected {n} vectors, the input produced {added}")
    t_add = time.perf_counter() - t1
    meter.done()
    info = {"train_s": t_train, "add_s": t_add, "n_train": n_train, "ntotal": added,
            "add_vec_per_s": added / max(t_add, 1e-9)}
    if progress:
        logging.info("index: built %s over %d vectors (train %.1fs, add %.1fs, %s shard(s), %s)",
                     spec.kind, added, t_train, t_add, len(parts), "GPU" if use_gpu else "CPU")
    out_cls = ShardedIndex if len(parts) > 1 else DenseIndex
    return out_cls(parts, spec, dim, on_gpu=use_gpu, build_info=info)


def build_index(vectors_or_shard_iter: np.ndarray | Iterable[tuple[np.ndarray, np.ndarray]],
                ids: np.ndarray | None = None, spec: IndexSpec | None = None, *,
                n_total: int | None = None, progress: bool = False) -> DenseIndex:
    """Builds an index from a [N, D] float array (ids default to 0..N-1) or from an iterable
    of (vectors [n_k, D], ids [n_k]) chunks.

    Arrays are sampled uniformly for training. A chunk iterator is read once: the training
    sample is its first ``train_size`` rows (shuffle upstream or use ``build_index_from_dir``),
    and ``n_total`` (if known) enables the automatic nlist and contiguous sharding.
    """
    spec = spec or IndexSpec()
    if isinstance(vectors_or_shard_iter, np.ndarray):
        source: Any = _ArraySource(vectors_or_shard_iter, ids, spec.add_batch_size)
    else:
        if ids is not None:
            raise ValueError("ids must be None when chunks of (vectors, ids) are given")
        source = _IterSource(vectors_or_shard_iter, n_total)
    return _build(source, spec, progress)


def build_index_from_dir(emb_dir: str, spec: IndexSpec | None = None, *,
                         progress: bool = True) -> DenseIndex:
    """Builds an index from exported shards ``embeddings-K.npy`` + ``ids-K.npy`` in emb_dir.

    All shards are checked first (same dim, ids per row, ids unique and >= 0); then a uniform
    training sample is read shard by shard and the vectors are added shard by shard.
    """
    return _build(ExportShards(emb_dir), spec or IndexSpec(), progress)
