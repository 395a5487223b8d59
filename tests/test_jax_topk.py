"""Exact chunked top-k of ``eval.index=jax`` (dense_cf/index/jax_search.py, ``select``).

Every search is compared with numpy brute force (score descending, then lower row; of rows tied
at the k-th place the lowest kept), ids AND scores equal. The vectors are small dyadic rationals
(multiples of 1/4 or 1/8, |x| <= 4): every product and sum is exact in float32, bfloat16 and
float16 storage is exact where stated, so equality is the test, not a tolerance. Corpora: random,
clustered, and adversarial (few distinct values: most scores tie; one chunk holding the whole
top k; duplicated rows). k = 1, 16, 17, 100, 1000, 2048; N not divisible by the chunk or the
device count; 8 simulated devices and one device. Chunks are tiny (32 rows, top 4 each) so the
proof and both re-scan paths run on small corpora; the counters say they did.
"""

import dataclasses
import os

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from dense_cf.index.jax_search import (
    AUTO_SELECT,
    JaxSearchSpec,
    auto_query_batch,
    build_jax_index,
    build_jax_index_from_dir,
    chunked_applies,
    resolve_select,
)

N, D, NQ = 3001, 8, 24  # 3001: not a multiple of 8 devices, of 32-row chunks, of blocks
KS = (1, 16, 17, 100, 1000, 2048)
SPEC = JaxSearchSpec(select="chunked", block_rows=256, chunk_rows=32, chunk_k=4, rescan_chunks=2,
                     query_batch_size=16)


def _reference(x: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    s = q.astype(np.float64) @ x.astype(np.float64).T  # exact for these values
    rows = np.broadcast_to(np.arange(len(x)), s.shape)
    order = np.lexsort((rows, -s), axis=1)[:, :k]
    return np.take_along_axis(s, order, 1).astype(np.float32), order


def _dyadic(rng, shape, scale=4, lim=16):
    return (rng.integers(-lim, lim + 1, shape) / scale).astype(np.float32)


def _corpus(kind: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if kind == "random":
        return _dyadic(rng, (N, D)), _dyadic(rng, (NQ, D))
    if kind == "clustered":
        centers = _dyadic(rng, (12, D), lim=8)
        x = centers[rng.integers(0, 12, N)] + _dyadic(rng, (N, D), scale=8, lim=2)
        q = centers[rng.integers(0, 12, NQ)] + _dyadic(rng, (NQ, D), scale=8, lim=2)
        return x.astype(np.float32), q.astype(np.float32)
    if kind == "ties":  # values in {-1, 0, 1}: a handful of distinct scores
        return (rng.integers(-1, 2, (N, D)).astype(np.float32),
                rng.integers(-1, 2, (NQ, D)).astype(np.float32))
    if kind == "one_chunk":  # rows 1600..1631 (one chunk) outscore every other row
        x = _dyadic(rng, (N, D), lim=4)
        q = np.abs(_dyadic(rng, (NQ, D), lim=4)) + 0.25
        x[1600:1632] = 4.0 - _dyadic(rng, (32, D), scale=8, lim=4) ** 2
        return x, q.astype(np.float32)
    if kind == "duplicates":  # 100 distinct rows repeated: every score appears ~30 times
        base = _dyadic(rng, (100, D))
        return base[rng.integers(0, 100, N)], _dyadic(rng, (NQ, D))
    raise ValueError(kind)


def _check(index, x, q, ks=KS, **kw) -> dict[str, int]:
    stats: dict[str, int] = {}
    for k in ks:
        s, i = index.search(q, k, stats=stats, **kw)
        want_s, want_i = _reference(x, q, min(k, len(x)))
        np.testing.assert_array_equal(i[:, :len(x)], want_i, err_msg=f"ids, k={k}")
        np.testing.assert_array_equal(s[:, :len(x)], want_s, err_msg=f"scores, k={k}")
    return stats


@pytest.mark.parametrize("kind", ["random", "clustered", "ties", "one_chunk", "duplicates"])
def test_chunked_equals_brute_force_on_all_devices(kind):
    """8 simulated devices on the CPU (conftest); whatever devices there are elsewhere."""
    x, q = _corpus(kind)
    index = build_jax_index(x, spec=SPEC)
    assert index._corpus.shape[0] > N and index._block % 32 == 0
    stats = _check(index, x, q)
    assert stats["chunks"] > 0  # the chunked program ran, not the sort fallback by choice
    if kind in ("ties", "one_chunk", "duplicates"):
        assert stats["unsafe_chunks"] > 0  # the proof failed somewhere, and the re-scan fixed it


@pytest.mark.parametrize("devices", [1, None], ids=["one_device", "all_devices"])
def test_both_rescan_paths_run_and_stay_exact(devices):
    """Ties corpus, k = 16 and 17, on one device and on all of them: some blocks have at most
    rescan_chunks unsafe chunks per query (gathered and merged by sort), others more (a full
    sort of the block). The clustered corpus this used before reached the full sort only with
    the corpus split over 8 devices (none on one CPU device or the one GPU of a device run)."""
    x, q = _corpus("ties")
    mesh = Mesh(np.array(jax.devices()[:devices]), ("data",))
    index = build_jax_index(x, spec=SPEC, mesh=mesh)
    stats = _check(index, x, q, ks=(16, 17))
    assert stats["rescanned_chunks"] > 0 and stats["fallback_blocks"] > 0


def test_random_corpus_rarely_needs_a_rescan():
    """Gaussian-like data on one device, chunks of 64 with top 8: the proof holds for most
    chunks (the point of the scheme), and the answer is exact anyway."""
    rng = np.random.default_rng(7)
    x = _dyadic(rng, (20_000, D), scale=64, lim=256)
    q = _dyadic(rng, (32, D), scale=64, lim=256)
    mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
    spec = JaxSearchSpec(block_rows=4096, chunk_rows=64, chunk_k=8, query_batch_size=32,
                         select="chunked")
    index = build_jax_index(x, spec=spec, mesh=mesh)
    auto = dataclasses.replace(spec, select="auto")
    for platform in ("gpu", "cpu"):  # auto is never chunked: it lost to sort on an H200 too
        assert not chunked_applies(auto, index._block, 100, platform)
    assert chunked_applies(spec, index._block, 100, "cpu")
    stats = _check(index, x, q, ks=(100,))
    assert stats["unsafe_chunks"] < 0.01 * stats["chunks"] * stats["queries"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16bit_corpus_equals_brute_force_over_the_rounded_vectors(dtype):
    """A 16-bit corpus (and queries rounded to it) with float32 accumulation equals float32
    brute force over the same rounded vectors; the float32 override searches the stored
    values with unrounded queries."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((N, D)).astype(np.float32)
    q = _dyadic(rng, (NQ, D), scale=4, lim=8)  # exact in both 16-bit formats
    xr = np.asarray(jax.numpy.asarray(x).astype(dtype).astype(np.float32))
    assert not np.array_equal(xr, x)  # rounding happened
    index = build_jax_index(x, spec=JaxSearchSpec(**{**SPEC.to_dict(), "dtype": dtype}))
    assert index.device_bytes == index._corpus.shape[0] * D * 2
    # Products of 8-bit (16-bit-float) mantissas are exact; sums are not, so compare the
    # scores with float32 summation-order tolerance and ids where the next score is clear.
    for k in (17, 100):
        s, i = index.search(q, k)
        want_s, want_i = _reference(xr, q, k + 1)  # + 1: the gap below the k-th score
        np.testing.assert_allclose(s, want_s[:, :k], rtol=1e-5, atol=1e-4)
        gap = np.abs(np.diff(want_s, axis=1)) > 1e-3  # [NQ, k]: score j vs score j + 1
        clear = gap & np.concatenate([np.ones((NQ, 1), bool), gap[:, :-1]], 1)
        assert clear.mean() > 0.9
        np.testing.assert_array_equal(i[clear], want_i[:, :k][clear])
    s, i = index.search(q + 0.01, 50, dtype="float32")
    want_s, want_i = _reference(xr, q + 0.01, 50)
    np.testing.assert_allclose(s, want_s, rtol=1e-5, atol=1e-4)


def test_16bit_integer_corpus_is_exact():
    x, q = _corpus("ties", seed=5)
    for dtype in ("bfloat16", "float16"):
        index = build_jax_index(x, spec=JaxSearchSpec(**{**SPEC.to_dict(), "dtype": dtype}))
        _check(index, x, q, ks=(1, 17, 100))


def test_sort_and_one_device_agree():
    x, q = _corpus("clustered", seed=2)
    mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
    one = build_jax_index(x, spec=SPEC, mesh=mesh)
    _check(one, x, q, ks=(16, 100, 2048))
    _check(one, x, q, ks=(100,), select="sort")



@pytest.mark.parametrize("kind", ["random", "ties", "duplicates"])
def test_chunks_of_1024_rows(kind):
    """The default chunk (1,024 rows, top 16): on a GPU, XLA's fast top-k kernel serves these
    chunks (it needs rows >= 1024, k <= 16), so run there this checks its tie order too."""
    rng = np.random.default_rng(13)
    n = 40_000 + 7
    if kind == "random":
        x, q = _dyadic(rng, (n, D), scale=64, lim=256), _dyadic(rng, (NQ, D), scale=64, lim=256)
    elif kind == "ties":
        x, q = _dyadic(rng, (n, D), scale=1, lim=2), _dyadic(rng, (NQ, D), scale=1, lim=2)
    else:
        base = _dyadic(rng, (500, D))
        x, q = base[rng.integers(0, 500, n)], _dyadic(rng, (NQ, D))
    mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
    spec = JaxSearchSpec(select="chunked", block_rows=8192, query_batch_size=NQ)
    index = build_jax_index(x, spec=spec, mesh=mesh)
    stats = _check(index, x, q, ks=(17, 100))
    assert stats["chunks"] == 2 * 40 and index._block == 8192  # 2 searches x 5 blocks x 8


def test_query_batch_sized_to_the_device():
    """query_batch_size=0: the largest batch whose score work fits a quarter of free memory."""
    assert auto_query_batch("cpu", 65_536, None) == 256
    assert auto_query_batch("gpu", 65_536, 80 * 2**30) == 4096  # 3 GiB of score work
    assert auto_query_batch("gpu", 65_536, 4 * 2**30) == 1024  # <= 1 GiB
    assert auto_query_batch("gpu", 65_536, None) == 1024
    x, q = _corpus("random")
    index = build_jax_index(x, spec=JaxSearchSpec(**{**SPEC.to_dict(), "query_batch_size": 0}))
    _check(index, x, q, ks=(17,))
    with pytest.raises(ValueError, match="query_batch_size"):
        JaxSearchSpec(query_batch_size=-1)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_float16_export_streams_into_a_16bit_corpus(tmp_path, dtype):
    """The exporter's float16 shards, read block by block into a 16-bit corpus (values exact in
    both formats), search exactly; the corpus takes 2 bytes per value on the devices."""
    rng = np.random.default_rng(17)
    x, q = _dyadic(rng, (N, D)), _dyadic(rng, (NQ, D))
    for s, (lo, hi) in enumerate([(0, 1000), (1000, 1001), (1001, N)]):
        np.save(tmp_path / f"embeddings-{s:05d}.npy", x[lo:hi].astype(np.float16))
        np.save(tmp_path / f"ids-{s:05d}.npy", np.arange(lo, hi, dtype=np.int64))
    index = build_jax_index_from_dir(str(tmp_path), JaxSearchSpec(**{**SPEC.to_dict(), "dtype": dtype}),
                                     progress=False)
    assert index._corpus.dtype == np.uint16 and len(os.listdir(tmp_path)) == 6
    _check(index, x, q, ks=(17, 100))


# ---- bin-max certificate (select="bmc") ------------------------------------------------------

BMC = JaxSearchSpec(select="bmc", block_rows=256, chunk_rows=32, bin_rows=8, query_batch_size=16)


def _one_device() -> Mesh:
    return Mesh(np.array(jax.devices()[:1]), ("data",))


def _check_bmc(index, x, q, ks=KS, **kw) -> dict[int, str]:
    """``_check`` per k, and the program's own counter says which selection ran: bmc blocks
    exactly when ``index.selection`` says bmc. Returns {k: selection}."""
    ran = {}
    for k in ks:
        stats = _check(index, x, q, ks=(k,), **kw)
        ran[k] = index.selection(k, **kw)
        assert (stats["bmc_blocks"] > 0) == (ran[k] == "bmc"), (k, ran[k], stats)
    return ran


@pytest.mark.parametrize("kind", ["random", "clustered", "ties", "one_chunk", "duplicates"])
@pytest.mark.parametrize("devices", [1, None], ids=["one_device", "all_devices"])
def test_bmc_equals_brute_force(kind, devices):
    """Bins of 8 rows: every k the blocks have bins for runs bmc (the rest sort), ids and
    scores equal numpy brute force, on one device and on all (8 simulated on the CPU)."""
    x, q = _corpus(kind)
    mesh = Mesh(np.array(jax.devices()[:devices]), ("data",))
    index = build_jax_index(x, spec=BMC, mesh=mesh)
    ran = _check_bmc(index, x, q)
    assert ran[1] == ran[16] == ran[17] == "bmc" and ran[2048] == "sort"


@pytest.mark.parametrize("kind", ["random", "ties", "duplicates"])
@pytest.mark.parametrize("bin_rows", [1, 2, 8])
@pytest.mark.parametrize("devices", [1, None], ids=["one_device", "all_devices"])
def test_bmc_large_k(kind, bin_rows, devices):
    """Blocks as large as the layout allows: on one device one block of 3,008 rows, so bins of
    1 and 2 rows give bmc up to k = 2048 and 1000 (bins of 8: up to 376); on 8 simulated
    devices blocks of 384 rows (bmc up to k = 384 with bins of 1). A k with fewer bins than k
    takes sort, exactly."""
    x, q = _corpus(kind, seed=3)
    spec = dataclasses.replace(BMC, block_rows=4096, bin_rows=bin_rows)
    mesh = Mesh(np.array(jax.devices()[:devices]), ("data",))
    index = build_jax_index(x, spec=spec, mesh=mesh)
    block = index._block
    per = -(-N // mesh.devices.size)  # rows per device, in whole 32-row chunks
    assert block == -(-per // 32) * 32
    ran = _check_bmc(index, x, q)
    assert ran == {k: ("bmc" if block // bin_rows >= k else "sort") for k in KS}


def test_bmc_padding_never_wins_a_bin():
    """All scores negative and the last block mostly padding (zero rows score 0.0): a bin's
    max must be taken after the padding is set to -inf, else padding bins would displace the
    real rows of the last block."""
    rng = np.random.default_rng(23)
    n = 778  # one device, blocks of 224 rows: the last block holds 106 real rows, 118 padding
    x = np.abs(_dyadic(rng, (n, D))) + 0.25
    q = -np.abs(_dyadic(rng, (NQ, D))) - 0.25
    index = build_jax_index(x, spec=BMC, mesh=_one_device())
    assert index._block == 224 and index._corpus.shape[0] == 896
    assert set(_check_bmc(index, x, q, ks=(1, 17, 28)).values()) == {"bmc"}


def test_bmc_best_rows_in_one_bin():
    """The one_chunk corpus's 32 best rows (1600..1631) are exactly one bin of 32 rows: the
    top 17 all come from that bin, the rest of the top 100 from the bins around."""
    x, q = _corpus("one_chunk")
    spec = dataclasses.replace(BMC, block_rows=4096, bin_rows=32)
    index = build_jax_index(x, spec=spec, mesh=_one_device())
    assert index.selection(17) == index.selection(94) == "bmc"
    assert index.selection(95) == "sort"  # 3,008 / 32 = 94 bins
    s, i = index.search(q, 17)
    assert np.all((i >= 1600) & (i < 1632))
    _check_bmc(index, x, q, ks=(1, 17, 32, 33, 94, 100))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_bmc_16bit_integer_corpus_is_exact(dtype):
    x, q = _corpus("ties", seed=5)
    index = build_jax_index(x, spec=dataclasses.replace(BMC, dtype=dtype))
    assert _check_bmc(index, x, q, ks=(1, 17, 100))[17] == "bmc"


def test_auto_resolves_from_the_measured_table():
    """``auto`` runs the platform's entry of AUTO_SELECT (bmc, with its bin size) where the
    blocks have enough bins, else sort; an explicit bin_rows overrides the table's."""
    x, q = _corpus("random")
    spec = JaxSearchSpec(block_rows=65_536, query_batch_size=16)  # bins of 128 (table)
    assert resolve_select(spec, 65_536, 100, "cpu") == AUTO_SELECT["cpu"][0]
    assert resolve_select(spec, 65_536, 100, "gpu") == AUTO_SELECT["gpu"][0]
    assert resolve_select(spec, 65_536, 513, "cpu") == "sort"  # 512 bins of 128 < k
    assert resolve_select(dataclasses.replace(spec, bin_rows=64), 65_536, 513, "cpu") == "bmc"
    assert resolve_select(dataclasses.replace(spec, approx=True), 65_536, 100, "cpu") == "sort"
    index = build_jax_index(x, spec=dataclasses.replace(spec, bin_rows=8), mesh=_one_device())
    assert index.selection(17, select="sort") == "sort"
    assert _check_bmc(index, x, q, ks=(17, 100)) == {17: "bmc", 100: "bmc"}
    assert _check_bmc(index, x, q, ks=(17,), select="sort") == {17: "sort"}
    with pytest.raises(ValueError, match="bin_rows"):
        JaxSearchSpec(bin_rows=-1)


@pytest.mark.parametrize("kind", ["random", "clustered", "ties", "one_chunk", "duplicates"])
@pytest.mark.parametrize("devices", [1, None], ids=["one_device", "all_devices"])
def test_bmc_pruned_equals_brute_force(kind, devices):
    """Carry-threshold pruning (prune_bins = 4 of k = 16, 17 bins): blocks where the carry's
    k-th score bounds the 4th bin max gather 4 bins, the others k; exact either way. Tie-heavy
    corpora prune on equal maxima (the carry's lower rows win those ties)."""
    x, q = _corpus(kind)
    mesh = Mesh(np.array(jax.devices()[:devices]), ("data",))
    index = build_jax_index(x, spec=dataclasses.replace(BMC, prune_bins=4), mesh=mesh)
    for k in (16, 17):
        stats = _check(index, x, q, ks=(k,))
        assert stats["bmc_blocks"] > 0 and stats["pruned_blocks"] < stats["bmc_blocks"]
        if kind in ("ties", "duplicates") and devices == 1:
            assert stats["pruned_blocks"] > 0, stats


def test_bmc_pruning_on_a_random_corpus():
    """20,000 random rows, one device, blocks of 1,024 rows in 128 bins of 8, k = 100 and
    prune_bins = 16: once the carry has seen enough rows most blocks are pruned, and the
    answer is exact."""
    rng = np.random.default_rng(7)
    x = _dyadic(rng, (20_000, D), scale=64, lim=256)
    q = _dyadic(rng, (32, D), scale=64, lim=256)
    spec = JaxSearchSpec(select="bmc", block_rows=1024, chunk_rows=64, bin_rows=8,
                         prune_bins=16, query_batch_size=32)
    index = build_jax_index(x, spec=spec, mesh=_one_device())
    stats = _check(index, x, q, ks=(100,))
    assert stats["bmc_blocks"] == 20 and stats["pruned_blocks"] >= 5, stats
