"""Index benchmark: build time, peak RSS, size, QPS and recall of each index kind.

    python -m dense_cf.bench.index --n 1000000 --dim 768 --kinds flat,hnsw,ivfpq,sq8 --queries 1000
    python -m dense_cf.bench.index --n 100000          # quick mode (~1 minute)

Data: synthetic clustered vectors, NOT normalised (DPR scores are raw dot products):
x = s * (c + e) with c a cluster centre ~ N(0, I/D) (norm ~1), e ~ N(0, noise^2 I/D), s a
per-row norm scale exp(0.05 z). Queries come from the same mixture. Clustered data gives
realistic recall (iid gaussian has no neighbourhood structure, which makes every approximate
index look bad). Rows are generated in fixed blocks of 65536 from (seed, block), so the data
depends only on the flags, and each block is written as one shard ``embeddings-K.npy`` +
``ids-K.npy`` in the exporter's layout; the indexes are built from that directory with
``build_index_from_dir`` (the streaming path).

Ground truth: exact top-k by inner product, computed once shard by shard (IndexFlatIP per
shard, merged with ``merge_topk``). Each kind then runs in a fresh subprocess
(``--single KIND``) so that its peak RSS is its own: peak RSS increase = max RSS during build
+ search minus the RSS before the build (sampled with psutil every 20 ms and cross-checked with
ru_maxrss). QPS = queries / wall time of one ``search(queries, k)``; recall@10 and recall@100 =
mean |retrieved top-r ∩ exact top-r| / r, from that same k=100 search. Size = bytes of the
saved (serialised, CPU) index files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any, Iterable

import numpy as np
from absl import flags, logging

from dense_cf import app as _app
from dense_cf.bench.rss import PeakRSS
from dense_cf.files import make_dir
from dense_cf.index import IndexSpec, build_index_from_dir, merge_topk
from dense_cf.index.shards import shard_name

FLAGS = flags.FlagValues()  # its own: tests import several benchmarks in one process
_N = flags.DEFINE_integer("n", 1_000_000, "Corpus vectors.", flag_values=FLAGS)
_DIM = flags.DEFINE_integer("dim", 768, "Vector dimension.", flag_values=FLAGS)
_KINDS = flags.DEFINE_string("kinds", "flat,hnsw,ivfpq,sq8", "Comma-separated index kinds.", flag_values=FLAGS)
_QUERIES = flags.DEFINE_integer("queries", 1000, "Number of queries.", flag_values=FLAGS)
_K = flags.DEFINE_integer("k", 100, "Search depth (recall@10 and @100 come from it).", flag_values=FLAGS)
_SEED = flags.DEFINE_integer("seed", 0, "Data seed.", flag_values=FLAGS)
_CLUSTERS = flags.DEFINE_integer("clusters", 0, "Clusters (0: max(16, n // 1000)).", flag_values=FLAGS)
_NOISE = flags.DEFINE_float("noise", 1.0, "Within-cluster noise norm relative to centres.", flag_values=FLAGS)
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "float16"], "Dtype of the shards.", flag_values=FLAGS)
_WORKDIR = flags.DEFINE_string("workdir", "", "Data / index directory (default: a temp dir).", flag_values=FLAGS)
_KEEP = flags.DEFINE_bool("keep", False, "Keep the workdir afterwards.", flag_values=FLAGS)
_OMP = flags.DEFINE_integer("omp_threads", 0, "faiss threads (0: faiss default).", flag_values=FLAGS)
_TRAIN = flags.DEFINE_integer("train_size", 262_144, "Max training vectors.", flag_values=FLAGS)
_NPROBE = flags.DEFINE_integer("nprobe", 32, "IVF lists probed.", flag_values=FLAGS)
_EF = flags.DEFINE_integer("ef_search", 128, "HNSW efSearch.", flag_values=FLAGS)
_SINGLE = flags.DEFINE_string("single", "", "Internal: benchmark one kind in this process.", flag_values=FLAGS)
_JSON = flags.DEFINE_string("json_out", "", "Also write the results to this JSON file.", flag_values=FLAGS)

BLOCK = 65_536  # rows per generated block = rows per shard file


# ------------------------------------------------------------------------------------------
# Synthetic data
# ------------------------------------------------------------------------------------------

def make_centers(dim: int, clusters: int, seed: int) -> np.ndarray:
    """Cluster centres ~ N(0, I/dim): norm ~1."""
    rng = np.random.default_rng([seed, 0])
    return (rng.standard_normal((clusters, dim), dtype=np.float32) / np.sqrt(dim)).astype(np.float32)


def clustered_block(centers: np.ndarray, rows: int, key: list[int],
                    noise: float = 1.0) -> np.ndarray:
    """``rows`` mixture samples from the random stream ``key``, float32 [rows, dim]."""
    rng = np.random.default_rng(key)
    dim = centers.shape[1]
    assign = rng.integers(0, len(centers), rows)
    x = rng.standard_normal((rows, dim), dtype=np.float32)
    x *= np.float32(noise / np.sqrt(dim))
    x += centers[assign]
    x *= np.exp(0.05 * rng.standard_normal((rows, 1))).astype(np.float32)
    return x


def clustered_vectors(n: int, dim: int, *, clusters: int = 16, seed: int = 0,
                      noise: float = 1.0) -> np.ndarray:
    """n corpus rows (the concatenated blocks the benchmark writes to disk)."""
    centers = make_centers(dim, clusters, seed)
    return np.concatenate([clustered_block(centers, min(BLOCK, n - s), [seed, 1, s // BLOCK], noise)
                           for s in range(0, n, BLOCK)])


def clustered_queries(nq: int, dim: int, *, clusters: int = 16, seed: int = 0,
                      noise: float = 1.0) -> np.ndarray:
    """Queries from the same mixture, on a stream disjoint from the corpus blocks."""
    return clustered_block(make_centers(dim, clusters, seed), nq, [seed, 2], noise)


def recall_per_query(found: np.ndarray, exact: np.ndarray, r: int) -> np.ndarray:
    """|found[q, :r] ∩ exact[q, :r]| / r for each query q."""
    return np.array([len(np.intersect1d(f[:r], e[:r])) for f, e in zip(found, exact)]) / r


def recall_at(found: np.ndarray, exact: np.ndarray, r: int) -> float:
    """Mean over queries of |found[:, :r] ∩ exact[:, :r]| / r."""
    return float(np.mean(recall_per_query(found, exact, r)))


# ------------------------------------------------------------------------------------------
# Parent: data, ground truth, one subprocess per kind
# ------------------------------------------------------------------------------------------

def _clusters() -> int:
    return _CLUSTERS.value or max(16, _N.value // 1000)


def write_shards_and_truth(emb_dir: str, blocks: Iterable[np.ndarray], queries: np.ndarray,
                           k: int, dtype: str) -> np.ndarray:
    """Writes each block as shard ``embeddings-K.npy`` (``dtype``) + ``ids-K.npy`` (rows in
    order) and returns the exact top-k ids [Q, k] over exactly the stored values."""
    import faiss

    os.makedirs(emb_dir, exist_ok=True)
    gt_s = np.full((len(queries), k), -np.inf, np.float32)
    gt_i = np.full((len(queries), k), -1, np.int64)
    start = 0
    for b, x in enumerate(blocks):
        x = x.astype(dtype)
        ids = np.arange(start, start + len(x), dtype=np.int64)
        np.save(os.path.join(emb_dir, shard_name("ids", b)), ids)
        np.save(os.path.join(emb_dir, shard_name("embeddings", b)), x)
        # Exact ground truth on exactly the stored values (float16 shards included).
        flat = faiss.IndexFlatIP(x.shape[1])
        flat.add(np.ascontiguousarray(x, dtype=np.float32))
        s, i = flat.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, len(x)))
        gt_s, gt_i = merge_topk([gt_s, s], [gt_i, np.where(i >= 0, i + start, -1)], k)
        start += len(x)
    return gt_i


def _prepare(workdir: str) -> None:
    n, dim, seed = _N.value, _DIM.value, _SEED.value
    centers = make_centers(dim, _clusters(), seed)
    queries = clustered_queries(_QUERIES.value, dim, clusters=_clusters(), seed=seed,
                                noise=_NOISE.value)
    np.save(os.path.join(workdir, "queries.npy"), queries)
    t0 = time.perf_counter()
    k = min(_K.value, n)
    blocks = (clustered_block(centers, min(BLOCK, n - start), [seed, 1, b], _NOISE.value)
              for b, start in enumerate(range(0, n, BLOCK)))
    gt_i = write_shards_and_truth(os.path.join(workdir, "emb"), blocks, queries, k, _DTYPE.value)
    np.save(os.path.join(workdir, "gt_ids.npy"), gt_i)
    logging.info("bench: wrote %d x %d %s vectors in %d shards + exact top-%d in %.1fs", n, dim,
                 _DTYPE.value, -(-n // BLOCK), k, time.perf_counter() - t0)


def _child_args(kind: str, workdir: str) -> list[str]:
    flags_to_pass = {"n": _N.value, "dim": _DIM.value, "queries": _QUERIES.value, "k": _K.value,
                     "seed": _SEED.value, "omp_threads": _OMP.value, "train_size": _TRAIN.value,
                     "nprobe": _NPROBE.value, "ef_search": _EF.value}
    return ([sys.executable, "-m", "dense_cf.bench.index", f"--single={kind}",
             f"--workdir={workdir}"] + [f"--{k}={v}" for k, v in flags_to_pass.items()])


def _run_all() -> list[dict[str, Any]]:
    workdir = _WORKDIR.value or make_dir("dense_cf_index_bench_")
    results = []
    try:
        _prepare(workdir)
        for kind in [k.strip() for k in _KINDS.value.split(",") if k.strip()]:
            logging.info("bench: %s ...", kind)
            proc = subprocess.run(_child_args(kind, workdir), stdout=subprocess.PIPE, text=True)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                raise RuntimeError(f"benchmark of {kind} failed (exit {proc.returncode})")
            results.append(json.loads(lines[-1][len("RESULT "):]))
    finally:
        if not _KEEP.value:
            shutil.rmtree(workdir, ignore_errors=True)
    return results


def _fmt_bytes(b: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(b) < 1000 or unit == "GB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.2f} {unit}"
        b /= 1000.0
    return f"{b:.2f} GB"


def _table(results: list[dict[str, Any]]) -> str:
    head = (f"{'kind':<6} {'build s':>8} {'(train':>7} {'+ add)':>7} {'peak RSS +':>11} "
            f"{'size':>10} {'B/vec':>7} {'QPS@k':>8} {'R@10':>6} {'R@100':>6}")
    rows = [head, "-" * len(head)]
    for r in results:
        rows.append(f"{r['kind']:<6} {r['build_s']:8.1f} {r['train_s']:7.1f} {r['add_s']:7.1f} "
                    f"{_fmt_bytes(r['peak_rss_increase']):>11} {_fmt_bytes(r['size_bytes']):>10} "
                    f"{r['size_bytes'] / r['ntotal']:7.0f} {r['qps']:8.0f} "
                    f"{r['recall@10']:6.3f} {r['recall@100']:6.3f}")
    return "\n".join(rows)


# ------------------------------------------------------------------------------------------
# Child: one kind
# ------------------------------------------------------------------------------------------

def _run_single(kind: str) -> dict[str, Any]:
    import faiss


    workdir = _WORKDIR.value
    queries = np.load(os.path.join(workdir, "queries.npy"))
    gt = np.load(os.path.join(workdir, "gt_ids.npy"))
    spec = IndexSpec(kind=kind, omp_threads=_OMP.value or None, train_size=_TRAIN.value,
                     nprobe=_NPROBE.value, ef_search=_EF.value, use_gpu=False)
    k = min(_K.value, _N.value)
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        index = build_index_from_dir(os.path.join(workdir, "emb"), spec, progress=True)
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        _, found = index.search(queries, k)
        search_s = time.perf_counter() - t0
    out_dir = os.path.join(workdir, f"index-{kind}")
    index.save(out_dir)
    size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir)
               if f.endswith(".faiss"))
    shutil.rmtree(out_dir, ignore_errors=True)
    return {"kind": kind, "n": _N.value, "dim": _DIM.value, "ntotal": index.ntotal,
            "nlist": index.spec.nlist, "pq_m": index.spec.pq_m, "nprobe": index.spec.nprobe,
            "ef_search": index.spec.ef_search, "build_s": build_s,
            "train_s": index.build_info["train_s"], "add_s": index.build_info["add_s"],
            "peak_rss_increase": mem.peak - mem.base, "size_bytes": size,
            "search_s": search_s, "qps": len(queries) / search_s, "k": k,
            "recall@10": recall_at(found, gt, min(10, k)), "recall@100": recall_at(found, gt, k),
            "omp_threads": faiss.omp_get_max_threads(), "faiss": faiss.__version__}


def main(argv: list[str]) -> None:
    del argv
    if _SINGLE.value:
        print("RESULT " + json.dumps(_run_single(_SINGLE.value)), flush=True)
        return
    t0 = time.perf_counter()
    results = _run_all()
    cmd = " ".join(["python -m dense_cf.bench.index"] + sys.argv[1:])
    print(f"\n{cmd}")
    print(f"n={_N.value} dim={_DIM.value} {_DTYPE.value} clusters={_clusters()} "
          f"queries={_QUERIES.value} k={min(_K.value, _N.value)} cpus={os.cpu_count()} "
          f"faiss threads={results[0]['omp_threads'] if results else '?'} "
          f"total {time.perf_counter() - t0:.0f}s")
    print(_table(results))
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
