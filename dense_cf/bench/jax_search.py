"""JAX-native search (``eval.index=jax``) against faiss Flat on the same vectors and queries.

    python -m dense_cf.bench.jax_search --n 1000000 --dims 384,768
    python -m dense_cf.bench.jax_search --n 100000 --dims 384 --rounds 1   # quick (~1 minute)

Data: ``dense_cf.bench.index``'s clustered vectors (float32 shards in the exporter's layout,
one per 65,536 rows) and queries from the same mixture. Per dimension, the A/B pair faiss
``flat`` (IndexFlatIP, ``DenseIndex``) / ``jax`` (float32, exact ``top_k``) runs ``--rounds``
times, alternating which goes first, each in a fresh subprocess so that its peak RSS is its own;
the table reports medians. ``jax-bf16`` (bfloat16 corpus) and ``jax-approx``
(``approx_max_k``, ``--recall_target``) run once. Per run: load/build seconds (jax: streaming
the shards onto the devices; its compile is timed apart), queries/s of one ``search(queries,
k)`` in batches of ``--batch`` (after one warm-up batch for jax, which compiles), peak RSS
increase (psutil sampling + ru_maxrss, as ``bench.index``), corpus bytes held (faiss: 4·D per
vector; jax: the device buffers, padding included; both + 8 bytes per id), recall@k and
exact-id agreement against the first flat run's results. Ends with the memory per device of
``eval.index=jax`` for DPR's 21M passages over N devices (``memory_per_device``).

Without faiss (docs/scale.md, "Without faiss") the flat peer is skipped with its reason printed,
and R@k / ids are against the first ``jax`` (exact float32) run. :func:`time_search` and
:func:`peer_skipped` are what ``bench.accelerator`` reuses.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any

import jax
import numpy as np
from absl import flags, logging

from dense_cf.bench.index import BLOCK, PeakRSS, clustered_block, make_centers, recall_at
from dense_cf.cli import _app
from dense_cf.files import human_bytes, make_dir
from dense_cf.index import FAISS_INSTALL, IndexSpec, build_index_from_dir, faiss_available
from dense_cf.index.jax_search import JaxSearchSpec, build_jax_index_from_dir, memory_per_device

FLAGS = flags.FlagValues()
_N = flags.DEFINE_integer("n", 1_000_000, "Corpus vectors.", flag_values=FLAGS)
_DIMS = flags.DEFINE_string("dims", "384,768", "Comma-separated vector dimensions.", flag_values=FLAGS)
_QUERIES = flags.DEFINE_integer("queries", 256, "Queries per timed search.", flag_values=FLAGS)
_BATCH = flags.DEFINE_integer("batch", 128, "Query batch (both searchers).", flag_values=FLAGS)
_K = flags.DEFINE_integer("k", 100, "Search depth.", flag_values=FLAGS)
_ROUNDS = flags.DEFINE_integer("rounds", 3, "flat/jax A/B rounds per dimension.", flag_values=FLAGS)
_EXTRA = flags.DEFINE_string("extra", "jax-bf16,jax-approx", "Variants run once per dimension.",
                             flag_values=FLAGS)
_RECALL = flags.DEFINE_float("recall_target", 0.95, "approx_max_k recall target.", flag_values=FLAGS)
_BLOCK_ROWS = flags.DEFINE_integer("block_rows", 65_536, "JaxSearchSpec.block_rows.", flag_values=FLAGS)
_SEED = flags.DEFINE_integer("seed", 0, "Data seed.", flag_values=FLAGS)
_WORKDIR = flags.DEFINE_string("workdir", "", "Data directory (default: a temp dir).", flag_values=FLAGS)
_KEEP = flags.DEFINE_bool("keep", False, "Keep the workdir afterwards.", flag_values=FLAGS)
_SINGLE = flags.DEFINE_string("single", "", "Internal: one variant in this process.", flag_values=FLAGS)
_DIM = flags.DEFINE_integer("dim", 0, "Internal: the dimension of --single.", flag_values=FLAGS)
_JSON = flags.DEFINE_string("json_out", "", "Also write the results to this JSON file.", flag_values=FLAGS)

VARIANTS = ("flat", "jax", "jax-bf16", "jax-approx")
PROJECT_N = 21_015_324  # DPR's psgs_w100 passages
PROJECT_DEVICES = (1, 8, 16, 64, 256)


def peer_skipped() -> str | None:
    """Why the faiss Flat peer cannot run in this process (None: it can)."""
    if faiss_available():
        return None
    return f"faiss is not importable here; install it with {FAISS_INSTALL}"


def time_search(index: Any, queries: np.ndarray, k: int, batch: int, *, compile_first: bool
                ) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """One ``index.search(queries, k)`` in batches of ``batch``, timed: ({compile_s, search_s,
    qps}, scores, ids). ``compile_first``: one batch is searched first and timed apart as
    ``compile_s`` (a JaxIndex compiles its program there); else ``compile_s`` is None."""
    compile_s = None
    if compile_first:
        t0 = time.perf_counter()
        index.search(queries[:batch], k, batch_size=batch)
        compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    scores, ids = index.search(queries, k, batch_size=batch)
    search_s = time.perf_counter() - t0
    return ({"compile_s": compile_s, "search_s": search_s, "qps": len(queries) / search_s},
            scores, ids)


def _reference_variant() -> str:
    """What R@k and ids are measured against: faiss Flat, or exact float32 jax without faiss."""
    return "flat" if peer_skipped() is None else "jax"


def _spec(variant: str) -> JaxSearchSpec:
    return JaxSearchSpec(dtype="bfloat16" if variant == "jax-bf16" else "float32",
                         approx=variant == "jax-approx", recall_target=_RECALL.value,
                         query_batch_size=_BATCH.value, block_rows=_BLOCK_ROWS.value)


# ------------------------------------------------------------------------------------------
# Parent
# ------------------------------------------------------------------------------------------

def _prepare(workdir: str, dim: int) -> None:
    emb_dir = os.path.join(workdir, f"emb-{dim}")
    os.makedirs(emb_dir, exist_ok=True)
    clusters = max(16, _N.value // 1000)
    centers = make_centers(dim, clusters, _SEED.value)
    np.save(os.path.join(workdir, f"queries-{dim}.npy"),
            clustered_block(centers, _QUERIES.value, [_SEED.value, 2]))
    for b, start in enumerate(range(0, _N.value, BLOCK)):
        x = clustered_block(centers, min(BLOCK, _N.value - start), [_SEED.value, 1, b])
        np.save(os.path.join(emb_dir, f"embeddings-{b:05d}.npy"), x)
        np.save(os.path.join(emb_dir, f"ids-{b:05d}.npy"),
                np.arange(start, start + len(x), dtype=np.int64))


def _child(variant: str, dim: int, workdir: str) -> dict[str, Any]:
    args = [sys.executable, "-m", "dense_cf.bench.jax_search", f"--single={variant}",
            f"--dim={dim}", f"--workdir={workdir}", f"--n={_N.value}", f"--queries={_QUERIES.value}",
            f"--batch={_BATCH.value}", f"--k={_K.value}", f"--recall_target={_RECALL.value}",
            f"--block_rows={_BLOCK_ROWS.value}"]
    proc = subprocess.run(args, stdout=subprocess.PIPE, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"benchmark of {variant} at dim {dim} failed (exit {proc.returncode})")
    return json.loads(lines[-1][len("RESULT "):])


def _run_dim(workdir: str, dim: int, failures: list[str]) -> list[dict[str, Any]]:
    """Every run of one dimension; a failed run (e.g. killed for memory on a shared machine)
    is logged and listed in ``failures``, and the others go on."""
    t0 = time.perf_counter()
    _prepare(workdir, dim)
    logging.info("bench: wrote %d x %d float32 vectors in %.1fs", _N.value, dim,
                 time.perf_counter() - t0)
    pair = ("flat", "jax") if peer_skipped() is None else ("jax",)
    plan = [(r, v) for r in range(_ROUNDS.value)  # flat first in round 0: the reference
            for v in (pair if r % 2 == 0 else pair[::-1])]
    for variant in [v.strip() for v in _EXTRA.value.split(",") if v.strip()]:
        if variant not in VARIANTS:
            raise ValueError(f"--extra: unknown variant {variant!r} (known: {VARIANTS})")
        plan.append((0, variant))
    results = []
    for r, variant in plan:
        logging.info("bench: dim %d round %d %s ...", dim, r, variant)
        try:
            results.append(dict(_child(variant, dim, workdir), round=r))
        except RuntimeError as e:
            logging.error("bench: %s", e)
            failures.append(str(e))
            continue
        logging.info("bench: %s", json.dumps(results[-1]))
    shutil.rmtree(os.path.join(workdir, f"emb-{dim}"), ignore_errors=True)
    return results


def _median_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for dim in sorted({r["dim"] for r in results}):
        for variant in VARIANTS:
            runs = [r for r in results if r["dim"] == dim and r["variant"] == variant]
            if not runs:
                continue
            row = {"dim": dim, "variant": variant, "runs": len(runs)}
            for key in ("build_s", "compile_s", "qps", "peak_rss_increase", "corpus_bytes",
                        f"recall@{runs[0]['k']}", "ids_equal", "max_abs_score_diff"):
                vals = [r[key] for r in runs if r.get(key) is not None]
                row[key] = statistics.median(vals) if vals else None
            row["qps_all"] = [round(r["qps"], 1) for r in runs]
            rows.append(row)
    return rows


def _table(rows: list[dict[str, Any]], k: int) -> str:
    ids_ref = f"ids={_reference_variant()}"
    head = (f"{'dim':>4} {'variant':<10} {'runs':>4} {'build s':>8} {'compile s':>9} {'QPS':>7} "
            f"{'QPS/flat':>8} {'peak RSS +':>10} {'corpus':>9} {f'R@{k}':>6} {ids_ref:>8} "
            f"{'max|ds|':>8}  QPS per run")
    out = [head, "-" * len(head)]
    flat_qps = {r["dim"]: r["qps"] for r in rows if r["variant"] == "flat"}

    def f(v, fmt):
        return format(v, fmt) if v is not None else "-"
    for r in rows:
        ratio = r["qps"] / flat_qps[r["dim"]] if r["dim"] in flat_qps else None
        out.append(f"{r['dim']:>4} {r['variant']:<10} {r['runs']:>4} {r['build_s']:8.1f} "
                   f"{f(r['compile_s'], '9.1f'):>9} {r['qps']:7.1f} {f(ratio, '8.2f'):>8} "
                   f"{human_bytes(r['peak_rss_increase']):>10} {human_bytes(r['corpus_bytes']):>9} "
                   f"{f(r[f'recall@{k}'], '6.4f'):>6} {f(r['ids_equal'], '8.4f'):>8} "
                   f"{f(r['max_abs_score_diff'], '8.1e'):>8}  {r['qps_all']}")
    return "\n".join(out)


def _projection(dims: list[int]) -> str:
    head = f"{'dim':>4} {'dtype':<8} " + " ".join(f"{f'{d} dev':>10}" for d in PROJECT_DEVICES)
    out = [f"eval.index=jax memory per device for {PROJECT_N:,} passages (corpus rows incl. "
           f"padding + one [batch={_BATCH.value}, block] float32 score block; ids stay on the "
           f"host: {human_bytes(PROJECT_N * 8)})", head, "-" * len(head)]
    for dim in dims:
        for dtype in ("float32", "bfloat16"):
            spec = JaxSearchSpec(dtype=dtype, query_batch_size=_BATCH.value,
                                 block_rows=_BLOCK_ROWS.value)
            cells = []
            for d in PROJECT_DEVICES:
                m = memory_per_device(PROJECT_N, dim, d, spec)
                cells.append(f"{human_bytes(m['corpus_bytes'] + m['scores_bytes']):>10}")
            out.append(f"{dim:>4} {dtype:<8} " + " ".join(cells))
    return "\n".join(out)


# ------------------------------------------------------------------------------------------
# Child: one variant
# ------------------------------------------------------------------------------------------

def _run_single(variant: str) -> dict[str, Any]:
    threads = None
    if faiss_available():  # the peer's thread count, for the table header
        import faiss
        threads = faiss.omp_get_max_threads()

    workdir, dim, k = _WORKDIR.value, _DIM.value, min(_K.value, _N.value)
    emb_dir = os.path.join(workdir, f"emb-{dim}")
    queries = np.load(os.path.join(workdir, f"queries-{dim}.npy"))
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        if variant == "flat":
            index = build_index_from_dir(emb_dir, IndexSpec(kind="flat", use_gpu=False,
                                                            query_batch_size=_BATCH.value),
                                         progress=False)
            corpus_bytes = index.ntotal * (4 * dim + 8)
        else:
            index = build_jax_index_from_dir(emb_dir, _spec(variant), progress=False)
            corpus_bytes = index.device_bytes + 8 * index.ntotal
        build_s = time.perf_counter() - t0
        timing, scores, ids = time_search(index, queries, k, _BATCH.value,
                                          compile_first=variant != "flat")
    ref_path = os.path.join(workdir, f"ref-{dim}.npz")
    if variant == _reference_variant() and not os.path.exists(ref_path):
        np.savez(ref_path, scores=scores, ids=ids)
    ref = np.load(ref_path)
    return {"variant": variant, "dim": dim, "n": index.ntotal, "k": k, "queries": len(queries),
            "batch": _BATCH.value, "build_s": build_s, **timing,
            "peak_rss_increase": mem.peak - mem.base, "corpus_bytes": corpus_bytes,
            f"recall@{k}": recall_at(ids, ref["ids"], k),
            "ids_equal": float(np.mean(ids == ref["ids"])),
            "max_abs_score_diff": float(np.max(np.abs(scores - ref["scores"]))),
            "devices": jax.device_count(), "cpus": os.cpu_count(),
            "faiss_threads": threads}


def main(argv: list[str]) -> None:
    del argv
    if _SINGLE.value:
        print("RESULT " + json.dumps(_run_single(_SINGLE.value)), flush=True)
        return
    dims = [int(d) for d in _DIMS.value.split(",") if d.strip()]
    workdir = _WORKDIR.value or make_dir("dense_cf_jax_search_bench_")
    t0 = time.perf_counter()
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    try:
        for dim in dims:
            results += _run_dim(workdir, dim, failures)
    finally:
        if not _KEEP.value:
            shutil.rmtree(workdir, ignore_errors=True)
    k = min(_K.value, _N.value)
    rows = _median_rows(results)
    print("\n" + " ".join(["python -m dense_cf.bench.jax_search"] + sys.argv[1:]))
    print(f"n={_N.value} float32 queries={_QUERIES.value} batch={_BATCH.value} k={k} "
          f"rounds={_ROUNDS.value} cpus={os.cpu_count()} "
          f"jax devices={results[0]['devices'] if results else '?'} "
          f"faiss threads={results[0]['faiss_threads'] if results else '?'} "
          f"total {time.perf_counter() - t0:.0f}s; medians over runs; R@k and ids=ref against "
          f"the first {_reference_variant()} run")
    if peer_skipped() is not None:
        print(f"faiss Flat peer skipped: {peer_skipped()}")
    print(_table(rows, k))
    for failure in failures:
        print(f"FAILED: {failure}")
    print()
    print(_projection(dims))
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump({"runs": results, "medians": rows, "failures": failures}, f, indent=2)


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
