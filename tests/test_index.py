"""FAISS index layer: exactness, sharding, recall, save/load, streaming from disk, GPU path."""

from __future__ import annotations

import json
import os

import faiss
import numpy as np
import pytest

from dense_cf.bench.index import clustered_queries, clustered_vectors, recall_at
from dense_cf.index import (
    DenseIndex,
    IndexSpec,
    ShardedIndex,
    auto_nlist,
    build_index,
    build_index_from_dir,
    bytes_per_vector,
    default_pq_m,
    is_saved_index,
    merge_topk,
)

N, D, NQ = 2000, 32, 100


@pytest.fixture(autouse=True)
def _one_faiss_thread():
    # Tests run 2 per core under xdist; one faiss thread each avoids oversubscription.
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


@pytest.fixture(scope="module")
def gaussian():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, D), dtype=np.float32)
    q = rng.standard_normal((NQ, D), dtype=np.float32)
    ids = rng.permutation(N).astype(np.int64) * 7 + 1000  # non-contiguous, shuffled
    return x, q, ids


@pytest.fixture(scope="module")
def clustered():
    x = clustered_vectors(N, D, clusters=16, seed=1)
    q = clustered_queries(NQ, D, clusters=16, seed=1)
    return x, q


def brute_force(x: np.ndarray, q: np.ndarray, k: int, ids: np.ndarray | None = None):
    s = q.astype(np.float64) @ x.astype(np.float64).T
    order = np.argsort(-s, axis=1, kind="stable")[:, :k]
    row_ids = order if ids is None else ids[order]
    return np.take_along_axis(s, order, axis=1), row_ids


def exact_ids(x: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    return brute_force(x, q, k)[1]


# ------------------------------------------------------------------------------------------
# Exactness and merge
# ------------------------------------------------------------------------------------------

def test_flat_equals_numpy_brute_force(gaussian):
    x, q, ids = gaussian
    k = 20
    want_s, want_i = brute_force(x, q, k, ids)
    # Precondition for comparing ids: no two of the top k+1 scores are equal.
    full = np.sort(q.astype(np.float64) @ x.T.astype(np.float64), axis=1)[:, ::-1][:, :k + 1]
    assert (np.diff(full, axis=1) < -1e-5).all()
    index = build_index(x, ids, IndexSpec("flat"))
    assert (index.ntotal, index.dim, index.num_shards) == (N, D, 1)
    s, i = index.search(q, k, batch_size=7)  # several batches, one ragged
    assert s.dtype == np.float32 and i.dtype == np.int64 and s.shape == (NQ, k)
    np.testing.assert_array_equal(i, want_i)
    np.testing.assert_allclose(s, want_s, rtol=1e-5, atol=1e-5)


def test_k_beyond_ntotal_pads_with_minus_one():
    x = np.eye(4, dtype=np.float32)
    index = build_index(x, np.array([10, 20, 30, 40]), IndexSpec("flat", shards=2))
    s, i = index.search(np.array([[1, 2, 3, 4]], np.float32), 6)
    np.testing.assert_array_equal(i, [[40, 30, 20, 10, -1, -1]])
    np.testing.assert_array_equal(s[0, :4], [4, 3, 2, 1])
    assert np.isneginf(s[0, 4:]).all()


def test_merge_topk_breaks_ties_by_lower_id_and_drops_missing():
    s_a, i_a = np.array([[3.0, 2.0, 2.0]]), np.array([[5, 9, 1]])
    s_b, i_b = np.array([[2.0, 2.0, -3e38]]), np.array([[4, 3, -1]])
    s, i = merge_topk([s_a, s_b], [i_a, i_b], 5)
    np.testing.assert_array_equal(i, [[5, 1, 3, 4, 9]])
    np.testing.assert_array_equal(s, [[3, 2, 2, 2, 2]])
    s, i = merge_topk([s_a, s_b], [i_a, i_b], 7)
    np.testing.assert_array_equal(i[0, 5:], [-1, -1])  # 6 real candidates minus the missing one
    assert np.isneginf(s[0, 5:]).all()


def test_sharded_ties_ordered_by_lower_id():
    # Six identical vectors: every score ties, so the order is decided by id alone.
    x = np.tile(np.array([[1.0, 2.0, 0.5, 0.0]], np.float32), (6, 1))
    ids = np.array([50, 10, 40, 20, 60, 30])
    index = build_index(x, ids, IndexSpec("flat", shards=3))  # shards hold {50,10} {40,20} {60,30}
    assert isinstance(index, ShardedIndex) and index.num_shards == 3
    s, i = index.search(np.array([[1, 1, 1, 1]], np.float32), 4)
    np.testing.assert_array_equal(i, [[10, 20, 30, 40]])
    assert np.unique(s).size == 1


def test_sharded_flat_equals_unsharded(gaussian):
    x, q, ids = gaussian
    one = build_index(x, ids, IndexSpec("flat"))
    three = build_index(x, ids, IndexSpec("flat", shards=3))
    assert [ix.ntotal for ix in three.faiss_indexes] == [666, 667, 667]
    s1, i1 = one.search(q, 50)
    s3, i3 = three.search(q, 50)
    np.testing.assert_array_equal(i1, i3)
    np.testing.assert_array_equal(s1, s3)


def test_sharded_ivfpq_shares_quantizer_and_matches_unsharded(clustered):
    # Same trained quantizer/codebooks and same probed lists -> the same top-k scores.
    x, q = clustered
    s1, _ = build_index(x, spec=IndexSpec("ivfpq")).search(q, 10)
    s3, _ = build_index(x, spec=IndexSpec("ivfpq", shards=3)).search(q, 10)
    np.testing.assert_array_equal(s1, s3)


def test_sharded_from_parts_combines_separate_indexes(gaussian):
    x, q, ids = gaussian
    parts = [build_index(x[:900], ids[:900]), build_index(x[900:], ids[900:])]
    combined = ShardedIndex.from_parts(parts)
    assert combined.ntotal == N and combined.spec.shards == 2
    np.testing.assert_array_equal(combined.search(q, 10)[1], brute_force(x, q, 10, ids)[1])


# ------------------------------------------------------------------------------------------
# Approximate kinds: quality
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,threshold", [("hnsw", 0.9), ("ivfpq", 0.5), ("sq8", 0.9),
                                            ("ivfsq", 0.9)])
def test_recall_at_10_on_clustered_data(clustered, kind, threshold):
    x, q = clustered
    index = build_index(x, spec=IndexSpec(kind))
    _, found = index.search(q, 10)
    recall = recall_at(found, exact_ids(x, q, 10), 10)
    assert recall >= threshold, f"{kind} recall@10 {recall:.3f} < {threshold}"
    assert recall <= 1.0


def test_ivfpq_defaults_and_determinism(clustered):
    x, q = clustered
    a = build_index(x, spec=IndexSpec("ivfpq"))
    assert a.spec.pq_m == 8 and a.spec.nlist == auto_nlist(N, N)
    assert a.build_info["n_train"] == N and a.build_info["ntotal"] == N
    b = build_index(x, spec=IndexSpec("ivfpq"))
    np.testing.assert_array_equal(a.search(q, 10)[1], b.search(q, 10)[1])  # seeded k-means


def test_defaults_and_memory_model():
    assert default_pq_m(768) == 96 and default_pq_m(32) == 8 and default_pq_m(100) == 25
    assert auto_nlist(1_000_000, 262_144) == 4000
    assert auto_nlist(21_000_000, 262_144) == 262_144 // 39  # bounded by the training sample
    assert bytes_per_vector(IndexSpec("flat"), 768) == 4 * 768 + 8
    assert bytes_per_vector(IndexSpec("sq8"), 768) == 768 + 8
    assert bytes_per_vector(IndexSpec("ivfpq"), 768) == 96 + 8
    # 21M DPR passages: ~64.5 GB flat vs ~2.2 GB IVF-PQ.
    assert 21e6 * 768 * 4 / 1e9 == pytest.approx(64.5, abs=0.1)
    assert 21e6 * bytes_per_vector(IndexSpec("ivfpq"), 768) / 1e9 < 2.3


def test_spec_validation(clustered):
    x, _ = clustered
    with pytest.raises(ValueError, match="kind"):
        IndexSpec("ivf_flat")
    with pytest.raises(ValueError, match="metric"):
        IndexSpec("flat", metric="l2")
    with pytest.raises(ValueError, match="pq_m=5 must divide the dimension 32"):
        build_index(x, spec=IndexSpec("ivfpq", pq_m=5))
    with pytest.raises(ValueError, match="training vectors < nlist"):
        build_index(x, spec=IndexSpec("ivfsq", nlist=100, train_size=50))
    with pytest.raises(ValueError, match=r"queries must have shape \[Q, 32\]"):
        build_index(x).search(np.zeros((2, 31), np.float32), 5)


def test_omp_threads_option(clustered):
    x, q = clustered
    index = build_index(x, spec=IndexSpec("flat", omp_threads=2))
    faiss.omp_set_num_threads(1)
    index.search(q, 5)
    assert faiss.omp_get_max_threads() == 2


# ------------------------------------------------------------------------------------------
# Save / load
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,shards", [("flat", 1), ("hnsw", 1), ("ivfpq", 1), ("sq8", 1),
                                         ("ivfsq", 1), ("hnsw", 2), ("ivfpq", 3)])
def test_save_load_round_trip(tmp_path, clustered, kind, shards):
    x, q = clustered
    ids = np.arange(N, dtype=np.int64) * 3 + 5
    index = build_index(x, ids, IndexSpec(kind, shards=shards, nprobe=4, ef_search=40))
    s, i = index.search(q, 10)
    manifest = index.save(str(tmp_path))
    on_disk = json.loads((tmp_path / "index.json").read_text())
    assert on_disk == manifest and on_disk["ntotal"] == N and on_disk["dim"] == D
    assert len(on_disk["shards"]) == shards
    assert is_saved_index(str(tmp_path))
    loaded = DenseIndex.load(str(tmp_path))
    assert type(loaded) is type(index) and loaded.spec == index.spec
    assert (loaded.ntotal, loaded.dim, loaded.kind) == (N, D, kind)
    s2, i2 = loaded.search(q, 10)
    np.testing.assert_array_equal(i, i2)
    np.testing.assert_array_equal(s, s2)
    assert set(np.unique(i2)) <= set(ids)


def test_search_params_survive_save_and_change_results(tmp_path, clustered):
    x, q = clustered
    index = build_index(x, spec=IndexSpec("ivfsq", nprobe=1))
    r1 = recall_at(index.search(q, 10)[1], exact_ids(x, q, 10), 10)
    index.set_search_params(nprobe=index.spec.nlist)  # probe every list: exhaustive over codes
    r_all = recall_at(index.search(q, 10)[1], exact_ids(x, q, 10), 10)
    assert r_all > r1
    index.save(str(tmp_path))
    assert DenseIndex.load(str(tmp_path)).spec.nprobe == index.spec.nlist


def test_load_errors(tmp_path):
    assert not is_saved_index(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="index.json"):
        DenseIndex.load(str(tmp_path))


# ------------------------------------------------------------------------------------------
# Streaming from disk
# ------------------------------------------------------------------------------------------

def write_shards(path, x: np.ndarray, ids: np.ndarray, sizes: list[int], dtype=np.float16):
    os.makedirs(path, exist_ok=True)
    start = 0
    for k, n in enumerate(sizes):
        np.save(os.path.join(path, f"embeddings-{k:05d}.npy"), x[start:start + n].astype(dtype))
        np.save(os.path.join(path, f"ids-{k:05d}.npy"), ids[start:start + n])
        start += n
    assert start == len(x)


def test_build_from_dir_float16_with_remapped_ids(tmp_path, gaussian):
    x, q, _ = gaussian
    ids = np.random.default_rng(3).choice(10**12, size=N, replace=False).astype(np.int64)
    write_shards(tmp_path / "emb", x, ids, [700, 0, 500, 800])
    # The exporter's tmp files must be ignored.
    np.save(tmp_path / "emb" / "embeddings-00009.npy.tmp.npy", np.zeros((3, 5), np.float16))
    index = build_index_from_dir(str(tmp_path / "emb"), IndexSpec("flat", shards=2))
    assert index.ntotal == N and index.build_info["ntotal"] == N
    x16 = x.astype(np.float16).astype(np.float32)  # the index holds the stored float16 values
    want_s, want_i = brute_force(x16, q, 10, ids)
    s, i = index.search(q, 10)
    np.testing.assert_array_equal(i, want_i)
    np.testing.assert_allclose(s, want_s, rtol=1e-5, atol=1e-4)


def test_build_from_dir_trained_kind_samples_across_shards(tmp_path, clustered):
    x, q = clustered
    ids = np.arange(N, dtype=np.int64)[::-1] + 10**9  # reversed, offset
    write_shards(tmp_path / "emb", x, ids, [1000, 600, 400], dtype=np.float32)
    spec = IndexSpec("ivfpq", train_size=1500, seed=7)
    index = build_index_from_dir(str(tmp_path / "emb"), spec, progress=False)
    assert index.build_info["n_train"] == 1500 and index.ntotal == N
    _, found = index.search(q, 10)
    want = ids[exact_ids(x, q, 10)]
    assert recall_at(found, want, 10) >= 0.5


def test_build_from_chunk_iterator(clustered):
    x, q = clustered
    ids = np.arange(N, dtype=np.int64) + 100
    chunks = ((x[a:a + 300], ids[a:a + 300]) for a in range(0, N, 300))
    index = build_index(chunks, spec=IndexSpec("flat", shards=2))
    np.testing.assert_array_equal(index.search(q, 10)[1], exact_ids(x, q, 10) + 100)
    with pytest.raises(ValueError, match="n_total"):
        build_index(iter([(x[:1000], ids[:1000]), (x[1000:], ids[1000:])]),
                    spec=IndexSpec("ivfsq", train_size=500))
    ivf = build_index(iter([(x[:1000], ids[:1000]), (x[1000:], ids[1000:])]),
                      spec=IndexSpec("ivfsq", train_size=500), n_total=N)
    assert ivf.ntotal == N and ivf.build_info["n_train"] == 500


def test_dir_dimension_mismatch_names_the_file(tmp_path):
    d = tmp_path / "emb"
    write_shards(d, np.ones((10, 8), np.float32), np.arange(10), [10])
    np.save(d / "embeddings-00001.npy", np.ones((4, 6), np.float16))
    np.save(d / "ids-00001.npy", np.arange(10, 14))
    with pytest.raises(ValueError, match=r"embeddings-00001\.npy: embedding dim 6 != 8"):
        build_index_from_dir(str(d), progress=False)


def test_dir_empty_or_missing(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no embedding shards"):
        build_index_from_dir(str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        build_index_from_dir(str(tmp_path / "nope"))


def test_dir_bad_ids(tmp_path):
    d = tmp_path / "a"
    write_shards(d, np.ones((10, 4), np.float32), np.arange(10), [5, 5])
    np.save(d / "ids-00001.npy", np.arange(3))
    with pytest.raises(ValueError, match=r"ids-00001\.npy: 3 ids for 5 rows"):
        build_index_from_dir(str(d))
    np.save(d / "ids-00001.npy", np.arange(5))  # overlaps shard 0's ids
    with pytest.raises(ValueError, match="duplicate ids"):
        build_index_from_dir(str(d))
    os.remove(d / "ids-00001.npy")
    with pytest.raises(FileNotFoundError, match=r"ids-00001\.npy missing"):
        build_index_from_dir(str(d))


def test_dir_partial_export_detected(tmp_path):
    d = tmp_path / "emb"
    write_shards(d, np.ones((10, 4), np.float32), np.arange(10), [10])
    (d / "manifest.json").write_text(json.dumps({"count": 25}))
    with pytest.raises(ValueError, match="count=25 but the shards hold 10 rows"):
        build_index_from_dir(str(d))


# ------------------------------------------------------------------------------------------
# GPU path selection (no GPU here: faiss's GPU entry points are faked)
# ------------------------------------------------------------------------------------------

class _FakeClonerOptions:
    def __init__(self):
        self.shard = False
        self.useFloat16 = False


@pytest.fixture
def fake_gpu(monkeypatch):
    """Makes faiss look like a GPU build; returns (set_num_gpus, calls)."""
    calls: list[tuple] = []
    ngpu = {"n": 0}

    def to_gpu(index, co=None, ngpu=-1):
        # A CPU index stands in for the GPU one, so the rest of the code path still runs.
        calls.append(("to_gpu", type(faiss.downcast_index(index)).__name__, co))
        return index

    def to_cpu(index):
        calls.append(("to_cpu", type(index).__name__, None))
        return index

    monkeypatch.setattr(faiss, "StandardGpuResources", object, raising=False)
    monkeypatch.setattr(faiss, "GpuMultipleClonerOptions", _FakeClonerOptions, raising=False)
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: ngpu["n"])
    monkeypatch.setattr(faiss, "index_cpu_to_all_gpus", to_gpu, raising=False)
    monkeypatch.setattr(faiss, "index_gpu_to_cpu", to_cpu, raising=False)
    return (lambda n: ngpu.__setitem__("n", n)), calls


def test_gpu_auto_stays_on_cpu_without_gpus(fake_gpu, clustered):
    set_gpus, calls = fake_gpu
    set_gpus(0)
    index = build_index(clustered[0], spec=IndexSpec("flat"))
    assert not index.on_gpu and calls == []


def test_gpu_auto_stays_on_cpu_for_cpu_only_build(monkeypatch, clustered):
    # faiss-cpu: no StandardGpuResources, whatever get_num_gpus says.
    monkeypatch.delattr(faiss, "StandardGpuResources", raising=False)
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    assert not build_index(clustered[0], spec=IndexSpec("flat")).on_gpu


def test_gpu_auto_uses_converter_with_one_gpu(fake_gpu, clustered, tmp_path):
    set_gpus, calls = fake_gpu
    set_gpus(1)
    x, q = clustered
    index = build_index(x, spec=IndexSpec("flat"))
    assert index.on_gpu
    assert [(c[0], c[1]) for c in calls] == [("to_gpu", "IndexIDMap")]
    assert calls[0][2].shard is True
    np.testing.assert_array_equal(index.search(q, 5)[1], exact_ids(x, q, 5))
    with pytest.raises(ValueError, match="GPU limit 2048"):
        index.search(q, 2049)
    index.save(str(tmp_path))
    assert calls[-1][0] == "to_cpu"  # saved in CPU form
    calls.clear()
    assert DenseIndex.load(str(tmp_path)).on_gpu and calls[0][0] == "to_gpu"
    calls.clear()
    assert not DenseIndex.load(str(tmp_path), use_gpu=False).on_gpu and calls == []


def test_gpu_ivfpq_trains_with_gpu_kmeans_then_moves(fake_gpu, clustered):
    set_gpus, calls = fake_gpu
    set_gpus(1)
    index = build_index(clustered[0], spec=IndexSpec("ivfpq"))
    assert index.on_gpu
    assert [c[1] for c in calls] == ["IndexFlatIP", "IndexIVFPQ"]  # k-means index, then the IVF
    assert calls[1][2].useFloat16 is True  # float16 lookup tables for large PQ codes


def test_gpu_hnsw_and_sq8_stay_on_cpu(fake_gpu, clustered):
    set_gpus, calls = fake_gpu
    set_gpus(1)
    for kind in ("hnsw", "sq8"):
        assert not build_index(clustered[0][:300], spec=IndexSpec(kind)).on_gpu
    assert calls == []
    with pytest.raises(ValueError, match="'hnsw' has no faiss GPU implementation"):
        build_index(clustered[0][:300], spec=IndexSpec("hnsw", use_gpu=True))


def test_gpu_true_without_gpu_is_a_clear_error(fake_gpu, clustered):
    set_gpus, calls = fake_gpu
    set_gpus(0)
    with pytest.raises(RuntimeError, match="use_gpu=True but no GPU is usable"):
        build_index(clustered[0], spec=IndexSpec("flat", use_gpu=True))
    assert calls == []
