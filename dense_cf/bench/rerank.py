"""Re-ranking index benchmark: compressed IVF-PQ alone vs IVF-PQ + exact re-ranking from the
memory-mapped float16 export shards (docs/scale.md "Index: 21M × 768 in 8 GB").

    python -m dense_cf.bench.rerank --embed_wiki=runs/wiki_minilm     # once: real-model vectors
    python -m dense_cf.bench.rerank --data=synthetic --n=1000000
    python -m dense_cf.bench.rerank --data=wiki --wiki=runs/wiki_minilm --n=1000000

``--embed_wiki DIR`` writes the real-length Wikipedia corpus (``wiki_offline``; its first
``--wiki_passages`` passages, 0 = all 12,324), exports it with MiniLM
(``model.name_or_path="minilm"``, 384-d, the evaluation's ``export_passages``) into
``DIR/export`` and encodes the titles of ``--queries`` random articles of it as questions
(``DIR/queries.npy``): real text queries whose relevant passages are in the corpus.

Data (``--data``): ``synthetic`` = the clustered mixture of ``bench.index``; ``wiki`` = the
MiniLM vectors lifted to ``--dim`` by a fixed random matrix with orthonormal columns (inner
products preserved) and replicated with noise to ``--n`` rows: row r is passage r mod P plus
isotropic gaussian noise of norm ``--wiki_noise`` × the passage's norm (queries get no noise).
Both are written in the exporter's layout as float16 shards with ids, and ground truth is the
exact top-k over exactly those stored values.

One child process (``bench.index``'s method: its peak RSS is its own) builds the compressed
index once from the shard directory (build time, peak RSS increase and its anonymous part,
size of the saved faiss files), then searches k=100 at every ``--nprobes`` × ``--depths``
(depth 0 = the compressed index alone, the peer of each re-ranked row): QPS = queries / wall
time, CPU ms per query (process CPU time, all faiss threads), recall@10/@100 against exact
search, the anonymous RSS increase while searching, and the shard bytes the re-ranker reads.
Those memory-mapped pages are page cache, not the process's memory (the kernel may drop
them), so RSS is reported as its anonymous part. Each re-ranked row is compared with the
compressed index at the same nprobe by a paired bootstrap over queries of R@100
(``eval.stats``). Last, the RAM arithmetic for ``--project_n`` rows (``projected_bytes``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

import numpy as np
from absl import flags, logging

from dense_cf import app as _app
from dense_cf import files
from dense_cf.bench.index import (
    BLOCK,
    _fmt_bytes,
    clustered_block,
    clustered_queries,
    make_centers,
    recall_per_query,
    write_shards_and_truth,
)
from dense_cf.bench.rss import PeakRSS, rss_anon
from dense_cf.configs.base import base_config
from dense_cf.datasets import wiki_offline
from dense_cf.eval.stats import compare_outcomes
from dense_cf.files import make_dir
from dense_cf.index import IndexSpec, RerankIndex, build_index_from_dir, projected_bytes
from dense_cf.retrieval import export
from dense_cf.retrieval.corpus import load_corpus
from dense_cf.train.run import pretrained_run

FLAGS = flags.FlagValues()  # its own: tests import several benchmarks in one process
_EMBED = flags.DEFINE_string("embed_wiki", "", "Write MiniLM vectors of the Wikipedia corpus "
                             "here and exit.", flag_values=FLAGS)
_WIKI_PASSAGES = flags.DEFINE_integer("wiki_passages", 0, "--embed_wiki: the corpus's first N "
                                      "passages (0: all 12,324).", flag_values=FLAGS)
_DATA = flags.DEFINE_enum("data", "synthetic", ["synthetic", "wiki"], "Vectors.", flag_values=FLAGS)
_WIKI = flags.DEFINE_string("wiki", "", "Directory written by --embed_wiki.", flag_values=FLAGS)
_WIKI_NOISE = flags.DEFINE_float("wiki_noise", 0.5, "Replica noise norm / passage norm.",
                                 flag_values=FLAGS)
_N = flags.DEFINE_integer("n", 1_000_000, "Corpus vectors.", flag_values=FLAGS)
_DIM = flags.DEFINE_integer("dim", 768, "Vector dimension.", flag_values=FLAGS)
_QUERIES = flags.DEFINE_integer("queries", 1000, "Number of queries.", flag_values=FLAGS)
_K = flags.DEFINE_integer("k", 100, "Search depth (recall@10 and @100 come from it).",
                          flag_values=FLAGS)
_SEED = flags.DEFINE_integer("seed", 0, "Data seed.", flag_values=FLAGS)
_CLUSTERS = flags.DEFINE_integer("clusters", 0, "Synthetic clusters (0: max(16, n // 1000)).",
                                 flag_values=FLAGS)
_NOISE = flags.DEFINE_float("noise", 1.0, "Synthetic within-cluster noise.", flag_values=FLAGS)
_NPROBES = flags.DEFINE_string("nprobes", "16,64", "IVF lists probed (comma-separated; "
                               "search-time, one build).", flag_values=FLAGS)
_DEPTHS = flags.DEFINE_string("depths", "0,1000", "Re-ranking depths (0 = IVF-PQ alone).",
                              flag_values=FLAGS)
_KIND = flags.DEFINE_enum("kind", "ivfpq", ["ivfpq", "ivfsq"], "Compressed index kind.",
                          flag_values=FLAGS)
_NLIST = flags.DEFINE_integer("nlist", 0, "IVF lists (0: auto_nlist).", flag_values=FLAGS)
_PQ_M = flags.DEFINE_integer("pq_m", 0, "PQ bytes per vector (0: default_pq_m).",
                             flag_values=FLAGS)
_PROJECT_NLIST = flags.DEFINE_integer("project_nlist", 16_384, "nlist of the RAM projection.",
                                     flag_values=FLAGS)
_TRAIN = flags.DEFINE_integer("train_size", 131_072, "Max training vectors.", flag_values=FLAGS)
_OMP = flags.DEFINE_integer("omp_threads", 2, "faiss threads.", flag_values=FLAGS)
_PROJECT = flags.DEFINE_integer("project_n", 21_015_324, "Rows of the RAM projection.",
                                flag_values=FLAGS)
_WORKDIR = flags.DEFINE_string("workdir", "", "Data / index directory (default: a temp dir).",
                               flag_values=FLAGS)
_KEEP = flags.DEFINE_bool("keep", False, "Keep the workdir afterwards.", flag_values=FLAGS)
_SINGLE = flags.DEFINE_bool("single", False, "Internal: build and search in this process.",
                            flag_values=FLAGS)
_JSON = flags.DEFINE_string("json_out", "", "Also write the results to this JSON file.",
                            flag_values=FLAGS)


# ------------------------------------------------------------------------------------------
# Real-model vectors: MiniLM over the real-length Wikipedia corpus
# ------------------------------------------------------------------------------------------

def embed_wiki(out_dir: str, num_queries: int, passages: int = 0, seed: int = 0
               ) -> dict[str, Any]:
    """MiniLM vectors of the Wikipedia corpus (its first ``passages``; 0 = all) as an export
    directory, and the titles of ``num_queries`` of its articles encoded as questions."""
    os.makedirs(out_dir, exist_ok=True)
    tsv = os.path.join(out_dir, "psgs.tsv.gz")
    if not os.path.exists(tsv):
        wiki_offline.write_corpus(tsv, max_passages=passages or None)
    corpus = load_corpus(tsv)
    cfg = base_config()
    cfg.model.name_or_path = "minilm"
    cfg.model.pooling = "auto"      # the checkpoint's own pooling (mean) and normalisation
    cfg.data.max_p_len = 160        # 100 words of Wikipedia ~ 130-150 word pieces
    cfg.data.max_q_len = 32         # titles are short
    run = pretrained_run(cfg)
    encoder = export.Encoder(run, 64)
    manifest = export.export_passages(run, corpus.rows(), os.path.join(out_dir, "export"),
                                      shard_size=4096, dtype="float32", encoder=encoder,
                                      source=tsv, num_rows=len(corpus))
    rng = np.random.default_rng([seed, 3])
    titles = sorted(set(corpus.titles))
    picked = [titles[i] for i in rng.choice(len(titles), min(num_queries, len(titles)),
                                           replace=False)]
    q = export.encode_questions(run, picked, encoder=encoder)
    files.atomic_save_npy(os.path.join(out_dir, "queries.npy"), np.asarray(q, np.float32))
    files.write_json(os.path.join(out_dir, "queries.json"), picked)
    return {"passages": manifest["count"], "dim": manifest["dim"], "queries": len(picked)}


def lift(x: np.ndarray, dim: int, seed: int) -> np.ndarray:
    """x [n, d0] -> [n, dim] through a fixed random matrix with orthonormal columns (inner
    products, hence exact rankings, are preserved)."""
    d0 = x.shape[1]
    if dim < d0:
        raise ValueError(f"--dim={dim} is below the model's dimension {d0}")
    basis, _ = np.linalg.qr(np.random.default_rng([seed, 5]).standard_normal((dim, d0)))
    return (np.asarray(x, np.float32) @ basis.T.astype(np.float32)).astype(np.float32)


def wiki_block(base: np.ndarray, start: int, rows: int, noise: float, key: list[int]
               ) -> np.ndarray:
    """Rows start..start+rows of the replicated corpus: passage r mod P plus gaussian noise of
    norm ~``noise`` x that passage's norm."""
    idx = np.arange(start, start + rows) % len(base)
    x = base[idx]
    g = np.random.default_rng(key).standard_normal(x.shape, dtype=np.float32)
    g *= (noise * np.linalg.norm(x, axis=1, keepdims=True) / np.sqrt(x.shape[1])).astype(np.float32)
    return x + g


# ------------------------------------------------------------------------------------------
# Parent: data, ground truth, the child run, the report
# ------------------------------------------------------------------------------------------

def _prepare(workdir: str) -> dict[str, Any]:
    n, dim, seed = _N.value, _DIM.value, _SEED.value
    k = min(_K.value, n)
    t0 = time.perf_counter()
    if _DATA.value == "synthetic":
        clusters = _CLUSTERS.value or max(16, n // 1000)
        centers = make_centers(dim, clusters, seed)
        queries = clustered_queries(_QUERIES.value, dim, clusters=clusters, seed=seed,
                                    noise=_NOISE.value)
        blocks = (clustered_block(centers, min(BLOCK, n - s), [seed, 1, b], _NOISE.value)
                  for b, s in enumerate(range(0, n, BLOCK)))
        about = {"clusters": clusters, "noise": _NOISE.value}
    else:
        if not _WIKI.value:
            raise ValueError("--data=wiki needs --wiki=DIR written by --embed_wiki=DIR")
        base = lift(export.load_embeddings(os.path.join(_WIKI.value, "export")), dim, seed)
        queries = lift(np.load(os.path.join(_WIKI.value, "queries.npy")), dim, seed)
        queries = queries[:_QUERIES.value]
        blocks = (wiki_block(base, s, min(BLOCK, n - s), _WIKI_NOISE.value, [seed, 6, b])
                  for b, s in enumerate(range(0, n, BLOCK)))
        about = {"passages": len(base), "replicas": n / len(base), "noise": _WIKI_NOISE.value}
    np.save(os.path.join(workdir, "queries.npy"), queries)
    gt = write_shards_and_truth(os.path.join(workdir, "emb"), blocks, queries, k, "float16")
    np.save(os.path.join(workdir, "gt_ids.npy"), gt)
    logging.info("bench: wrote %d x %d float16 vectors (%s) + exact top-%d in %.1fs", n, dim,
                 _DATA.value, k, time.perf_counter() - t0)
    return about


def _int_list(s: str) -> list[int]:
    return [int(v) for v in s.split(",") if v.strip()]


def _child_args(workdir: str) -> list[str]:
    passed = {"n": _N.value, "dim": _DIM.value, "k": _K.value, "seed": _SEED.value,
              "omp_threads": _OMP.value, "train_size": _TRAIN.value, "kind": _KIND.value,
              "nlist": _NLIST.value, "pq_m": _PQ_M.value, "nprobes": _NPROBES.value,
              "depths": _DEPTHS.value}
    return ([sys.executable, "-m", "dense_cf.bench.rerank", "--single", f"--workdir={workdir}"]
            + [f"--{k}={v}" for k, v in passed.items()])


def _table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'index':<16} {'nprobe':>6} {'depth':>6} {'QPS':>7} {'R@10':>6} {'R@100':>6} "
            f"{'CPU ms/q':>8} {'anon RSS +':>11} {'mmap read':>10}")
    out = [head, "-" * len(head)]
    for r in rows:
        name = r["kind"] if r["depth"] == 0 else f"{r['kind']}+rerank"
        out.append(f"{name:<16} {r['nprobe']:6d} {r['depth']:6d} {r['qps']:7.0f} "
                   f"{r['recall@10']:6.3f} {r['recall@100']:6.3f} "
                   f"{1000 * r['cpu_s'] / r['queries']:8.2f} {_fmt_bytes(r['anon_increase']):>11} "
                   f"{_fmt_bytes(r['mmap_bytes']):>10}")
    return "\n".join(out)


def _significance(rows: list[dict[str, Any]]) -> list[str]:
    """Paired bootstrap over queries of R@100: each re-ranked row against the compressed index
    alone at the same nprobe."""
    out = []
    plain = {r["nprobe"]: r for r in rows if r["depth"] == 0}
    for r in rows:
        p = plain.get(r["nprobe"])
        if r["depth"] == 0 or p is None:
            continue
        row = compare_outcomes("R@100", p["per_query@100"], r["per_query@100"], kind="mean",
                               names=(f"{p['kind']} nprobe={p['nprobe']}",
                                      f"+rerank depth={r['depth']}"), digits=4)
        out.append(row["sentence"])
    return out


def _projection(result: dict[str, Any]) -> str:
    n, dim = _PROJECT.value, result["dim"]
    spec = IndexSpec(kind=result["kind"], nlist=_PROJECT_NLIST.value, pq_m=result["pq_m"])
    p = projected_bytes(spec, n, dim)
    measured = result["size_bytes"] - result["nlist"] * dim * 4  # minus coarse centroids
    per_vec = measured / result["ntotal"]
    return (f"projection to {n:,} x {dim} ({spec.kind}, pq_m={spec.pq_m}, nlist={spec.nlist}):\n"
            f"  RAM: lists {_fmt_bytes(p['lists'])} (codes + int64 ids, "
            f"{p['lists'] / n:.0f} B/vector; measured here {per_vec:.1f} B/vector saved) + "
            f"coarse centroids {_fmt_bytes(p['centroids'])} + codebooks "
            f"{_fmt_bytes(p['codebooks'])} = {_fmt_bytes(p['ram'])}\n"
            f"  disk, memory-mapped (page cache, not RSS): float16 shards "
            f"{n:,} x {dim} x 2 B = {_fmt_bytes(p['mmap_disk'])}")


def _run_all() -> dict[str, Any]:
    workdir = _WORKDIR.value or make_dir("dense_cf_rerank_bench_")
    try:
        about = _prepare(workdir)
        proc = subprocess.run(_child_args(workdir), stdout=subprocess.PIPE, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"benchmark child failed (exit {proc.returncode})")
        result = json.loads(lines[-1][len("RESULT "):])
    finally:
        if not _KEEP.value:
            shutil.rmtree(workdir, ignore_errors=True)
    result["data_about"] = about
    return result


# ------------------------------------------------------------------------------------------
# Child: one build, every (nprobe, depth)
# ------------------------------------------------------------------------------------------

def _run_single() -> dict[str, Any]:
    import faiss

    workdir = _WORKDIR.value
    emb_dir = os.path.join(workdir, "emb")
    queries = np.load(os.path.join(workdir, "queries.npy"))
    gt = np.load(os.path.join(workdir, "gt_ids.npy"))
    k = min(_K.value, _N.value)
    spec = IndexSpec(kind=_KIND.value, omp_threads=_OMP.value or None, train_size=_TRAIN.value,
                     nlist=_NLIST.value or None, pq_m=_PQ_M.value or None, use_gpu=False)
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        base = build_index_from_dir(emb_dir, spec, progress=True)
        build_s = time.perf_counter() - t0
    out_dir = os.path.join(workdir, "index")
    base.save(out_dir)
    size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir)
               if f.endswith(".faiss"))
    shutil.rmtree(out_dir, ignore_errors=True)
    rows = []
    for nprobe in _int_list(_NPROBES.value):
        base.set_search_params(nprobe=nprobe)
        for depth in _int_list(_DEPTHS.value):
            index = base if depth == 0 else RerankIndex(base, emb_dir, depth)
            anon0 = rss_anon()
            with PeakRSS() as smem:
                t0, c0 = time.perf_counter(), time.process_time()
                _, found = index.search(queries, k)
                search_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
            pq10 = recall_per_query(found, gt, min(10, k))
            pq100 = recall_per_query(found, gt, k)
            rows.append({"kind": spec.kind, "nprobe": nprobe, "depth": depth,
                         "qps": len(queries) / search_s, "search_s": search_s, "cpu_s": cpu_s,
                         "recall@10": float(np.mean(pq10)), "recall@100": float(np.mean(pq100)),
                         "queries": len(queries), "per_query@100": pq100.tolist(),
                         "anon_increase": smem.peak_anon - anon0,
                         "mmap_bytes": len(queries) * max(depth, k) * base.dim * 2
                         if depth else 0})
            logging.info("bench: nprobe=%d depth=%d R@100=%.4f QPS=%.0f", nprobe, depth,
                         rows[-1]["recall@100"], rows[-1]["qps"])
    return {"kind": spec.kind, "n": _N.value, "dim": base.dim, "ntotal": base.ntotal,
            "nlist": base.spec.nlist, "pq_m": base.spec.pq_m, "build_s": build_s,
            "train_s": base.build_info["train_s"], "add_s": base.build_info["add_s"],
            "n_train": base.build_info["n_train"],
            "build_rss_increase": mem.peak - mem.base,
            "build_anon_increase": mem.peak_anon - mem.base_anon, "size_bytes": size,
            "k": k, "queries": len(queries), "rows": rows,
            "omp_threads": faiss.omp_get_max_threads(), "faiss": faiss.__version__}


def main(argv: list[str]) -> None:
    del argv
    if _EMBED.value:
        print(json.dumps(embed_wiki(_EMBED.value, _QUERIES.value, _WIKI_PASSAGES.value,
                                    _SEED.value)))
        return
    if _SINGLE.value:
        print("RESULT " + json.dumps(_run_single()), flush=True)
        return
    t0 = time.perf_counter()
    r = _run_all()
    print("\n" + " ".join(["python -m dense_cf.bench.rerank"] + sys.argv[1:]))
    print(f"data={_DATA.value} {r['data_about']} n={r['n']:,} dim={r['dim']} float16 shards, "
          f"queries={r['queries']} k={r['k']} cpus={os.cpu_count()} faiss threads="
          f"{r['omp_threads']} faiss {r['faiss']} total {time.perf_counter() - t0:.0f}s")
    print(f"build {r['kind']} nlist={r['nlist']} pq_m={r['pq_m']} on {r['n_train']:,} training "
          f"vectors: {r['build_s']:.1f}s (train {r['train_s']:.1f}s + add {r['add_s']:.1f}s), "
          f"peak RSS +{_fmt_bytes(r['build_rss_increase'])} (anon "
          f"+{_fmt_bytes(r['build_anon_increase'])}), size {_fmt_bytes(r['size_bytes'])} "
          f"({r['size_bytes'] / r['ntotal']:.1f} B/vector)")
    print(_table(r["rows"]))
    for line in _significance(r["rows"]):
        print(line)
    print(_projection(r))
    if _JSON.value:
        files.write_json(_JSON.value, r)


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
