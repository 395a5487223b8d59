"""Re-ranking index (dense_cf.index.rerank): exact scores on the candidates, recall over plain
IVF-PQ, save/load, stale exports refused, memory-mapped reads, the GPU path, the retriever's
config wiring (docs/scale.md "Index: 21M × 768 in 8 GB")."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from test_index import _one_faiss_thread, fake_gpu  # noqa: F401  (fixtures; the first autouse)

import dense_cf.index.rerank as rerank_mod
from dense_cf.bench.index import clustered_queries, clustered_vectors, recall_at
from dense_cf.bench.rerank import lift, wiki_block
from dense_cf.configs.base import base_config
from dense_cf.index import (
    RERANK_NAME,
    DenseIndex,
    ExportShards,
    IndexSpec,
    RerankIndex,
    build_index,
    build_rerank_index,
    kinds,
    projected_bytes,
)
from dense_cf.index.base import Index
from dense_cf.index.jax_search import JaxSearchSpec
from dense_cf.index.kinds import load as load_index
from dense_cf.retrieval.retriever import (
    INDEX_SOURCE,
    index_spec,
    load_or_build_index,
    open_saved_index,
)
from dense_cf.train.validate import problems

N, D, NQ, K = 20_000, 64, 100, 100
SIZES = [6000, 6000, 6000, 2000]
# 6-bit codes train 4x faster than 8-bit ones and are coarse enough to need re-ranking.
SPEC = IndexSpec("ivfpq", nlist=64, pq_m=8, pq_nbits=6, nprobe=16, train_size=4096)


@pytest.fixture(scope="module")
def data():
    x = clustered_vectors(N, D, clusters=64, seed=3)
    q = clustered_queries(NQ, D, clusters=64, seed=3)
    stored = x.astype(np.float16).astype(np.float32)  # what the float16 shards hold
    return x, q, stored


def write_export(path, x: np.ndarray, ids: np.ndarray | None = None) -> str:
    os.makedirs(path, exist_ok=True)
    ids = np.arange(len(x), dtype=np.int64) if ids is None else ids
    start = 0
    for k, n in enumerate(SIZES):
        np.save(os.path.join(path, f"embeddings-{k:05d}.npy"), x[start:start + n].astype(np.float16))
        np.save(os.path.join(path, f"ids-{k:05d}.npy"), ids[start:start + n])
        start += n
    return str(path)


@pytest.fixture(scope="module")
def built(tmp_path_factory, data):
    emb = write_export(tmp_path_factory.mktemp("export"), data[0])
    return emb, build_rerank_index(emb, SPEC, depth=400, progress=False)


def exact(stored: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    return build_index(stored, spec=IndexSpec("flat")).search(q, k)


def test_scores_are_exact_and_equal_flat_on_the_candidates(built, data):
    _, q, stored = data
    emb, index = built
    s, i = index.search(q, K)
    assert s.dtype == np.float32 and i.dtype == np.int64 and s.shape == (NQ, K)
    # Every returned score is the exact inner product with the stored (float16) row.
    want = np.einsum("qd,qkd->qk", q.astype(np.float64), stored[i].astype(np.float64))
    np.testing.assert_allclose(s, want, rtol=1e-5, atol=1e-5)
    # And the result is exactly flat search restricted to the base index's candidates.
    _, cand = index.base.search(q, index.depth)
    for row in range(NQ):
        sub = build_index(stored[cand[row]], cand[row], IndexSpec("flat"))
        _, want_i = sub.search(q[row:row + 1], K)
        np.testing.assert_array_equal(i[row], want_i[0])


def test_recall_improves_over_plain_ivfpq(built, data):
    _, q, stored = data
    _, index = built
    _, gt = exact(stored, q, K)
    _, plain = index.base.search(q, K)
    _, rr = index.search(q, K)
    r_plain, r_rerank = recall_at(plain, gt, K), recall_at(rr, gt, K)
    # Measured: plain 0.658, re-ranked from the top 400 0.995 (R@10 1.0).
    assert r_rerank > r_plain + 0.15, (r_plain, r_rerank)
    assert r_rerank >= 0.97
    assert recall_at(rr, gt, 10) >= 0.99


def test_depth_below_k_searches_k_candidates(built, data):
    _, q, _ = data
    _, index = built
    index.set_search_params(depth=10)
    try:
        s, i = index.search(q[:5], 50)
    finally:
        index.set_search_params(depth=400)
    assert (i >= 0).all() and (np.diff(s, axis=1) <= 0).all()


def test_save_load_round_trip(built, data, tmp_path):
    _, q, _ = data
    emb, index = built
    s0, i0 = index.search(q, K)
    index.save(str(tmp_path / "ix"))
    assert os.path.exists(tmp_path / "ix" / RERANK_NAME)
    loaded = load_index(str(tmp_path / "ix"))
    assert isinstance(loaded, RerankIndex)
    assert (loaded.depth, loaded.source_dir, loaded.ntotal) == (400, os.path.abspath(emb), N)
    s1, i1 = loaded.search(q, K)
    np.testing.assert_array_equal(i0, i1)
    np.testing.assert_array_equal(s0, s1)
    # Without rerank.json the directory is a plain DenseIndex.
    os.remove(tmp_path / "ix" / RERANK_NAME)
    assert type(load_index(str(tmp_path / "ix"))) is DenseIndex


def test_stale_export_is_refused_naming_the_file(tmp_path, data):
    x = data[0][:N]
    emb = write_export(tmp_path / "export", x)
    index = build_rerank_index(emb, IndexSpec("flat"), depth=100, progress=False)
    index.save(str(tmp_path / "ix"))
    # Re-export shard 2 with other vectors (a new run, another step): new file, new mtime.
    path = os.path.join(emb, "embeddings-00002.npy")
    st = os.stat(path)
    np.save(path, (x[12000:18000] * 2).astype(np.float16))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(ValueError, match=r"rerank\.json.*not the one this index was built from "
                                         r"\(embeddings-00002\.npy changed"):
        load_index(str(tmp_path / "ix"))
    os.remove(path)
    with pytest.raises(ValueError, match=r"embeddings-00002\.npy is gone"):
        load_index(str(tmp_path / "ix"))
    # A moved export is found through source_dir, and still checked.
    with pytest.raises(ValueError, match="not the one"):
        load_index(str(tmp_path / "ix"), source_dir=emb)


def test_export_of_another_size_is_refused(tmp_path, data):
    emb = write_export(tmp_path / "export", data[0])
    base = build_index(data[0][:1000], spec=IndexSpec("flat"))
    with pytest.raises(ValueError, match="holds 20000 x 64, the index 1000 x 64"):
        RerankIndex(base, emb, 100)


def test_shards_are_memory_mapped_not_loaded(built, data, monkeypatch):
    _, q, _ = data
    emb, index = built
    assert index.rows.lookup_bytes == 0  # contiguous export ids: no id table in RAM
    real_load = np.load

    def mmap_only(*args, **kwargs):
        if kwargs.get("mmap_mode") != "r":
            raise AssertionError("search must not np.load a shard whole")
        return real_load(*args, **kwargs)

    monkeypatch.setattr(rerank_mod.np, "load", mmap_only)
    _, i = index.search(q[:10], K)
    assert (i >= 0).all()
    assert index.rows._maps and all(isinstance(a, np.memmap) for a in index.rows._maps.values())


def test_shuffled_ids_use_a_lookup_table(tmp_path, data):
    x, q, stored = data
    ids = np.random.default_rng(0).permutation(N).astype(np.int64) * 3 + 7
    emb = write_export(tmp_path / "export", x, ids)
    rows = ExportShards(emb)
    assert rows.lookup_bytes == 3 * 8 * N
    np.testing.assert_array_equal(rows.gather(ids[[5, 19_999, 6000]]), stored[[5, 19_999, 6000]])
    with pytest.raises(ValueError, match=r"ids \[8\] returned by the index are not in the export"):
        rows.locate(np.array([8]))
    index = build_rerank_index(emb, IndexSpec("ivfsq", nlist=16), depth=100, progress=False)
    s, i = index.search(q, 10)
    np.testing.assert_allclose(s, np.einsum("qd,qkd->qk", q, stored[_rows_of(ids, i)]),
                               rtol=1e-5, atol=1e-5)


def _rows_of(ids: np.ndarray, found: np.ndarray) -> np.ndarray:
    order = np.argsort(ids)
    return order[np.searchsorted(ids[order], found)]


def test_gpu_path_moves_the_compressed_index_and_caps_the_depth(fake_gpu, built, data):  # noqa: F811
    set_gpus, calls = fake_gpu
    set_gpus(1)
    emb, _ = built
    spec = dataclasses.replace(SPEC, use_gpu=True)
    index = build_rerank_index(emb, spec, depth=200, progress=False)
    assert index.on_gpu and ("to_gpu", "IndexIVFPQ") in [(c[0], c[1]) for c in calls]
    _, i = index.search(data[1][:5], 20)
    assert (i >= 0).all()
    with pytest.raises(ValueError, match="depth 4096 exceeds the faiss GPU limit 2048"):
        RerankIndex(index.base, emb, 4096)


def test_projection_arithmetic():
    spec = IndexSpec("ivfpq", nlist=65_536, pq_m=96)
    p = projected_bytes(spec, 21_015_324, 768)
    assert p["lists"] == 21_015_324 * (96 + 8)
    assert p["centroids"] == 65_536 * 768 * 4
    assert p["mmap_disk"] == 21_015_324 * 768 * 2
    assert p["ram"] == p["lists"] + p["centroids"] + p["codebooks"] < 8e9


def one_shard_export(emb: str, x: np.ndarray) -> tuple[str, dict]:
    """An export directory of one shard and the parts of its manifest the retriever reads."""
    os.makedirs(emb)
    np.save(os.path.join(emb, "embeddings-00000.npy"), x.astype(np.float16))
    np.save(os.path.join(emb, "ids-00000.npy"), np.arange(len(x)))
    return emb, {"corpus": {"sha256": "abc", "passages": len(x)}, "count": len(x), "settings": {}}


def test_retriever_wiring_reuses_and_reranks(tmp_path, data):
    emb, manifest = one_shard_export(str(tmp_path / "export"), data[0][:3000])
    cfg = base_config().eval
    cfg.index_nlist, cfg.index_pq_m, cfg.index_nprobe, cfg.rerank = 16, 4, 8, 300
    spec = index_spec(cfg, "ivfpq")
    assert (spec.nlist, spec.pq_m, spec.nprobe) == (16, 4, 8)
    ix_dir = str(tmp_path / "ix")
    index, reused = load_or_build_index(emb, ix_dir, "ivfpq", manifest, spec=spec,
                                        rerank=cfg.rerank)
    assert isinstance(index, RerankIndex) and not reused and index.depth == 300
    with open(os.path.join(ix_dir, INDEX_SOURCE)) as f:
        assert json.load(f)["index"]["pq_m"] == 4
    # nprobe and the depth are search-time settings: the saved index is reused.
    spec2 = dataclasses.replace(spec, nprobe=2)
    index2, reused = load_or_build_index(emb, ix_dir, "ivfpq", manifest, spec=spec2)
    assert reused and type(index2) is DenseIndex and index2.spec.nprobe == 2
    # A caller that drops the index reopens it with the same search-time settings.
    reopened = open_saved_index(ix_dir, emb, spec, cfg.rerank)
    assert isinstance(reopened, RerankIndex) and reopened.spec.nprobe == 8
    np.testing.assert_array_equal(reopened.search(data[1], 10)[1], index.search(data[1], 10)[1])
    # Another nlist is another build.
    spec3 = dataclasses.replace(spec, nlist=8)
    index3, reused = load_or_build_index(emb, ix_dir, "ivfpq", manifest, spec=spec3)
    assert not reused and index3.spec.nlist == 8


def test_record_without_build_settings_counts_as_default_build(tmp_path, data):
    emb, manifest = one_shard_export(str(tmp_path / "export"), data[0][:2000])
    ix_dir = str(tmp_path / "ix")
    load_or_build_index(emb, ix_dir, "flat", manifest)
    path = os.path.join(ix_dir, INDEX_SOURCE)
    with open(path) as f:
        record = json.load(f)
    record.pop("index")  # as written before build settings were recorded
    with open(path, "w") as f:
        json.dump(record, f)
    _, reused = load_or_build_index(emb, ix_dir, "flat", manifest)
    assert reused


def test_config_options_are_validated():
    c = base_config()
    c.eval.rerank, c.eval.index_nprobe, c.eval.index_train_size = -1, 0, 0
    found = [p for p in problems(c, check_files=False) if "config.eval." in p]
    assert found == ["config.eval.index_train_size=0 must be a number >= 1",
                     "config.eval.index_nprobe=0 must be a number >= 1",
                     "config.eval.rerank=-1 must be a number >= 0"]


def test_lift_keeps_inner_products_and_replicas_keep_rows():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((50, 24)).astype(np.float32)
    y = lift(x, 64, seed=0)
    assert y.shape == (50, 64)
    np.testing.assert_allclose(y @ y.T, x @ x.T, rtol=1e-4, atol=1e-4)
    block = wiki_block(y, 45, 10, 0.0, [0, 1])  # no noise: rows 45..54 = passages 45..49, 0..4
    np.testing.assert_array_equal(block, y[np.r_[45:50, 0:5]])


def test_bench_command_prints_both_rows_and_the_projection(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "dense_cf.bench.rerank", "--data=synthetic", "--n=3000", "--dim=32",
         "--queries=30", "--k=20", "--nlist=16", "--pq_m=4", "--train_size=3000",
         "--nprobes=4", "--depths=0,200", "--omp_threads=1", "--project_n=1000000"],
        capture_output=True, text=True, timeout=600, cwd=os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    rows = [ln.split() for ln in lines if ln.startswith("ivfpq")]
    assert [r[:3] for r in rows] == [["ivfpq", "4", "0"], ["ivfpq+rerank", "4", "200"]]
    assert float(rows[1][5]) >= float(rows[0][5])  # R@100 column (here R@20)
    assert any("paired bootstrap" in ln for ln in lines)
    assert any(ln.startswith("projection to 1,000,000 x 32") for ln in lines)


def test_jax_kind_shares_the_wiring_and_reranks(tmp_path, data):
    # eval.index=jax goes through the same load-or-build path: built once, then reused; and
    # re-ranking wraps it as it wraps a faiss index (a 16-bit corpus re-scored exactly).
    emb, manifest = one_shard_export(str(tmp_path / "export"), data[0][:1000])
    cfg = base_config().eval
    assert index_spec(cfg, "jax") == JaxSearchSpec()  # eval.jax: no `None means jax`
    ix_dir = str(tmp_path / "ixj")
    index, reused = load_or_build_index(emb, ix_dir, "jax", manifest, spec=index_spec(cfg, "jax"))
    assert not reused and index.ntotal == 1000
    again, reused = load_or_build_index(emb, ix_dir, "jax", manifest)
    assert reused and type(again) is type(index)
    flat, _ = load_or_build_index(emb, str(tmp_path / "ixf"), "flat", manifest)
    np.testing.assert_allclose(again.search(data[1], 10)[0], flat.search(data[1], 10)[0],
                               rtol=1e-5, atol=1e-5)
    assert type(open_saved_index(ix_dir, emb, index_spec(cfg, "jax"))) is type(index)
    assert type(load_index(ix_dir)) is type(index)  # the package's one loader opens jax too
    # Every kind is an index.base.Index: search(queries, k) -> (scores, ids), save(directory).
    rerank, _ = load_or_build_index(emb, str(tmp_path / "ixr"), "flat", manifest, rerank=20)
    jax_rerank, _ = load_or_build_index(emb, ix_dir, "jax", manifest, rerank=30)
    assert isinstance(jax_rerank, RerankIndex) and jax_rerank.base.kind == "jax"
    for ix in (index, flat, rerank, jax_rerank):
        assert isinstance(ix, Index), type(ix)
    np.testing.assert_array_equal(jax_rerank.search(data[1], 10)[1], flat.search(data[1], 10)[1])
    # A saved re-ranking index over a jax base reopens through the one dispatcher.
    jax_rerank.save(str(tmp_path / "jr"))
    reopened = load_index(str(tmp_path / "jr"))
    assert isinstance(reopened, RerankIndex) and type(reopened.base) is type(index)
    assert reopened.depth == 30
    np.testing.assert_array_equal(reopened.search(data[1], 10)[1], flat.search(data[1], 10)[1])


def test_unknown_kind_lists_the_known_ones(tmp_path):
    msg = r"unknown index kind 'annoy'; known kinds: flat, hnsw, ivfpq, sq8, ivfsq, jax"
    with pytest.raises(ValueError, match=msg):
        kinds.get("annoy")
    with pytest.raises(ValueError, match=msg):
        index_spec(base_config().eval, "annoy")
    with pytest.raises(ValueError, match=msg):
        load_or_build_index(str(tmp_path), str(tmp_path / "ix"), "annoy", {})
    os.makedirs(tmp_path / "odd")
    with open(tmp_path / "odd" / "index.json", "w") as f:
        json.dump({"format": "someone.else", "version": 1}, f)
    with pytest.raises(ValueError, match=r"unknown index format 'someone.else'; known formats: "
                                         r"dense_cf.index, dense_cf.jax_index"):
        load_index(str(tmp_path / "odd"))
    c = base_config()
    c.eval.index = "annoy"
    assert any("config.eval.index" in p and "jax" in p for p in problems(c, check_files=False))


# The on-disk records as the code before the kind registry (issue 48 item 6) wrote them, spelled
# out literally: a renamed field or format string here would orphan every saved index.
_FAISS_SPEC_V1 = {"kind": "flat", "metric": "ip", "hnsw_m": 32, "ef_construction": 200,
                  "ef_search": 128, "nlist": None, "nprobe": 32, "pq_m": None, "pq_nbits": 8,
                  "train_size": 262144, "seed": 0, "use_gpu": "auto", "shards": 1,
                  "omp_threads": None, "query_batch_size": 4096, "add_batch_size": 32768}
_JAX_SPEC_V1 = {"dtype": "float32", "approx": False, "recall_target": 0.95,
                "query_batch_size": 256, "block_rows": 65536, "select": "auto", "chunk_rows": 1024,
                "chunk_k": 16, "rescan_chunks": 4, "bin_rows": 0, "prune_bins": 0}
_FAISS_BUILD_V1 = {"kind": "flat", "nlist": None, "pq_m": None, "pq_nbits": 8, "hnsw_m": 32,
                   "ef_construction": 200, "train_size": 262144, "seed": 0}


def test_indexes_saved_before_the_kind_registry_still_load_and_are_reused(tmp_path, data):
    import faiss

    x, q, stored = data
    n = 1500
    emb, manifest = one_shard_export(str(tmp_path / "export"), x[:n])
    source = {"corpus_sha256": "abc", "passages": n, "rows": n, "settings": {}}
    # faiss Flat, as DenseIndex.save wrote it (no checksum file: read unverified).
    fdir = tmp_path / "step_0_flat"
    os.makedirs(fdir)
    flat = faiss.IndexIDMap(faiss.IndexFlatIP(D))
    flat.add_with_ids(stored[:n], np.arange(n, dtype=np.int64))
    faiss.write_index(flat, str(fdir / "shard-00000.faiss"))
    with open(fdir / "index.json", "w") as f:
        json.dump({"format": "dense_cf.index", "version": 1, "kind": "flat", "dim": D,
                   "ntotal": n, "spec": _FAISS_SPEC_V1,
                   "shards": [{"file": "shard-00000.faiss", "ntotal": n}],
                   "faiss_version": faiss.__version__}, f)
    with open(fdir / INDEX_SOURCE, "w") as f:
        json.dump(dict(source, index=_FAISS_BUILD_V1), f)
    # jax, as JaxIndex.save wrote it: the spec and the export shards' file keys.
    jdir = tmp_path / "step_0_jax"
    os.makedirs(jdir)
    shard = os.path.join(emb, "embeddings-00000.npy")
    st = os.stat(shard)
    with open(jdir / "index.json", "w") as f:
        json.dump({"format": "dense_cf.jax_index", "version": 1, "kind": "jax", "dim": D,
                   "ntotal": n, "spec": _JAX_SPEC_V1, "source": os.path.abspath(emb),
                   "shards": [{"file": os.path.abspath(shard), "rows": n,
                               "key": [os.path.abspath(shard), st.st_size, st.st_mtime_ns]}]}, f)
    with open(jdir / INDEX_SOURCE, "w") as f:
        json.dump(dict(source, jax=_JAX_SPEC_V1, index={"kind": "jax"}), f)
    # A re-ranking index: the faiss files plus rerank.json.
    rdir = tmp_path / "rerank"
    shutil.copytree(fdir, rdir)
    ids_path = os.path.join(emb, "ids-00000.npy")
    fingerprint = {"shards": [[os.path.basename(p), os.stat(p).st_size, os.stat(p).st_mtime_ns]
                              for p in (shard, ids_path)], "manifest_sha256": None}
    with open(rdir / "rerank.json", "w") as f:
        json.dump({"format": "dense_cf.rerank", "version": 1, "depth": 50,
                   "source": os.path.abspath(emb), "fingerprint": fingerprint}, f)

    want_s, want_i = exact(stored[:n], q, 10)
    for path, cls in ((fdir, DenseIndex), (jdir, None), (rdir, RerankIndex)):
        ix = load_index(str(path))
        assert cls is None or type(ix) is cls
        s, i = ix.search(q, 10)
        np.testing.assert_array_equal(i, want_i)
        np.testing.assert_allclose(s, want_s, rtol=1e-5, atol=1e-5)
    # The retriever reuses both (the build records match), rather than rebuilding.
    for kind, path in (("flat", fdir), ("jax", jdir)):
        ix, reused = load_or_build_index(emb, str(path), kind, manifest)
        assert reused, kind
        np.testing.assert_array_equal(ix.search(q, 10)[1], want_i)
