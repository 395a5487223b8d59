"""Inner-product search in JAX over corpus rows sharded on a device mesh (``eval.index=jax``).

The path for TPU pods, where faiss has no device implementation; it serves GPUs and CPUs too
(docs/scale.md, "JAX-native search on the mesh").

Layout: the N corpus rows are split contiguously over every device of the mesh (all its axes
together): device s holds rows [s*R, (s+1)*R), R = ceil(N / devices) rounded up to a whole
number of ``block_rows`` blocks, each block whole ``chunk_rows`` chunks. Rows >= N are zero
padding that never wins. Only the vectors live on the devices (float32, bfloat16 or float16;
16-bit ones as their uint16 bits); the int64 ids stay on the host.

Search, one jitted program per (query batch, k): each device scans its rows block by block,
scores = q · blockᵀ (float32 accumulation; queries are rounded to the corpus dtype; float32 at
``Precision.HIGHEST``), keeps a running exact top-k, and one global ``top_k`` merges the
devices' k-lists. Per block the selection is

- ``sort``: ``lax.top_k`` over the whole [B, block] score matrix. On GPUs XLA's fast top-k
  kernel serves k <= 16 (and rows >= 1024); beyond, ``top_k`` sorts every row of the block.
- ``bmc`` (bin-max certificate; ``../shared/reviews/gpu-levers.md`` §3, docs/scale.md): the
  block's scores are cut into bins of ``bin_rows`` consecutive rows (padding rows at -inf
  first), each bin's max is taken (one read of the scores), the top k bins by max are kept and
  sorted back into row order, their scores gathered (k · bin_rows candidates), and the carry
  plus those candidates give the new top k. Exact by construction, with no re-scan and no
  data-dependent branch: a row x of the block's exact top k whose bin b was not kept would
  have k kept bins ahead of it, each holding a row that scores above x or ties it at a lower
  row (top_k keeps the lower bin on equal maxima and bins are contiguous), so k rows precede
  x: a contradiction. Needs ``block / bin_rows >= k`` (else the block is searched by sort).
  ``prune_bins`` = c > 0 (opt-in; gpu-levers.md §3.4-2): once the carry's k-th score m is at
  least the c-th largest bin max for every live query, only the top c bins can hold a row that
  enters (every other row scores <= m and follows the carry's k rows in the tie order), so the
  block gathers c bins instead of k; otherwise (``lax.cond``) the k-bin path runs.
- ``chunked`` (asked for by ``select="chunked"``; measured slower than sort on an H200 and on
  CPUs): each chunk of ``chunk_rows`` rows gives its top ``chunk_k`` (a k the fast kernel
  serves); the carry and the chunks' lists merge into a new
  top-k whose k-th score is m. Proof, per query and chunk: a chunk's unlisted rows score at most
  its ``chunk_k``-th score t_c; if t_c < m, none of them can enter the top k (k listed rows
  score >= m > t_c). Chunks with t_c >= m are unsafe: when every query has at most
  ``rescan_chunks`` of them, those chunks are gathered whole and merged (a two-key sort: score
  descending, row ascending); else the block is searched as ``sort``. Either way the result is
  the exact top k of rows seen so far, so the search is exact for every query, every time;
  the counters (``search(stats=...)``) say how often the proof failed.

Memory per device: R·D·bytes for the corpus + query_batch·block_rows·4 for one block of scores
(twice that in a block searched by sort: the masked copy).

``auto`` picks per platform from :data:`AUTO_SELECT`, a table of what was measured fastest
there (docs/scale.md).

Ties: ``lax.top_k`` puts the lower index first, and every positional merge lays candidates out
so that, among equal scores, position order is row order (the carry's earlier rows, then chunks
or kept bins in row order, each lower row first); the gathered re-scan sorts by (score, row). So
exact mode orders by score descending, then lower row; rows become ids and equal scores are
re-ordered by lower id (``merge_topk``'s order, so it equals ``DenseIndex``). Of several rows
tied at the k-th place the lowest rows are kept. faiss IndexFlatIP (1.15) keeps a
heap-dependent subset there (measured: neither lowest nor highest ids), so exact mode equals
Flat's ids wherever a score is above the k-th score, and Flat's scores everywhere (up to float32
summation order). ``approx`` (``approx_max_k`` with ``recall_target`` instead of exact
selection): XLA implements ``approx_max_k`` exactly on CPU and GPU (its approximation is a TPU
kernel); recall is what the benchmark (``python -m dense_cf.bench.jax_search``) reports.

Loading streams: rows are read from the export shards (memory-mapped) one block at a time
and written into each device's preallocated buffer in place (a donated
``dynamic_update_slice``), so the corpus is never held twice in host memory (on a CPU the
device buffers ARE host memory). Saving writes only ``index.json``: the vectors are the
export's, recorded by file key (path, size, mtime) and re-read by ``load``. Single host: the
mesh's devices must be addressable by this process (the eval binaries run on one host).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
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
from dense_cf.index.base import MANIFEST_NAME, DictSpec, check_search_args, merge_topk
from dense_cf.index.shards import ExportShards, check_ids, check_unique, check_vectors
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.progress import Progress

__all__ = ["DTYPES", "FORMAT", "KIND", "SELECTS", "JaxIndex", "JaxSearchSpec", "auto_query_batch",
           "build_jax_index", "build_jax_index_from_dir", "build_jax_index_generated",
           "chunked_applies", "memory_per_device", "resolve_select"]

KIND = "jax"
DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
SELECTS: tuple[str, ...] = ("auto", "bmc", "chunked", "sort")
FORMAT = "dense_cf.jax_index"  # the manifest "format" of a saved JaxIndex
_FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class JaxSearchSpec(DictSpec):
    """How a :class:`JaxIndex` stores and searches vectors (configs/base.py ``eval.jax_*``).

    ``dtype``: corpus dtype on the devices (queries are rounded to it; float32 accumulation).
    ``approx``: ``approx_max_k`` with ``recall_target`` instead of exact selection.
    ``query_batch_size``: queries per jitted call (the last batch is padded: one compile per k);
    0: sized to the device (:func:`auto_query_batch`).
    ``block_rows``: corpus rows scored at once per device (bounds the [queries, block] score
    matrix). ``select``: exact selection per block, ``bmc`` (bin-max certificate: top-k bins
    of ``bin_rows`` rows by their max, then top-k of their rows; module docstring), ``chunked``
    (chunk top-``chunk_k``, merge, proven exact or re-scanned), ``sort`` (``lax.top_k`` over
    the whole block) or ``auto`` (the platform's fastest as measured, :data:`AUTO_SELECT`).
    ``bin_rows``: rows per bin of ``bmc`` (0: the platform's measured choice). ``prune_bins``:
    bmc's carry-threshold pruning (0: off; c < k: gather c bins where the carry proves the
    rest cannot enter, module docstring). ``chunk_rows``:
    rows per chunk (XLA's fast GPU top-k kernel wants >= 1024); blocks are whole chunks.
    ``rescan_chunks``: unsafe chunks per query re-scanned by gathering them; a block with more
    falls back to ``sort`` for that block.
    """

    dtype: str = "float32"
    approx: bool = False
    recall_target: float = 0.95
    query_batch_size: int = 256
    block_rows: int = 65_536
    select: str = "auto"
    chunk_rows: int = 1024
    chunk_k: int = 16
    rescan_chunks: int = 4
    bin_rows: int = 0
    prune_bins: int = 0

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"JaxSearchSpec.dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.select not in SELECTS:
            raise ValueError(f"JaxSearchSpec.select must be one of {SELECTS}, got {self.select!r}")
        if not 0.0 < float(self.recall_target) <= 1.0:
            raise ValueError(f"JaxSearchSpec.recall_target must be in (0, 1], got "
                             f"{self.recall_target}")
        if int(self.query_batch_size) < 0:
            raise ValueError(f"JaxSearchSpec.query_batch_size must be >= 0 (0: auto), got "
                             f"{self.query_batch_size}")
        for name in ("block_rows", "chunk_rows", "chunk_k", "rescan_chunks"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"JaxSearchSpec.{name} must be >= 1, got {getattr(self, name)}")
        if int(self.prune_bins) < 0:
            raise ValueError(f"JaxSearchSpec.prune_bins must be >= 0 (0: off), got "
                             f"{self.prune_bins}")
        if int(self.bin_rows) < 0:
            raise ValueError(f"JaxSearchSpec.bin_rows must be >= 0 (0: the platform's), got "
                             f"{self.bin_rows}")
        if int(self.chunk_k) >= int(self.chunk_rows):
            raise ValueError(f"JaxSearchSpec.chunk_k ({self.chunk_k}) must be < chunk_rows "
                             f"({self.chunk_rows})")

    @property
    def kind(self) -> str:
        return KIND

    def build_record(self) -> dict[str, Any]:
        """What a built index records about this spec (the retriever rebuilds when it differs):
        the whole spec, under ``jax``."""
        return {"jax": self.to_dict(), "index": {"kind": KIND}}


# --------------------------------------------------------------------------------------------
# Layout (pure)
# --------------------------------------------------------------------------------------------

def _layout(n: int, devices: int, block_rows: int, chunk_rows: int = 8) -> tuple[int, int]:
    """(rows per device R, block size) with R a multiple of the block: blocks are as even
    as ``block_rows`` allows, in whole chunks of ``chunk_rows`` (multiples of 8 rows where a
    device holds less than one chunk), so padding stays below one chunk per block."""
    per = -(-n // devices)
    grain = chunk_rows if per >= chunk_rows else 8
    nblocks = -(-per // max(block_rows, grain))
    block = -(-per // nblocks)
    block = -(-block // grain) * grain
    return block * nblocks, block


def memory_per_device(n: int, dim: int, devices: int, spec: JaxSearchSpec) -> dict[str, int]:
    """Bytes one device holds: its corpus rows (padding included) and one block of float32
    scores for a query batch. The int64 ids (8 bytes per row) stay in host memory."""
    rows, block = _layout(n, devices, spec.block_rows, spec.chunk_rows)
    return {"rows": rows, "corpus_bytes": rows * dim * jnp.dtype(spec.dtype).itemsize,
            "scores_bytes": (spec.query_batch_size or AUTO_BATCH_MAX) * block * 4}


AUTO_BATCH_MAX = 4096  # auto query batches: at most this many (GPU/TPU), CPU_BATCH on CPUs
CPU_BATCH = 256


def auto_query_batch(platform: str, block: int, free_bytes: int | None) -> int:
    """Queries per batch for ``query_batch_size=0``: on accelerators the largest power of two
    <= AUTO_BATCH_MAX whose score work (the block's float32 scores, the masked copy and the
    sort's buffers of a full-sort block: ~3 x 4 bytes per score) takes at most a quarter of
    ``free_bytes`` (unknown: 1,024), larger batches amortising each corpus pass; on CPUs
    CPU_BATCH, where the matmul bounds the speed and bigger batches only cost memory."""
    if platform == "cpu":
        return CPU_BATCH
    if free_bytes is None:
        return 1024
    b = AUTO_BATCH_MAX
    while b > 64 and 3 * 4 * b * block > free_bytes // 4:
        b //= 2
    return b


def _storage_dtype(dtype: str) -> np.dtype:
    """The corpus buffers' dtype: 16-bit floats are kept as their uint16 bits. XLA's CPU
    backend otherwise converts the WHOLE bfloat16 corpus to float32 before the block loop
    (measured: +4 bytes per element, an out-of-memory at 1M x 768); a uint16 slice is bit-cast
    per block."""
    return np.dtype(np.uint16) if jnp.dtype(dtype).itemsize == 2 else np.dtype(dtype)


# What ``select="auto"`` runs per platform, and bmc's bin size there: measured fastest.
#   cpu: bmc, L = 128. 2-core AMD EPYC (Zen 4, AVX-512), float32, k = 100, batch 256, one
#        run (docs/scale.md "Exact top-k by a bin-max certificate"): bmc 1.11x sort at
#        262,144 x 768 and 1.12x at 1,048,576; chunked 0.73-0.75x; L = 64 / 128 / 256 within 6 %.
#   gpu: bmc, L = 64. One H200, bfloat16 768-d, k = 100, default XLA flags (tools/gpu/check.sh
#        stage d, docs/results/gpu_levers_h200_2026-11-30.md): at 2^20 rows bmc/64 4.90-5.17x
#        sort (64,659 / 69,227 q/s at batch 1024 / 4096), L = 128 0.71-0.72x and L = 256
#        0.44-0.45x of L = 64; at 21,015,324 rows bmc/64 4.91-5.15x sort. chunked 0.76-0.84x.
#        With the RAFT top-k flag (dense_cf.parallel.xla_flags) only L = 128 was timed:
#        156,527 q/s at 2^20, 1.85x sort under the same flag.
#   others (tpu): bmc, L = 128 until measured.
AUTO_SELECT: dict[str, tuple[str, int]] = {"cpu": ("bmc", 128), "gpu": ("bmc", 64)}
_AUTO_DEFAULT = ("bmc", 128)


def bin_rows_for(spec: JaxSearchSpec, platform: str) -> int:
    """bmc's rows per bin: ``spec.bin_rows``, else the platform's entry of AUTO_SELECT."""
    return int(spec.bin_rows) or AUTO_SELECT.get(platform, _AUTO_DEFAULT)[1]


def resolve_select(spec: JaxSearchSpec, block: int, k: int, platform: str) -> str:
    """The selection a search over blocks of ``block`` rows for ``k`` runs on ``platform``:
    ``sort``, ``chunked`` or ``bmc``. ``auto`` takes the platform's measured choice
    (AUTO_SELECT). ``bmc`` needs whole bins and at least k of them per block
    (block % bin_rows == 0, block / bin_rows >= k); ``chunked`` at least two whole chunks;
    otherwise, and with ``approx``, the block is searched by ``sort``."""
    if spec.approx:
        return "sort"
    select = spec.select
    if select == "auto":
        select = AUTO_SELECT.get(platform, _AUTO_DEFAULT)[0]
    if select == "bmc":
        bins = bin_rows_for(spec, platform)
        return "bmc" if block % bins == 0 and block // bins >= k else "sort"
    if select == "chunked":
        ok = block % spec.chunk_rows == 0 and block // spec.chunk_rows >= 2
        return "chunked" if ok else "sort"
    return "sort"


def chunked_applies(spec: JaxSearchSpec, block: int, k: int, platform: str) -> bool:
    """Whether ``spec`` searches a layout with this ``block`` chunk-wise for ``k`` on devices
    of ``platform`` (:func:`resolve_select` is ``chunked``)."""
    return resolve_select(spec, block, k, platform) == "chunked"


# --------------------------------------------------------------------------------------------
# The sharded search program
# --------------------------------------------------------------------------------------------

_SEARCH_FIELDS = ("select", "chunk_rows", "chunk_k", "rescan_chunks", "approx", "recall_target",
                  "dtype", "bin_rows", "prune_bins")
_IN_FLIGHT = 4  # query batches dispatched ahead of the host's result conversion
_NO_ROW = np.iinfo(np.int32).max  # a candidate slot that holds no row (sorts after every row)


def _merge_sorted(cs: jax.Array, cr: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """Top k of candidates by (score descending, row ascending), whatever their positions."""
    neg, rows = jax.lax.sort((-cs, cr), dimension=1, num_keys=2)
    return -neg[:, :k], rows[:, :k]


def _merge_positional(cs: jax.Array, cr: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """Top k of candidates laid out so that, among equal scores, position order is row order:
    ``lax.top_k`` keeps the lower position first on ties."""
    ms, mi = jax.lax.top_k(cs, k)
    return ms, jnp.take_along_axis(cr, mi, axis=1)


def _shard_topk(q: jax.Array, p: jax.Array, live: jax.Array, *, axes: tuple[str, ...], n: int,
                block: int, k: int, dtype: str, store: str, approx: bool, recall_target: float,
                mode: str, chunk: int, chunk_k: int, rescan: int, bin_rows: int,
                prune: int = 0) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One device: top-k (scores, global rows) of q [B, D] against its rows p [R, D], and
    [1, 5] counters (chunks re-scanned by gathering, blocks that fell back to a full sort,
    chunks of live queries found unsafe, blocks selected by bmc, of which pruned to ``prune``
    bins). ``live`` [B] marks real (not padding) queries. ``mode``: the selection, ``sort`` |
    ``chunked`` | ``bmc``."""
    rows_here, dim = p.shape
    b = q.shape[0]
    base = jax.lax.axis_index(axes) * rows_here
    kb = min(k, block)
    cdt = jnp.dtype(dtype)
    q = q.astype(cdt)
    # float32 corpora are searched in float32: no TF32 / bf16 passes on GPUs and TPUs.
    precision = jax.lax.Precision.HIGHEST if cdt == jnp.float32 else None
    chunked = mode == "chunked"
    nchunks = block // chunk if chunked else 0
    rescan = min(rescan, nchunks)
    nbins = block // bin_rows if mode == "bmc" else 0
    prune = prune if 0 < prune < k else 0

    def select(s: jax.Array) -> tuple[jax.Array, jax.Array]:
        if approx:
            return jax.lax.approx_max_k(s, kb, recall_target=recall_target,
                                        reduction_input_size_override=n)
        return jax.lax.top_k(s, kb)

    def full(best_s, best_r, s, rows):
        """The block's exact top-k merged into the carry (earlier rows first: positional)."""
        s = jnp.where(rows[None, :] < n, s, -jnp.inf)  # padding never wins
        ts, ti = select(s)
        return _merge_positional(jnp.concatenate([best_s, ts], axis=1),
                                 jnp.concatenate([best_r, rows[ti]], axis=1), k)

    def bmc(best_s, best_r, s, rows, first):
        """The top k bins of ``bin_rows`` rows by their max (padding at -inf before the max),
        in row order, then the top k of the carry and those bins' rows (module docstring);
        with ``prune``, c bins where the carry proves that enough. Returns (scores, rows,
        pruned: 0 or 1)."""
        # The mask is applied inside the max and to the gathered candidates, not to a copy of
        # the scores: XLA fuses it into both, so the [B, R] scores are written once, read once
        # by the max, and only the kept bins are read again.
        bmax = jnp.max(jnp.where(rows[None, :] < n, s, -jnp.inf).reshape(b, nbins, bin_rows),
                       axis=2)

        def kept(nb: int):
            def run(_):
                _, bins = jax.lax.top_k(bmax, nb)  # equal maxima: the lower bin first
                bins = jnp.sort(bins, axis=1)  # row order, for the tie rule
                cand = jnp.take_along_axis(s.reshape(b, nbins, bin_rows), bins[:, :, None],
                                           axis=1)
                crow = (first + bins[:, :, None] * bin_rows
                        + jnp.arange(bin_rows, dtype=jnp.int32)).reshape(b, nb * bin_rows)
                cand = jnp.where(crow < n, cand.reshape(b, nb * bin_rows), -jnp.inf)
                return _merge_positional(jnp.concatenate([best_s, cand], axis=1),
                                         jnp.concatenate([best_r, crow], axis=1), k)
            return run

        if not prune:
            return (*kept(k)(None), jnp.int32(0))
        # Bins outside the top c have max <= the c-th max; where that is <= the carry's k-th
        # score m, their rows score <= m and come after the carry's k rows (scores >= m,
        # lower rows), so none of them can enter.
        top_c, _ = jax.lax.top_k(bmax, prune)
        ok = jnp.all((top_c[:, prune - 1] <= best_s[:, k - 1]) | ~live)
        ms, mr = jax.lax.cond(ok, kept(prune), kept(k), None)
        return ms, mr, ok.astype(jnp.int32)

    def step(carry, xs):
        best_s, best_r, counts = carry
        blk, j = xs
        first = base + j * block
        rows = first + jnp.arange(block, dtype=jnp.int32)
        if blk.dtype == jnp.uint16:  # 16-bit floats stored as their bits (_storage_dtype)
            blk = jax.lax.bitcast_convert_type(blk, jnp.dtype(store))
        blk = blk.astype(cdt)  # a float32 search over a 16-bit corpus widens per block
        # q · blockᵀ as one dot_general contracting both operands' last dim: `jnp.dot(q, blk.T)`
        # leaves a transpose in front of the dot, and for a 16-bit block XLA's CPU backend then
        # misses its library GEMM (measured [256, 768] · [65536, 768]ᵀ bfloat16 → float32:
        # 120 GFLOP/s against 289; docs/scale.md "bfloat16 operands on the CPU").
        s = jax.lax.dot_general(q, blk, (((1,), (1,)), ((), ())), precision=precision,
                                preferred_element_type=jnp.float32)
        if mode == "bmc":
            ms, mr, pruned = bmc(best_s, best_r, s, rows, first)
            return (ms, mr, counts.at[3].add(1).at[4].add(pruned)), None
        if not chunked:
            return (*full(best_s, best_r, s, rows), counts), None
        # Each chunk's top chunk_k (raw scores: padding is masked after the selection).
        t, ti = jax.lax.top_k(s.reshape(b * nchunks, chunk), chunk_k)
        t, ti = t.reshape(b, nchunks, chunk_k), ti.reshape(b, nchunks, chunk_k)
        crow = first + jnp.arange(nchunks, dtype=jnp.int32)[None, :, None] * chunk + ti
        ts = jnp.where(crow < n, t, -jnp.inf)
        # Candidates in row order among equal scores: carry, then chunks in order, each chunk's
        # list lower row first on ties (top_k's order).
        cs = jnp.concatenate([best_s, ts.reshape(b, -1)], axis=1)
        cr = jnp.concatenate([best_r, crow.reshape(b, -1)], axis=1)
        ms, mr = _merge_positional(cs, cr, k)
        # A chunk hides only rows scoring <= its chunk_k-th score. If that is below the merged
        # k-th score, none of them can enter the top k; else the chunk is re-scanned whole.
        unsafe = (t[:, :, chunk_k - 1] >= ms[:, k - 1:k]) & live[:, None]
        per_query = jnp.sum(unsafe, axis=1, dtype=jnp.int32)
        worst = jnp.max(per_query)
        branch = jnp.where(worst == 0, 0, jnp.where(worst <= rescan, 1, 2))

        def keep(_):
            return ms, mr

        def gather(_):
            # The unsafe chunks (at most ``rescan`` per query), lowest chunk first.
            key = jnp.where(unsafe, nchunks - jnp.arange(nchunks, dtype=jnp.int32), 0)
            kv, ci = jax.lax.top_k(key, rescan)
            ok = kv > 0
            g = jnp.take_along_axis(s.reshape(b, nchunks, chunk), ci[:, :, None], axis=1)
            grow = first + ci[:, :, None] * chunk + jnp.arange(chunk, dtype=jnp.int32)
            gs = jnp.where(ok[:, :, None] & (grow < n), g, -jnp.inf)
            grow = jnp.where(ok[:, :, None], grow, _NO_ROW)
            # Those chunks' partial lists leave the candidates: they come back whole.
            drop = unsafe[:, :, None]
            cs2 = jnp.concatenate([best_s, jnp.where(drop, -jnp.inf, ts).reshape(b, -1),
                                   gs.reshape(b, -1)], axis=1)
            cr2 = jnp.concatenate([best_r, jnp.where(drop, _NO_ROW, crow).reshape(b, -1),
                                   grow.reshape(b, -1)], axis=1)
            return _merge_sorted(cs2, cr2, k)

        def fallback(_):
            return full(best_s, best_r, s, rows)

        ms, mr = jax.lax.switch(branch, (keep, gather, fallback), None)
        counts = counts + jnp.stack([jnp.where(branch == 1, jnp.sum(per_query), 0),
                                     (branch == 2).astype(jnp.int32), jnp.sum(per_query),
                                     jnp.int32(0), jnp.int32(0)])
        return (ms, mr, counts), None

    init = (jnp.full((b, k), -jnp.inf, jnp.float32), jnp.full((b, k), -1, jnp.int32),
            jnp.zeros((5,), jnp.int32))
    blocks = p.reshape(rows_here // block, block, dim)
    (s, r, counts), _ = jax.lax.scan(
        step, init, (blocks, jnp.arange(rows_here // block, dtype=jnp.int32)))
    return s, r, counts[None, :]


@functools.lru_cache(maxsize=64)  # indexes of one shape share programs (and their compiles)
def _search_program(mesh: Mesh, *, n: int, block: int, k: int, dtype: str, store: str,
                    approx: bool, recall_target: float, select: str, chunk: int,
                    chunk_k: int, rescan: int, bin_rows: int, prune: int
                    ) -> Callable[[jax.Array, jax.Array, jax.Array], Any]:
    axes = tuple(mesh.axis_names)
    local = partial(_shard_topk, axes=axes, n=n, block=block, k=k, dtype=dtype, store=store,
                    approx=approx, recall_target=recall_target, mode=select, chunk=chunk,
                    chunk_k=chunk_k, rescan=rescan, bin_rows=bin_rows, prune=prune)
    per_device = jax.shard_map(local, mesh=mesh, in_specs=(P(), P(axes), P()),
                               out_specs=(P(None, axes), P(None, axes), P(axes)),
                               check_vma=False)  # the scan carry starts replicated

    def search(q: jax.Array, corpus: jax.Array, live: jax.Array
               ) -> tuple[jax.Array, jax.Array, jax.Array]:
        s, r, counts = per_device(q, corpus, live)  # [B, devices * k], device order = row order
        ms, mi = jax.lax.top_k(s, k)  # the one global merge
        return ms, jnp.take_along_axis(r, mi, axis=1), jnp.sum(counts, axis=0)

    return jax.jit(search)


@partial(jax.jit, donate_argnums=0)
def _write_rows(buf: jax.Array, rows: jax.Array, start: jax.Array) -> jax.Array:
    return jax.lax.dynamic_update_slice(buf, rows, (start, jnp.int32(0)))


# --------------------------------------------------------------------------------------------
# Row sources: an array, or the export directory (memory-mapped shards)
# --------------------------------------------------------------------------------------------

class _ArrayRows:
    def __init__(self, vectors: np.ndarray):
        self.vectors = check_vectors(vectors, "build_jax_index")
        self.n, self.dim = map(int, self.vectors.shape)

    def read(self, lo: int, hi: int, out: np.ndarray) -> None:
        out[:hi - lo] = self.vectors[lo:hi]


class _GeneratedRows:
    """Rows made on the device by ``make_block(lo, hi, rows, device, dtype)``."""

    def __init__(self, n: int, dim: int, make_block: Callable[..., jax.Array]):
        self.n, self.dim, self.make_block = int(n), int(dim), make_block

    def make(self, lo: int, hi: int, rows: int, device: Any, dtype: Any, bits: Any) -> jax.Array:
        part = self.make_block(lo, hi, rows, device, dtype)
        if part.shape != (rows, self.dim):
            raise ValueError(f"make_block returned {part.shape}, want {(rows, self.dim)}")
        return _as_bits(part, jnp.int32(hi - lo), dtype=jnp.dtype(dtype), bits=jnp.dtype(bits))


@partial(jax.jit, static_argnames=("dtype", "bits"))
def _as_bits(part: jax.Array, valid: jax.Array, *, dtype: Any, bits: Any) -> jax.Array:
    part = jnp.where(jnp.arange(part.shape[0])[:, None] < valid, part.astype(dtype), 0)
    return part if bits == dtype else jax.lax.bitcast_convert_type(part, bits)


def _place(rows: Any, mesh: Mesh, spec: JaxSearchSpec, progress: bool) -> tuple[jax.Array, int]:
    """The [devices * R, D] corpus array sharded over every mesh axis, filled block by block."""
    devices = mesh.devices.size
    for d in mesh.devices.flat:
        if d.process_index != jax.process_index():
            raise ValueError("JaxIndex needs a mesh of this process's devices (single host); "
                             f"device {d} belongs to process {d.process_index}")
    rows_per, block = _layout(rows.n, devices, spec.block_rows, spec.chunk_rows)
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
            if isinstance(rows, _GeneratedRows):
                part = rows.make(lo, hi, block, device, dtype, bits.dtype)
            else:
                host[hi - lo:] = 0
                rows.read(lo, hi, host)
                part = jax.device_put(bits, device)
            buf = _write_rows(buf, part, jnp.int32(off))
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
    def platform(self) -> str:
        """The mesh's device platform (``cpu``, ``gpu``, ``tpu``)."""
        return str(self.mesh.devices.flat[0].platform)

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

    def _auto_batch(self) -> int:
        dev = self.mesh.devices.flat[0]
        stats = dev.memory_stats() if self.platform != "cpu" else None
        free = None
        if stats and "bytes_limit" in stats:
            free = int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
        return auto_query_batch(self.platform, self._block, free)

    def selection(self, k: int, **overrides: Any) -> str:
        """The per-block selection a ``search(..., k, **overrides)`` runs: ``sort``,
        ``chunked`` or ``bmc`` (:func:`resolve_select`)."""
        spec = dataclasses.replace(self.spec, **overrides) if overrides else self.spec
        return resolve_select(spec, self._block, int(k), self.platform)

    def _program(self, batch: int, k: int, spec: JaxSearchSpec | None = None) -> Callable:
        spec = spec or self.spec
        key = (batch, k, spec)
        if key not in self._programs:
            self._programs[key] = _search_program(
                self.mesh, n=self._n, block=self._block, k=k, dtype=spec.dtype,
                approx=spec.approx, recall_target=float(spec.recall_target),
                store=self.spec.dtype,
                select=resolve_select(spec, self._block, k, self.platform),
                chunk=int(spec.chunk_rows), chunk_k=int(spec.chunk_k),
                rescan=int(spec.rescan_chunks), bin_rows=bin_rows_for(spec, self.platform),
                prune=int(spec.prune_bins))
        return self._programs[key]

    def search(self, queries: np.ndarray, k: int, *, batch_size: int | None = None,
               stats: dict[str, int] | None = None, **overrides: Any
               ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k by inner product in batches of ``batch_size`` (default spec.query_batch_size).

        ``stats``: a dict that receives counts, all devices together: ``blocks`` scanned per
        batch, ``chunks`` per query; ``unsafe_chunks`` (summed over queries) that may hide a
        better row, of which ``rescanned_chunks`` were re-scanned by gathering;
        ``fallback_blocks`` (summed over batches) searched by a full sort instead; and
        ``bmc_blocks`` (summed over batches and devices) selected by the bin-max certificate,
        of which ``pruned_blocks`` gathered only ``prune_bins`` bins.
        ``overrides``: search-time spec fields for this call (``select``, ``bin_rows``,
        ``prune_bins``,
        ``chunk_rows``, ``chunk_k``, ``rescan_chunks``, ``approx``, ``recall_target``, ``dtype``: the queries'
        and the matmul's, float32 or the corpus dtype, the stored corpus cast per block), e.g. a
        float32 reference over a bfloat16 corpus. A ``chunk_rows`` that does not divide the
        layout's blocks searches by sort."""
        q, k = check_search_args(queries, k, self.dim)
        unknown = sorted(set(overrides) - set(_SEARCH_FIELDS))
        if unknown:
            raise ValueError(f"search: {unknown} are not search-time fields {_SEARCH_FIELDS}")
        spec = dataclasses.replace(self.spec, **overrides) if overrides else self.spec
        if spec.dtype not in (self.spec.dtype, "float32"):
            raise ValueError(f"search(dtype={spec.dtype!r}) over a {self.spec.dtype} corpus: "
                             "only float32 or the corpus dtype")
        nq = q.shape[0]
        bs = max(1, min(int(batch_size or spec.query_batch_size or self._auto_batch()), nq))
        program = self._program(bs, k, spec)
        replicated = NamedSharding(self.mesh, P())
        out_s = np.empty((nq, k), np.float32)
        out_i = np.empty((nq, k), np.int64)
        counts = np.zeros(5, np.int64)
        pending: collections.deque = collections.deque()

        def collect() -> None:
            b, m, (s, r, c) = pending.popleft()
            s, r = np.asarray(s)[:m], np.asarray(r)[:m].astype(np.int64)
            counts[:] += np.asarray(c)
            valid = (r >= 0) & (r < self._n)
            ids = np.where(valid, self._ids[np.clip(r, 0, self._n - 1)], -1)
            s = np.where(valid, s, np.float32(-np.inf))
            if not self._ids_ascending:  # rows -> ids: restore "equal scores, lower id first"
                s, ids = merge_topk([s], [ids], k)
            out_s[b:b + m], out_i[b:b + m] = s, ids

        for b in range(0, nq, bs):
            m = min(bs, nq - b)
            qb = np.zeros((bs, self.dim), np.float32)  # fresh: device_put may alias it (CPU)
            qb[:m] = q[b:b + m]
            # Dispatch runs ahead of the results (a few batches in flight): the device does
            # not wait for the host's conversion of the previous batch.
            pending.append((b, m, program(jax.device_put(qb, replicated), self._corpus,
                                          jax.device_put(np.arange(bs) < m, replicated))))
            if len(pending) > _IN_FLIGHT:
                collect()
        while pending:
            collect()
        if stats is not None:
            blocks = int(self._corpus.shape[0]) // self._block
            chunks = blocks * (self._block // spec.chunk_rows
                               if chunked_applies(spec, self._block, k, self.platform) else 0)
            for name, v in (("queries", nq), ("batches", -(-nq // bs)), ("blocks", blocks),
                            ("chunks", chunks),
                            ("rescanned_chunks", int(counts[0])),
                            ("fallback_blocks", int(counts[1])),
                            ("unsafe_chunks", int(counts[2])),
                            ("bmc_blocks", int(counts[3])),
                            ("pruned_blocks", int(counts[4]))):
                stats[name] = stats.get(name, 0) + v
        return out_s, out_i

    # -- persistence: the export is the storage ------------------------------------------------

    def save(self, directory: str) -> dict[str, Any]:
        """Writes ``index.json`` (spec + the export shards' file keys); the vectors stay in the
        export. Only an index built from a directory can be saved."""
        if self._source is None:
            raise ValueError("a JaxIndex built from an array has no files to refer to; build it "
                             "with build_jax_index_from_dir to save it")
        os.makedirs(directory, exist_ok=True)
        manifest = {"format": FORMAT, "version": _FORMAT_VERSION, "kind": KIND,
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
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
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
    mesh = mesh if mesh is not None else mesh_lib.make_mesh()
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
    ids = check_ids(np.arange(rows.n) if ids is None else ids, "build_jax_index")
    if len(ids) != rows.n:
        raise ValueError(f"build_jax_index: {len(ids)} ids for {rows.n} vectors")
    check_unique(ids, "build_jax_index")
    return _build(rows, ids, spec or JaxSearchSpec(), mesh, progress, None)


def build_jax_index_generated(n: int, dim: int, make_block: Callable[..., jax.Array],
                              spec: JaxSearchSpec | None = None, *, mesh: Mesh | None = None,
                              progress: bool = False) -> JaxIndex:
    """A JaxIndex over ``n`` rows (ids 0..n-1) made on the devices block by block:
    ``make_block(lo, hi, rows, device, dtype)`` returns a [rows, dim] array on ``device`` whose
    first ``hi - lo`` rows are rows [lo, hi) (the rest is zeroed). For corpora that need not
    exist on the host (``bench.jax_search --data device``)."""
    return _build(_GeneratedRows(n, dim, make_block), np.arange(n, dtype=np.int64),
                  spec or JaxSearchSpec(), mesh, progress, None)


def build_jax_index_from_dir(emb_dir: str, spec: JaxSearchSpec | None = None, *,
                             mesh: Mesh | None = None, progress: bool = True) -> JaxIndex:
    """A JaxIndex over an export directory's ``embeddings-K.npy`` + ``ids-K.npy`` shards,
    checked as ``build_index_from_dir`` checks them, streamed to the devices block by block."""
    source = ExportShards(emb_dir)
    ids = source.ids()
    record = {"source": os.path.abspath(emb_dir),
              "shards": [{"file": os.path.abspath(e), "rows": int(n),
                          "key": files.file_key(e)} for (e, _), n in zip(source.files, source.rows)]}
    return _build(source, ids, spec or JaxSearchSpec(), mesh, progress, record)
