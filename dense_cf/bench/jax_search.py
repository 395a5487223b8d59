"""Exact JAX search (``eval.index=jax``) at the device's speed: one process, a line per figure.

    # GPU (H100 / H200; JAX_PLATFORMS unset, no faiss, no TensorFlow; ~100 s wall with
    # compiles, estimated; tools/gpu/check.sh, stage d):
    python -m dense_cf.bench.jax_search --n 1048576,21015324 --dim 768 --k 100 \\
        --dtypes bfloat16 --batches 256,1024,4096 --chunk_rows 1024,4096 --queries 65536 \\
        --check_queries 256 --max_search_s 1.5 --data device --json_out jax_search_31.json
    # CPU (the faiss Flat peer runs where faiss imports; docs/scale.md has the figures):
    python -m dense_cf.bench.jax_search --n 1000000 --dim 768 --k 100 --dtypes float32,bfloat16 \\
        --batches 128 --select auto,chunked --queries 256 --check_queries 128 \\
        --max_search_s 30 --data host
    # smoke test (seconds): --n 5000 --dim 32 --batches 16,64 --queries 256 --check_queries 64

Per corpus size N and dtype, one JaxIndex (``select=auto``: the chunked exact top-k where it
applies, index/jax_search.py) and, per query batch size, one line printed as soon as measured
(flushed): queries/s over ``--queries`` (after a compile batch); effective GB/s of the corpus
scan (device bytes read once per batch, all devices) against the device's memory bandwidth;
TFLOP/s (2·N·D per query) against the device's peak for the dtype; how many chunks were unsafe
(the proof failed) and how many were re-scanned by gathering, and how many blocks fell back to
a full sort; R@k against float32 exact search on ``--check_queries`` queries. Per (N, dtype)
first: the old selection (``select=sort``, a full ``lax.top_k`` per block) on the check
queries, timed, and the chunked search on the same queries in the same batch, whose ids and
scores must equal it (``exact vs sort``: fractions equal, 1.0 when exact).

Data: ``--data host``: ``bench.index``'s clustered mixture made in numpy (float32) and copied
to the devices; the float32 reference is an exact float32 JaxIndex over those vectors, and
the faiss Flat peer (where faiss imports; else the reason is printed) searches the same vectors
and queries at the first batch size. ``--data device``: the same mixture made on the devices
with ``jax.random`` directly in the storage dtype, block by block (no host copy: corpora larger
than host memory, e.g. DPR's 21,015,324 passages); the float32 reference is then a float32
search over the stored (rounded) vectors with unrounded queries.

Bandwidth and peak: vendor datasheet figures for known GPUs (dense, no sparsity); else
``--bandwidth_gbs`` / ``--peak_tflops``, else measured here (a jitted copy; ``bench.peak``'s
matmul), and the output says which. Device memory: projected (``memory_per_device``) and, where
the backend reports it, measured peak bytes in use. :func:`time_search` and
:func:`peer_skipped` are what ``bench.accelerator`` reuses.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import sys
import time
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from dense_cf import app as _app
from dense_cf.bench.index import BLOCK, clustered_block, make_centers, recall_at
from dense_cf.bench.peak import measure_matmul_peak
from dense_cf.files import human_bytes
from dense_cf.index import FAISS_INSTALL, IndexSpec, build_index, faiss_available
from dense_cf.index.jax_search import (
    SELECTS,
    JaxSearchSpec,
    build_jax_index,
    build_jax_index_generated,
    memory_per_device,
)

FLAGS = flags.FlagValues()
_N = flags.DEFINE_string("n", "1048576", "Comma-separated corpus sizes.", flag_values=FLAGS)
_DIM = flags.DEFINE_integer("dim", 768, "Vector dimension.", flag_values=FLAGS)
_K = flags.DEFINE_integer("k", 100, "Search depth.", flag_values=FLAGS)
_DTYPES = flags.DEFINE_string("dtypes", "bfloat16", "Comma-separated corpus dtypes.",
                              flag_values=FLAGS)
_BATCHES = flags.DEFINE_string("batches", "256,1024", "Comma-separated query batch sizes.",
                               flag_values=FLAGS)
_QUERIES = flags.DEFINE_integer("queries", 4096, "Queries per timed search.", flag_values=FLAGS)
_CHECK = flags.DEFINE_integer("check_queries", 256, "Queries for R@k and the sort comparison.",
                              flag_values=FLAGS)
_DATA = flags.DEFINE_enum("data", "host", ["host", "device"], "Where the corpus is made.",
                          flag_values=FLAGS)
_BLOCK_ROWS = flags.DEFINE_integer("block_rows", 65_536, "JaxSearchSpec.block_rows.",
                                   flag_values=FLAGS)
_CHUNK_ROWS = flags.DEFINE_string("chunk_rows", "1024", "JaxSearchSpec.chunk_rows; several "
                                  "(comma-separated): all are timed at the first N, the fastest "
                                  "is kept for the others.", flag_values=FLAGS)
_CHUNK_K = flags.DEFINE_integer("chunk_k", 16, "JaxSearchSpec.chunk_k.", flag_values=FLAGS)
_RESCAN = flags.DEFINE_integer("rescan_chunks", 4, "JaxSearchSpec.rescan_chunks.",
                               flag_values=FLAGS)
_SELECT = flags.DEFINE_string("select", "auto,bmc,sort", "JaxSearchSpec.select of the timed "
                              "searches, comma-separated (auto, bmc, chunked, sort).",
                              flag_values=FLAGS)
_PRUNE = flags.DEFINE_string("prune_bins", "0", "JaxSearchSpec.prune_bins of bmc, comma-"
                             "separated: each is timed (0: no pruning).", flag_values=FLAGS)
_BIN_ROWS = flags.DEFINE_string("bin_rows", "128", "JaxSearchSpec.bin_rows of bmc; several "
                                "(comma-separated): all are timed at the first N, the fastest "
                                "is kept for the others.", flag_values=FLAGS)
_BANDWIDTH = flags.DEFINE_float("bandwidth_gbs", 0.0, "Device memory bandwidth, GB/s (0: "
                                "datasheet for known GPUs, else measured).", flag_values=FLAGS)
_PEAK = flags.DEFINE_float("peak_tflops", 0.0, "Device matmul peak, TFLOP/s (0: datasheet for "
                           "known GPUs, else measured per dtype).", flag_values=FLAGS)
_PEER = flags.DEFINE_bool("peer", True, "Run the faiss Flat peer (--data host, faiss importable).",
                          flag_values=FLAGS)
_MAX_S = flags.DEFINE_float("max_search_s", 5.0, "Seconds one timed search may take about "
                            "(fewer queries where slower).", flag_values=FLAGS)
_SEED = flags.DEFINE_integer("seed", 0, "Data seed.", flag_values=FLAGS)
_JSON = flags.DEFINE_string("json_out", "", "Also write the results to this JSON file.",
                            flag_values=FLAGS)

# Vendor datasheets (dense; no sparsity): memory bytes/s, matmul FLOP/s per dtype. float32 is
# the non-tensor-core rate: float32 corpora are searched at Precision.HIGHEST. Matched in order
# against jax's device_kind.
DEVICE_SPECS: tuple[tuple[str, float, dict[str, float]], ...] = (
    ("H200", 4.8e12, {"bfloat16": 989e12, "float16": 989e12, "float32": 67e12}),
    ("H100 PCIe", 2.0e12, {"bfloat16": 756e12, "float16": 756e12, "float32": 51e12}),
    ("H100 NVL", 3.9e12, {"bfloat16": 835e12, "float16": 835e12, "float32": 60e12}),
    ("H100", 3.35e12, {"bfloat16": 989e12, "float16": 989e12, "float32": 67e12}),
    ("A100", 2.0e12, {"bfloat16": 312e12, "float16": 312e12, "float32": 19.5e12}),
)


def peer_skipped() -> str | None:
    """Why the faiss Flat peer cannot run in this process (None: it can)."""
    if faiss_available():
        return None
    return f"faiss is not importable here; install it with {FAISS_INSTALL}"


def time_search(index: Any, queries: np.ndarray, k: int, batch: int, *, compile_first: bool,
                **search_kw: Any) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """One ``index.search(queries, k)`` in batches of ``batch``, timed: ({compile_s, search_s,
    qps}, scores, ids). ``compile_first``: one batch is searched first and timed apart as
    ``compile_s`` (a JaxIndex compiles its program there); else ``compile_s`` is None."""
    compile_s = None
    if compile_first:
        t0 = time.perf_counter()
        index.search(queries[:batch], k, batch_size=batch, **search_kw)
        compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    scores, ids = index.search(queries, k, batch_size=batch, **search_kw)
    search_s = time.perf_counter() - t0
    return ({"compile_s": compile_s, "search_s": search_s, "qps": len(queries) / search_s},
            scores, ids)


# ------------------------------------------------------------------------------------------
# The device: bandwidth, peak, memory
# ------------------------------------------------------------------------------------------

def device_limits(dtypes: list[str]) -> dict[str, Any]:
    """{kind, bandwidth (bytes/s), peak {dtype: FLOP/s}, source} for jax's first device."""
    dev = jax.devices()[0]
    kind = str(getattr(dev, "device_kind", dev.platform))
    for name, bw, peak in DEVICE_SPECS:
        if dev.platform == "gpu" and name in kind:
            out = {"kind": kind, "bandwidth": bw, "peak": dict(peak), "source": "datasheet"}
            break
    else:
        out = {"kind": kind, "bandwidth": _measure_bandwidth(), "source": "measured here",
               # float32 sums: the search sums every corpus dtype in float32.
               "peak": {d: measure_matmul_peak(1024, d, repeats=2, min_time=0.2,
                                          sum_dtype=jnp.float32) for d in dtypes}}
    if _BANDWIDTH.value:
        out["bandwidth"], out["source"] = _BANDWIDTH.value * 1e9, "flag"
    if _PEAK.value:
        out["peak"], out["source"] = {d: _PEAK.value * 1e12 for d in dtypes}, "flag"
    return out


def _measure_bandwidth(mib: int = 256) -> float:
    """Bytes/s of a jitted elementwise pass over ``mib`` MiB (read + write counted)."""
    x = jnp.ones((mib * 2**18,), jnp.float32)
    nbytes = x.nbytes
    f = jax.jit(lambda a: a * 1.0001, donate_argnums=0)  # in place: no fresh pages per call
    x = f(x).block_until_ready()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        x = f(x).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return 2 * nbytes / best


def _peak_bytes_in_use() -> int | None:
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# ------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------

def _clusters(n: int) -> int:
    return max(16, n // 1000)


def _queries(centers: np.ndarray, count: int) -> np.ndarray:
    return clustered_block(centers, count, [_SEED.value, 2])


def host_corpus(n: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(vectors float32 [n, dim], centres): ``bench.index``'s clustered mixture."""
    centers = make_centers(dim, _clusters(n), _SEED.value)
    x = np.empty((n, dim), np.float32)
    for b, start in enumerate(range(0, n, BLOCK)):
        x[start:start + BLOCK] = clustered_block(centers, min(BLOCK, n - start),
                                                 [_SEED.value, 1, b])
    return x, centers


@partial(jax.jit, static_argnames=("rows", "dtype"))
def _device_rows(centers: jax.Array, key: jax.Array, *, rows: int, dtype: Any) -> jax.Array:
    """``clustered_block``'s mixture drawn with jax.random on the device, in ``dtype``."""
    ka, kx, ks = jax.random.split(key, 3)
    dim = centers.shape[1]
    assign = jax.random.randint(ka, (rows,), 0, centers.shape[0])
    x = jax.random.normal(kx, (rows, dim), jnp.float32) * (1.0 / np.sqrt(dim)) + centers[assign]
    return (x * jnp.exp(0.05 * jax.random.normal(ks, (rows, 1)))).astype(dtype)


def device_index(n: int, dim: int, spec: JaxSearchSpec) -> tuple[Any, np.ndarray]:
    """(JaxIndex over n rows made on the devices, centres for the queries)."""
    centers = make_centers(dim, _clusters(n), _SEED.value)
    key = jax.random.key(_SEED.value)

    on: dict[Any, jax.Array] = {}

    def make_block(lo: int, hi: int, rows: int, device: Any, dtype: Any) -> jax.Array:
        if device not in on:  # committed inputs: the program runs on ``device``
            on[device] = jax.device_put(centers, device)
        return _device_rows(on[device], jax.device_put(jax.random.fold_in(key, lo), device),
                            rows=rows, dtype=jnp.dtype(dtype))

    return build_jax_index_generated(n, dim, make_block, spec), centers


# ------------------------------------------------------------------------------------------
# One corpus size
# ------------------------------------------------------------------------------------------

def _spec(dtype: str, batch: int, select: str | None = None, chunk_rows: int = 1024
          ) -> JaxSearchSpec:
    return JaxSearchSpec(dtype=dtype, query_batch_size=batch, block_rows=_BLOCK_ROWS.value,
                         select=select or "auto", chunk_rows=chunk_rows,
                         chunk_k=_CHUNK_K.value, rescan_chunks=_RESCAN.value)


def _say(msg: str) -> None:
    print(msg, flush=True)


def _fraction_equal(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(a == b))


def _compare(s: np.ndarray, i: np.ndarray, ref_s: np.ndarray, ref_i: np.ndarray
             ) -> dict[str, float]:
    """Fractions of equal ids and scores, and the largest score difference: a difference
    means the two programs' matmuls rounded differently (XLA may pick another GEMM algorithm
    per program), not a selection error; equal scores with unequal ids would be one."""
    return {"ids": _fraction_equal(i, ref_i), "scores": _fraction_equal(s, ref_s),
            "max_abs_score_diff": float(np.max(np.abs(s - ref_s), initial=0.0,
                                               where=np.isfinite(s - ref_s)))}


def run_size(n: int, dim: int, k: int, dtypes: list[str], batches: list[int], nq: int,
             ncheck: int, limits: dict[str, Any], chunks: list[int], selects: list[str],
             bins: list[int], prunes: list[int]) -> list[dict[str, Any]]:
    """Every measurement of one corpus size (module docstring), printed as it is taken; the
    layout is built for the largest of ``chunks`` (powers of two: the others divide it)."""
    rows: list[dict[str, Any]] = []
    k = min(k, n)
    x = ref = None
    if _DATA.value == "host":
        t0 = time.perf_counter()
        x, centers = host_corpus(n, dim)
        _say(f"n={n}: made {n} x {dim} float32 vectors on the host in "
             f"{time.perf_counter() - t0:.1f}s")
        queries = _queries(centers, max(nq, ncheck))
        f32 = build_jax_index(x, spec=_spec("float32", batches[0], "sort"))
        timing, ref_s, ref_i = time_search(f32, queries[:ncheck], k, min(batches[0], ncheck),
                                           compile_first=True)
        ref = ref_i
        _say(f"n={n}: float32 exact reference (select=sort) on {ncheck} queries: "
             f"{timing['qps']:.1f} q/s")
        del f32
        gc.collect()
        rows += _peer(x, queries, k, batches[0], ref)
    for dtype in dtypes:
        spec = _spec(dtype, batches[0], chunk_rows=max(chunks))
        t0 = time.perf_counter()
        if _DATA.value == "host":
            index = build_jax_index(x, spec=spec)
        else:
            index, centers = device_index(n, dim, spec)
            queries = _queries(centers, max(nq, ncheck))
        load_s = time.perf_counter() - t0
        check = queries[:ncheck]
        if ref is None or _DATA.value == "device":
            _, ref = index.search(check, k, batch_size=min(batches[0], ncheck), select="sort",
                                  dtype="float32")
        cb = min(batches[0], ncheck)
        sort_t, sort_s, sort_i = time_search(index, check, k, cb, compile_first=True,
                                             select="sort")
        proj = memory_per_device(n, dim, index.num_shards, _spec(dtype, max(batches)))
        _say(f"n={n} {dtype}: loaded in {load_s:.1f}s, {human_bytes(index.device_bytes)} on "
             f"{index.num_shards} device(s) (projected per device: corpus "
             f"{human_bytes(proj['corpus_bytes'])} + scores {human_bytes(proj['scores_bytes'])} "
             f"at batch {max(batches)}); select=sort at batch {cb}: {sort_t['qps']:.1f} q/s; "
             f"select=auto runs {index.selection(k, select='auto')} here")
        auto = index.selection(k, select="auto")
        for batch, over in _plan(index, k, batches, selects, chunks, bins, prunes):
            stats: dict[str, int] = {}
            timing = time_budgeted(index, queries[:nq], k, batch, **over)
            s_check, ids_check = index.search(check, k, batch_size=batch, stats=stats,
                                              **over)  # counters on the check queries
            ran = index.selection(k, **over)
            row = _row(n, dim, k, dtype, batch, timing["queries"], index, timing, stats, limits,
                       ran, over)
            # The same matmul shapes as the sort run at the check batch: ids and scores equal.
            exact = (_compare(s_check, ids_check, sort_s, sort_i) if batch == cb else None)
            row.update({"load_s": load_s, "sort_qps": sort_t["qps"], "sort_batch": cb,
                        "auto_runs": auto,
                        "exact_vs_sort": exact,
                        f"recall@{k}_vs_float32": recall_at(ids_check, ref, k),
                        "projected_per_device": proj, "peak_bytes_in_use": _peak_bytes_in_use()})
            rows.append(row)
            _say(_line(row))
        del index
        gc.collect()
    return rows


def _plan(index: Any, k: int, batches: list[int], selects: list[str], chunks: list[int],
          bins: list[int], prunes: list[int]) -> list[tuple[int, dict[str, Any]]]:
    """(batch, search overrides) to time: per batch, each asked selection once per chunk size
    (chunked) or bin size and pruning (bmc) it resolves to; one that resolves to sort
    (``auto`` may, and bmc or chunked where the blocks are too small) runs once as sort."""
    plan: list[tuple[int, dict[str, Any]]] = []
    seen: set[tuple] = set()
    for batch in batches:
        for select in selects:
            for chunk in chunks:
                for b in bins:
                    for prune in prunes:
                        over = {"select": select, "chunk_rows": chunk, "bin_rows": b}
                        ran = index.selection(k, **over)
                        key = (batch, ran, chunk if ran == "chunked" else None,
                               (b, prune) if ran == "bmc" else None)
                        if key in seen:
                            continue
                        seen.add(key)
                        if ran == "sort":
                            over = {"select": "sort"}
                        elif ran == "chunked":
                            over = {"select": "chunked", "chunk_rows": chunk}
                        else:
                            over = {"select": "bmc", "bin_rows": b, "prune_bins": prune}
                        plan.append((batch, over))
    return plan


def time_budgeted(index: Any, queries: np.ndarray, k: int, batch: int, **search_kw: Any
                  ) -> dict[str, Any]:
    """``time_search`` after a compile batch and one timed batch, over as many of ``queries``
    as fit in about ``--max_search_s`` at that batch's speed (whole batches, at least one)."""
    t0 = time.perf_counter()
    index.search(queries[:batch], k, batch_size=batch, **search_kw)
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    index.search(queries[:batch], k, batch_size=batch, **search_kw)
    one = time.perf_counter() - t0
    fit = max(1, int(_MAX_S.value / max(one, 1e-6))) * batch
    timing, _, _ = time_search(index, queries[:min(len(queries), fit)], k, batch,
                               compile_first=False, **search_kw)
    return {**timing, "compile_s": first_s, "queries": min(len(queries), fit)}


def bound_s_per_query(n: int, dim: int, batch: int, dtype: str, devices: int,
                      limits: dict[str, Any]) -> float:
    """The least time one query can take on these devices: the larger of the GEMM at the
    matmul peak and the memory traffic a selection cannot avoid (the float32 scores written
    once and read once, plus the corpus read once per query batch) at the memory bandwidth."""
    gemm = 2.0 * n * dim / (limits["peak"][dtype] * devices)
    traffic = (8.0 * n + n * dim * jnp.dtype(dtype).itemsize / batch)
    return max(gemm, traffic / (limits["bandwidth"] * devices))


def _row(n: int, dim: int, k: int, dtype: str, batch: int, nq: int, index: Any,
         timing: dict[str, Any], stats: dict[str, int], limits: dict[str, Any], ran: str,
         over: dict[str, Any]) -> dict[str, Any]:
    batches = -(-nq // batch)
    bytes_s = batches * index.device_bytes / timing["search_s"]  # all devices together
    flops = 2.0 * n * dim * nq / timing["search_s"]
    devices = index.num_shards
    q = max(stats.get("queries", 1), 1)
    bound = bound_s_per_query(n, dim, batch, dtype, devices, limits)
    return {"n": n, "dim": dim, "k": k, "dtype": dtype, "batch": batch, "queries": nq,
            "devices": devices, "select": ran,
            "chunk_rows": over.get("chunk_rows") if ran == "chunked" else None,
            "bin_rows": over.get("bin_rows") if ran == "bmc" else None,
            "prune_bins": over.get("prune_bins") if ran == "bmc" else None, **timing,
            "gbs": bytes_s / 1e9, "bandwidth_frac": bytes_s / devices / limits["bandwidth"],
            "tflops": flops / 1e12, "peak_frac": flops / devices / limits["peak"][dtype],
            "bound_us_per_query": bound * 1e6, "bound_frac": bound * timing["qps"],
            "unsafe_chunk_frac": stats["unsafe_chunks"] / max(stats["chunks"] * q, 1),
            "counters": stats}


def _line(r: dict[str, Any]) -> str:
    c = r["counters"]
    k = r["k"]
    sel = (f"chunked/{r['chunk_rows']}" if r["chunk_rows"] else
           f"bmc/{r['bin_rows']}" + (f"/prune{r['prune_bins']}" if r.get("prune_bins") else "")
           if r.get("bin_rows") else r["select"])
    return (f"n={r['n']} {r['dtype']} k={k} batch={r['batch']} select={sel}: "
            f"{r['qps']:,.0f} q/s over {r['queries']} (first batch {r['compile_s']:.1f}s), "
            f"{r['gbs']:,.1f} GB/s "
            f"({100 * r['bandwidth_frac']:.1f}% of bandwidth), {r['tflops']:.3f} TFLOP/s "
            f"({100 * r['peak_frac']:.1f}% of peak), {100 * r['bound_frac']:.1f}% of the "
            f"bound ({r['bound_us_per_query']:.2f} us/query); on {c['queries']} check "
            f"queries: bmc blocks {c['bmc_blocks']} (pruned {c['pruned_blocks']}), unsafe "
            f"chunks {c['unsafe_chunks']}/{c['chunks'] * c['queries']} (re-scanned by gather "
            f"{c['rescanned_chunks']}), full-sort blocks {c['fallback_blocks']}/"
            f"{c['blocks'] * c['batches']}; R@{k} vs float32 {r[f'recall@{k}_vs_float32']:.4f}"
            + (f"; vs sort: ids {r['exact_vs_sort']['ids']:.4f} scores "
               f"{r['exact_vs_sort']['scores']:.4f}" if r["exact_vs_sort"] else ""))


def _peer(x: np.ndarray, queries: np.ndarray, k: int, batch: int, ref: np.ndarray
          ) -> list[dict[str, Any]]:
    """faiss Flat over the same vectors and queries (host data only)."""
    why = peer_skipped() if _PEER.value else "--nopeer"
    if why is not None:
        _say(f"faiss Flat peer skipped: {why}")
        return []
    import faiss
    t0 = time.perf_counter()
    flat = build_index(x, None, IndexSpec(kind="flat", use_gpu=False, query_batch_size=batch))
    build_s = time.perf_counter() - t0
    nq = _QUERIES.value
    timing, _, ids = time_search(flat, queries[:nq], k, batch, compile_first=False)
    row = {"peer": "faiss-flat", "n": len(x), "dim": x.shape[1], "k": k, "batch": batch,
           "queries": nq, "build_s": build_s, "threads": faiss.omp_get_max_threads(), **timing,
           f"recall@{k}_vs_float32": recall_at(ids[:len(ref)], ref, k)}
    _say(f"n={len(x)} faiss Flat (IndexFlatIP, {row['threads']} threads) batch={batch}: "
         f"{timing['qps']:,.1f} q/s; R@{k} vs float32 {row[f'recall@{k}_vs_float32']:.4f}")
    del flat
    gc.collect()
    return [row]


def _ints(s: str) -> list[int]:
    return [int(v) for v in s.split(",") if v.strip()]


def main(argv: list[str]) -> None:
    del argv
    t_start = time.perf_counter()
    dtypes = [d.strip() for d in _DTYPES.value.split(",") if d.strip()]
    batches = _ints(_BATCHES.value)
    dev = jax.devices()[0]
    _say(" ".join(["python -m dense_cf.bench.jax_search"] + sys.argv[1:]))
    limits = device_limits(dtypes)
    env = {"device": limits["kind"], "platform": dev.platform, "devices": jax.device_count(),
           "jax": jax.__version__, "cpu": cpu_model(), "cpus": os.cpu_count(),
           "bandwidth": limits["bandwidth"], "peak": limits["peak"],
           "limits_source": limits["source"]}
    _say(f"device: {env['device']} x{env['devices']} (jax {env['jax']}), host CPU: {env['cpu']} "
         f"({env['cpus']} cpus); bandwidth {limits['bandwidth'] / 1e9:,.0f} GB/s, peak "
         + ", ".join(f"{d} {p / 1e12:,.3f} TFLOP/s" for d, p in limits["peak"].items())
         + f" ({limits['source']})")
    rows: list[dict[str, Any]] = []
    chunks = _ints(_CHUNK_ROWS.value)
    selects = [s.strip() for s in _SELECT.value.split(",") if s.strip()]
    for s in selects:
        if s not in SELECTS:
            raise ValueError(f"--select: {s!r} is not one of {SELECTS}")
    bins = _ints(_BIN_ROWS.value)
    for i, n in enumerate(_ints(_N.value)):
        rows += run_size(n, _DIM.value, _K.value, dtypes, batches, _QUERIES.value,
                         min(_CHECK.value, _QUERIES.value), limits, chunks, selects, bins,
                         _ints(_PRUNE.value))
        timed = [r for r in rows if r.get("chunk_rows")]
        if i == 0 and len(chunks) > 1 and timed:
            chunks = [max(timed, key=lambda r: r["qps"])["chunk_rows"]]
            _say(f"chunk_rows={chunks[0]} was fastest at n={n}: kept for the other sizes")
        timed = [r for r in rows if r.get("bin_rows")]
        if i == 0 and len(bins) > 1 and timed:
            bins = [max(timed, key=lambda r: r["qps"])["bin_rows"]]
            _say(f"bin_rows={bins[0]} was fastest at n={n}: kept for the other sizes")
        if _JSON.value:  # after every size: a later out-of-memory keeps the earlier figures
            with open(_JSON.value, "w") as f:
                json.dump({"env": env, "rows": rows}, f, indent=2)
    for line in summary(rows):
        _say(line)
    _say(f"total {time.perf_counter() - t_start:.0f}s")


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """Per (n, dtype, batch): each selection's best q/s, and its ratio to sort and to the faiss
    Flat peer (where it ran at that batch), as measured in this run."""
    out = []
    peers = {(r["n"], r["batch"]): r["qps"] for r in rows if r.get("peer") == "faiss-flat"}
    keys = sorted({(r["n"], r["dtype"], r["batch"]) for r in rows if "select" in r})
    for n, dtype, batch in keys:
        best: dict[str, float] = {}
        auto = ""
        for r in rows:
            if (r.get("n"), r.get("dtype"), r.get("batch")) == (n, dtype, batch):
                name = r["select"] + (f"+prune{r['prune_bins']}" if r.get("prune_bins") else "")
                best[name] = max(best.get(name, 0.0), r["qps"])
                auto = r["auto_runs"]
        peer = peers.get((n, batch))
        parts = []
        for sel, qps in sorted(best.items(), key=lambda kv: -kv[1]):
            part = f"{sel} {qps:,.1f} q/s"
            if "sort" in best and sel != "sort":
                part += f" ({qps / best['sort']:.2f}x sort"
                part += f", {qps / peer:.2f}x faiss Flat)" if peer else ")"
            elif peer:
                part += f" ({qps / peer:.2f}x faiss Flat)"
            parts.append(part)
        out.append(f"summary n={n} {dtype} batch={batch} (auto runs {auto}): " + "; ".join(parts)
                   + (f"; faiss Flat {peer:,.1f} q/s" if peer else ""))
    return out


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
