"""Inner-product search in JAX over corpus rows sharded on a device mesh (``eval.index=jax``).

The path for TPU pods, where faiss has no device implementation; it serves GPUs and CPUs too
(docs/scale.md, "JAX-native search on the mesh").

Layout: the N corpus rows are split contiguously over every device of the mesh (all its axes
together): device s holds rows [s*R, (s+1)*R), R = ceil(N / devices) rounded up to a whole
number of ``block_rows`` blocks. Rows >= N are zero padding whose scores are set to -inf, so
padding never wins. Only the vectors live on the devices (float32 or bfloat16); the int64 ids
stay on the host.

Search, one jitted program per (query batch, k): each device scans its rows block by block,
scores = q · blockᵀ (float32 accumulation; bfloat16 mode casts the queries to bfloat16 too),
keeps a running top-k (``jax.lax.top_k``, or ``jax.lax.approx_max_k`` with ``recall_target``
when ``approx``), and one global ``top_k`` merges the devices' k-lists. Memory per device:
R·D·bytes for the corpus + query_batch·block_rows·4 for one block of scores.

Ties: ``lax.top_k`` puts the lower index first, and the running and global merges keep
earlier rows first, so exact mode orders by score descending, then lower row; rows become ids
and equal scores are re-ordered by lower id (``merge_topk``'s order, so it equals
``DenseIndex``). Of several rows tied at the k-th place the lowest rows are kept. faiss
IndexFlatIP (1.15) keeps a heap-dependent subset there (measured: neither lowest nor highest
ids), so exact mode equals Flat's ids wherever a score is above the k-th score, and Flat's
scores everywhere (up to float32 summation order). ``approx`` on CPU and GPU: XLA implements
``approx_max_k`` exactly there (its approximation is a TPU kernel); recall is what the
benchmark (``python -m dense_cf.bench.jax_search``) reports.

Loading streams: rows are read from the export shards (memory-mapped) one block at a time
and written into each device's preallocated buffer in place (a donated
``dynamic_update_slice``), so the corpus is never held twice in host memory (on a CPU the
device buffers ARE host memory). Saving writes only ``index.json``: the vectors are the
export's, recorded by file key (path, size, mtime) and re-read by ``load``. Single host: the
mesh's devices must be addressable by this process (the eval binaries run on one host).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from dense_cf import files
from dense_cf.index import faiss_index
from dense_cf.index.faiss_index import MANIFEST_NAME, DenseIndex, merge_topk
from dense_cf.parallel.mesh import make_mesh
from dense_cf.progress import Progress

__all__ = ["ALL_KINDS", "DTYPES", "KIND", "JaxIndex", "JaxSearchSpec", "build_jax_index",
           "build_jax_index_from_dir", "exact_index", "load_index", "memory_per_device"]

KIND = "jax"
ALL_KINDS: tuple[str, ...] = faiss_index.KINDS + (KIND,)  # what eval.index accepts
DTYPES: tuple[str, ...] = ("float32", "bfloat16")
_FORMAT = "dense_cf.jax_index"
_FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class JaxSearchSpec(faiss_index.DictSpec):
    """How a :class:`JaxIndex` stores and searches vectors (configs/base.py ``eval.jax_*``).

    ``dtype``: corpus dtype on the devices. ``approx``: ``approx_max_k`` with
    ``recall_target`` instead of exact ``top_k``. ``query_batch_size``: queries per jitted
    call (the last batch is padded: one compile per k). ``block_rows``: corpus rows scored at
    once per device (bounds the [queries, block] score matrix).
    """

    dtype: str = "float32"
    approx: bool = False
    recall_target: float = 0.95
    query_batch_size: int = 256
    block_rows: int = 65_536

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"JaxSearchSpec.dtype must be one of {DTYPES}, got {self.dtype!r}")
        if not 0.0 < float(self.recall_target) <= 1.0:
            raise ValueError(f"JaxSearchSpec.recall_target must be in (0, 1], got "
                             f"{self.recall_target}")
        for name in ("query_batch_size", "block_rows"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"JaxSearchSpec.{name} must be >= 1, got {getattr(self, name)}")

    @property
    def kind(self) -> str:
        return KIND


# --------------------------------------------------------------------------------------------
# Layout (pure)
# --------------------------------------------------------------------------------------------

def _layout(n: int, devices: int, block_rows: int) -> tuple[int, int]:
    """(rows per device R, block size) with R a multiple of the block: blocks are as even
    as ``block_rows`` allows (multiples of 8 rows), so padding stays small."""
    per = -(-n // devices)
    nblocks = -(-per // block_rows)
    block = -(-per // nblocks)
    block = -(-block // 8) * 8
    return block * nblocks, block


def memory_per_device(n: int, dim: int, devices: int, spec: JaxSearchSpec) -> dict[str, int]:
    """Bytes one device holds: its corpus rows (padding included) and one block of float32
    scores for a query batch. The int64 ids (8 bytes per row) stay in host memory."""
    rows, block = _layout(n, devices, spec.block_rows)
    return {"rows": rows, "corpus_bytes": rows * dim * jnp.dtype(spec.dtype).itemsize,
            "scores_bytes": spec.query_batch_size * block * 4}


def _storage_dtype(dtype: str) -> np.dtype:
    """The corpus buffers' dtype: bfloat16 is kept as its uint16 bits. XLA's CPU backend
    otherwise converts the WHOLE bfloat16 corpus to float32 before the block loop (measured:
    +4 bytes per element, an out-of-memory at 1M x 768); a uint16 slice is bit-cast per block."""
    return np.dtype(np.uint16) if dtype == "bfloat16" else np.dtype(dtype)


# --------------------------------------------------------------------------------------------
# The sharded search program
# --------------------------------------------------------------------------------------------

def _shard_topk(q: jax.Array, p: jax.Array, *, axes: tuple[str, ...], n: int, block: int,
                k: int, dtype: str, approx: bool, recall_target: float
                ) -> tuple[jax.Array, jax.Array]:
    """One device: top-k (scores, global rows) of q [B, D] against its rows p [R, D]."""
    rows_here, dim = p.shape
    base = jax.lax.axis_index(axes) * rows_here
    kb = min(k, block)
    q = q.astype(jnp.dtype(dtype))

    def select(s: jax.Array) -> tuple[jax.Array, jax.Array]:
        if approx:
            return jax.lax.approx_max_k(s, kb, recall_target=recall_target,
                                        reduction_input_size_override=n)
        return jax.lax.top_k(s, kb)

    def step(carry, xs):
        best_s, best_r = carry
        blk, j = xs
        rows = base + j * block + jnp.arange(block, dtype=jnp.int32)
        if blk.dtype != q.dtype:  # bfloat16 stored as its uint16 bits (see _storage_dtype)
            blk = jax.lax.bitcast_convert_type(blk, q.dtype)
        s = jnp.dot(q, blk.T, preferred_element_type=jnp.float32)
        s = jnp.where(rows[None, :] < n, s, -jnp.inf)  # padding never wins
        ts, ti = select(s)
        # The carry (earlier rows) comes first: top_k keeps lower positions first on ties.
        cs = jnp.concatenate([best_s, ts], axis=1)
        cr = jnp.concatenate([best_r, rows[ti]], axis=1)
        ms, mi = jax.lax.top_k(cs, k)
        return (ms, jnp.take_along_axis(cr, mi, axis=1)), None

    b = q.shape[0]
    init = (jnp.full((b, k), -jnp.inf, jnp.float32), jnp.full((b, k), -1, jnp.int32))
    blocks = p.reshape(rows_here // block, block, dim)
    (s, r), _ = jax.lax.scan(step, init, (blocks, jnp.arange(rows_here // block, dtype=jnp.int32)))
    return s, r


def _search_program(mesh: Mesh, *, n: int, block: int, k: int, dtype: str, approx: bool,
                    recall_target: float) -> Callable[[jax.Array, jax.Array], Any]:
    axes = tuple(mesh.axis_names)
    local = partial(_shard_topk, axes=axes, n=n, block=block, k=k, dtype=dtype, approx=approx,
                    recall_target=recall_target)
    per_device = jax.shard_map(local, mesh=mesh, in_specs=(P(), P(axes)),
                               out_specs=(P(None, axes), P(None, axes)),
                               check_vma=False)  # the scan carry starts replicated

    def search(q: jax.Array, corpus: jax.Array) -> tuple[jax.Array, jax.Array]:
        s, r = per_device(q, corpus)  # [B, devices * k], device order = row order
        ms, mi = jax.lax.top_k(s, k)  # the one global merge
        return ms, jnp.take_along_axis(r, mi, axis=1)

    return jax.jit(search)


@partial(jax.jit, donate_argnums=0)
def _write_rows(buf: jax.Array, rows: jax.Array, start: jax.Array) -> jax.Array:
    return jax.lax.dynamic_update_slice(buf, rows, (start, jnp.int32(0)))


# --------------------------------------------------------------------------------------------
# Row sources: an array, or the export directory (memory-mapped shards)
# --------------------------------------------------------------------------------------------

class _ArrayRows:
    def __init__(self, vectors: np.ndarray):
        self.vectors = faiss_index._check_vectors(vectors, "build_jax_index")
        self.n, self.dim = map(int, self.vectors.shape)

    def read(self, lo: int, hi: int, out: np.ndarray) -> None:
        out[:hi - lo] = self.vectors[lo:hi]


class _ShardRows:
    """Rows [lo, hi) of an export directory's shards, read through memory maps."""

    def __init__(self, source: Any):
        self.files = [e for e, _ in source.files]
        self.starts = np.concatenate([[0], np.cumsum(source.rows)]).astype(np.int64)
        self.n, self.dim = int(source.n), int(source.dim)
        self._maps: dict[int, np.ndarray] = {}

    def read(self, lo: int, hi: int, out: np.ndarray) -> None:
        f = int(np.searchsorted(self.starts, lo, side="right")) - 1
        at = lo
        while at < hi:
            if f not in self._maps:  # one open map at a time: pages are dropped as we go
                self._maps = {f: np.load(self.files[f], mmap_mode="r")}
            a, z = at - self.starts[f], min(hi, self.starts[f + 1]) - self.starts[f]
            out[at - lo:at - lo + z - a] = self._maps[f][a:z]
            at += z - a
            f += 1
        if hi >= self.n:
            self._maps.clear()


def _place(rows: Any, mesh: Mesh, spec: JaxSearchSpec, progress: bool) -> tuple[jax.Array, int]:
    """The [devices * R, D] corpus array sharded over every mesh axis, filled block by block."""
    devices = mesh.devices.size
    for d in mesh.devices.flat:
        if d.process_index != jax.process_index():
            raise ValueError("JaxIndex needs a mesh of this process's devices (single host); "
                             f"device {d} belongs to process {d.process_index}")
    rows_per, block = _layout(rows.n, devices, spec.block_rows)
    dtype = jnp.dtype(spec.dtype)
    shape = (rows_per * devices, rows.dim)
    sharding = NamedSharding(mesh, P(tuple(mesh.axis_names)))
    host = np.zeros((block, rows.dim), dtype)  # rows are converted to the search dtype here
    bits = host.view(_storage_dtype(spec.dtype))
    meter = Progress("index: jax load", rows.n, unit="vectors", every_s=10.0, enabled=progress)
    bufs = []
    for device, index in sharding.addressable_devices_indices_map(shape).items():
        first = index[0].start or 0
        buf = jnp.zeros((rows_per, rows.dim), bits.dtype, device=device)
        for off in range(0, rows_per, block):
            lo, hi = first + off, min(first + off + block, rows.n)
            if hi <= lo:
                break  # the rest of this device is padding: already zeros
            host[hi - lo:] = 0
            rows.read(lo, hi, host)
            buf = _write_rows(buf, jax.device_put(bits, device), jnp.int32(off))
            # device_put may alias ``host`` (CPU) and runs asynchronously: finish before reuse.
            buf.block_until_ready()
            meter.update(hi - lo)
        bufs.append(buf)
    meter.done()
    return jax.make_array_from_single_device_arrays(shape, sharding, bufs), block


# --------------------------------------------------------------------------------------------
# JaxIndex
# --------------------------------------------------------------------------------------------

class JaxIndex:
    """Exact (or ``approx``) inner-product search on a device mesh; ``DenseIndex``'s search
    interface: ``search(queries, k) -> (scores float32 [Q, k], ids int64 [Q, k])``, missing
    results (k > ntotal) are id -1 with score -inf. See the module docstring for ties."""

    kind = KIND
    on_gpu = False  # faiss's notion; a JaxIndex lives on whatever the mesh's devices are

    def __init__(self, corpus: jax.Array, ids: np.ndarray, n: int, block: int, mesh: Mesh,
                 spec: JaxSearchSpec, *, source: dict[str, Any] | None = None,
                 build_info: dict[str, Any] | None = None):
        self._corpus, self._ids, self._n, self._block = corpus, ids, int(n), int(block)
        self.mesh, self.spec = mesh, spec
        self.dim = int(corpus.shape[1])
        self._source = source
        self.build_info: dict[str, Any] = dict(build_info or {})
        self._ids_ascending = bool(n < 2 or np.all(np.diff(ids) > 0))
        self._programs: dict[tuple[int, int], Callable] = {}

    @property
    def ntotal(self) -> int:
        return self._n

    @property
    def num_shards(self) -> int:
        return int(self.mesh.devices.size)

    @property
    def device_bytes(self) -> int:
        """Corpus bytes on all devices together (padding included)."""
        return int(self._corpus.size * self._corpus.dtype.itemsize)

    def __repr__(self) -> str:
        return (f"JaxIndex(dtype={self.spec.dtype!r}, approx={self.spec.approx}, dim={self.dim}, "
                f"ntotal={self.ntotal}, devices={self.num_shards})")

    def _program(self, batch: int, k: int) -> Callable:
        key = (batch, k)
        if key not in self._programs:
            self._programs[key] = _search_program(
                self.mesh, n=self._n, block=self._block, k=k, dtype=self.spec.dtype,
                approx=self.spec.approx,
                recall_target=float(self.spec.recall_target))
        return self._programs[key]

    def search(self, queries: np.ndarray, k: int, *, batch_size: int | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k by inner product in batches of ``batch_size`` (default spec.query_batch_size)."""
        q, k = faiss_index.check_search_args(queries, k, self.dim)
        nq = q.shape[0]
        bs = max(1, min(int(batch_size or self.spec.query_batch_size), nq))
        program = self._program(bs, k)
        replicated = NamedSharding(self.mesh, P())
        out_s = np.empty((nq, k), np.float32)
        out_i = np.empty((nq, k), np.int64)
        qb = np.zeros((bs, self.dim), np.float32)
        for b in range(0, nq, bs):
            m = min(bs, nq - b)
            qb[:m] = q[b:b + m]
            qb[m:] = 0
            s, r = program(jax.device_put(qb, replicated), self._corpus)
            s, r = np.asarray(s)[:m], np.asarray(r)[:m].astype(np.int64)
            valid = (r >= 0) & (r < self._n)
            ids = np.where(valid, self._ids[np.clip(r, 0, self._n - 1)], -1)
            s = np.where(valid, s, np.float32(-np.inf))
            if not self._ids_ascending:  # rows -> ids: restore "equal scores, lower id first"
                s, ids = merge_topk([s], [ids], k)
            out_s[b:b + m], out_i[b:b + m] = s, ids
        return out_s, out_i

    # -- persistence: the export is the storage ------------------------------------------------

    def save(self, directory: str) -> dict[str, Any]:
        """Writes ``index.json`` (spec + the export shards' file keys); the vectors stay in the
        export. Only an index built from a directory can be saved."""
        if self._source is None:
            raise ValueError("a JaxIndex built from an array has no files to refer to; build it "
                             "with build_jax_index_from_dir to save it")
        os.makedirs(directory, exist_ok=True)
        manifest = {"format": _FORMAT, "version": _FORMAT_VERSION, "kind": KIND,
                    "dim": self.dim, "ntotal": self.ntotal, "spec": self.spec.to_dict(),
                    **self._source}
        files.write_json(os.path.join(directory, MANIFEST_NAME), manifest)
        return manifest

    @classmethod
    def load(cls, directory: str, *, spec: JaxSearchSpec | None = None, mesh: Mesh | None = None,
             progress: bool = True) -> "JaxIndex":
        """Re-reads the export that ``directory``'s ``index.json`` names; raises when a shard
        changed since (its file key differs). ``spec`` overrides the saved one."""
        path = os.path.join(directory, MANIFEST_NAME)
        manifest = files.read_json(path)
        if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
            raise ValueError(f"{path}: not a saved JaxIndex")
        if manifest.get("version") != _FORMAT_VERSION:
            raise ValueError(f"{path}: unsupported JaxIndex version {manifest.get('version')!r}")
        for entry in manifest["shards"]:
            p = entry["file"]
            if not os.path.exists(p) or files.file_key(p) != entry["key"]:
                raise ValueError(f"{path}: export shard {p} is missing or changed since the "
                                 "index was saved; rebuild it from the export directory")
        index = build_jax_index_from_dir(manifest["source"],
                                         spec or JaxSearchSpec.from_dict(manifest["spec"]),
                                         mesh=mesh, progress=progress)
        if index.ntotal != manifest["ntotal"] or index.dim != manifest["dim"]:
            raise ValueError(f"{path}: ntotal/dim {manifest['ntotal']}/{manifest['dim']} but the "
                             f"export holds {index.ntotal}/{index.dim}")
        return index


def _build(rows: Any, ids: np.ndarray, spec: JaxSearchSpec, mesh: Mesh | None, progress: bool,
           source: dict[str, Any] | None) -> JaxIndex:
    mesh = mesh if mesh is not None else make_mesh()
    t0 = time.perf_counter()
    corpus, block = _place(rows, mesh, spec, progress)
    corpus.block_until_ready()
    load_s = time.perf_counter() - t0
    if progress:
        logging.info("index: jax %s over %d x %d vectors on %d device(s) in %.1fs", spec.dtype,
                     rows.n, rows.dim, mesh.devices.size, load_s)
    return JaxIndex(corpus, ids, rows.n, block, mesh, spec, source=source,
                    build_info={"load_s": load_s, "ntotal": rows.n})


def build_jax_index(vectors: np.ndarray, ids: np.ndarray | None = None,
                    spec: JaxSearchSpec | None = None, *, mesh: Mesh | None = None,
                    progress: bool = False) -> JaxIndex:
    """A JaxIndex over a [N, D] float array (ids default to 0..N-1) on ``mesh`` (default: all
    devices, ``parallel.mesh.make_mesh()``)."""
    rows = _ArrayRows(vectors)
    ids = faiss_index._check_ids(np.arange(rows.n) if ids is None else ids, "build_jax_index")
    if len(ids) != rows.n:
        raise ValueError(f"build_jax_index: {len(ids)} ids for {rows.n} vectors")
    faiss_index._check_unique(ids, "build_jax_index")
    return _build(rows, ids, spec or JaxSearchSpec(), mesh, progress, None)


def exact_index(vectors: np.ndarray, kind: str) -> DenseIndex | JaxIndex:
    """An exact inner-product index over [N, D] ``vectors`` (ids 0..N-1) for an ``eval.index``
    value: a float32 JaxIndex for ``jax``, faiss Flat for every faiss kind (their exact peer), so
    evaluations that must be exact follow the run's choice of library and run without faiss."""
    if kind == KIND:
        return build_jax_index(vectors)
    if kind not in faiss_index.KINDS:
        raise ValueError(f"unknown index kind {kind!r}; kinds: {', '.join(ALL_KINDS)}")
    return faiss_index.build_index(vectors, None, faiss_index.IndexSpec(kind="flat"))


def build_jax_index_from_dir(emb_dir: str, spec: JaxSearchSpec | None = None, *,
                             mesh: Mesh | None = None, progress: bool = True) -> JaxIndex:
    """A JaxIndex over an export directory's ``embeddings-K.npy`` + ``ids-K.npy`` shards,
    checked as ``build_index_from_dir`` checks them, streamed to the devices block by block."""
    source = faiss_index._DirSource(emb_dir)
    ids = np.concatenate([np.load(i).astype(np.int64, copy=False) for _, i in source.files])
    record = {"source": os.path.abspath(emb_dir),
              "shards": [{"file": os.path.abspath(e), "rows": int(n),
                          "key": files.file_key(e)} for (e, _), n in zip(source.files, source.rows)]}
    return _build(_ShardRows(source), ids, spec or JaxSearchSpec(), mesh, progress, record)


def load_index(directory: str, **kwargs: Any) -> DenseIndex | JaxIndex:
    """The index saved in ``directory``, whichever kind wrote it (faiss or jax); ``kwargs`` go
    to ``DenseIndex.load``. ``index.load_index`` (index/rerank.py) also opens re-rank indexes."""
    path = os.path.join(directory, MANIFEST_NAME)
    try:
        with open(path) as f:
            fmt = json.load(f).get("format")
    except (OSError, ValueError, AttributeError) as e:
        raise FileNotFoundError(f"no readable {MANIFEST_NAME} in {directory}: {e}") from e
    if fmt == _FORMAT:
        return JaxIndex.load(directory)
    return DenseIndex.load(directory, **kwargs)
