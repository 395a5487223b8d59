"""JAX-native search on the device mesh (dense_cf/index/jax_search.py, ``eval.index=jax``).

Exact mode against faiss IndexFlatIP (``DenseIndex`` kind flat) on 8 simulated devices: ids
and scores, rows not divisible by the device count, k beyond one device's rows and beyond N,
ties; bfloat16 and approx recall; build from an export directory, save / load; a retrieval
evaluation with ``eval.index=jax`` against flat.
"""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from helpers import xla_flags

from dense_cf.index.faiss_index import IndexSpec, build_index, build_index_from_dir
from dense_cf.index.jax_search import JaxIndex, JaxSearchSpec, build_jax_index, build_jax_index_from_dir
from dense_cf.index.kinds import load as load_index

DEVICES = 8
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if jax.device_count() != DEVICES:  # e.g. XLA_FLAGS set by the caller: rerun with 8 devices
    def test_in_a_subprocess_with_8_devices():
        env = dict(os.environ, XLA_FLAGS=xla_flags(DEVICES))
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            os.path.abspath(__file__)], cwd=ROOT, env=env)
        assert r.returncode == 0
else:
    def _flat(x, ids=None):
        return build_index(x, ids, IndexSpec(kind="flat", use_gpu=False))

    def _int_data(n, d, nq, seed=0, lo=-2, hi=3):
        """Small integer vectors: dot products are exact in float32 and ties are common."""
        rng = np.random.default_rng(seed)
        return (rng.integers(lo, hi, (n, d)).astype(np.float32),
                rng.integers(lo, hi, (nq, d)).astype(np.float32))

    def _reference(x, ids, q, k):
        """Brute force in numpy: score descending, then lower id; the lowest ids kept."""
        s = q @ x.T
        order = np.lexsort((np.broadcast_to(ids, s.shape), -s), axis=1)[:, :k]
        return np.take_along_axis(s, order, 1), ids[order]

    def _check_against_flat(s_j, i_j, s_f, i_f, x_scores, k):
        """Same scores; same ids above the k-th score; at the k-th score both hold tied rows."""
        np.testing.assert_array_equal(s_j, s_f)
        above = s_f > s_f[:, -1:]
        np.testing.assert_array_equal(i_j[above], i_f[above])
        for r in range(len(s_f)):
            tied = s_f[r] == s_f[r, -1]
            if np.isfinite(s_f[r, -1]):
                assert np.all(x_scores[r, i_j[r][tied]] == s_f[r, -1])
                assert np.all(x_scores[r, i_f[r][tied]] == s_f[r, -1])

    def test_mesh_has_8_devices():
        index = build_jax_index(np.ones((20, 4), np.float32))
        assert index.num_shards == DEVICES
        assert len(index._corpus.sharding.device_set) == DEVICES

    @pytest.mark.parametrize("k", [1, 10, 200, 1100])
    def test_exact_equals_flat_with_ties(k):
        """n = 1003 (not a multiple of 8: padded rows), 126 rows per device over 4 blocks;
        k = 200 exceeds a device's rows, k = 1100 exceeds n (missing: id -1, score -inf)."""
        x, q = _int_data(1003, 16, 37)
        index = build_jax_index(x, spec=JaxSearchSpec(block_rows=40, query_batch_size=16))
        assert index._corpus.shape[0] % DEVICES == 0 and index._corpus.shape[0] > 1003
        s_j, i_j = index.search(q, k)
        s_f, i_f = _flat(x).search(q, k)
        _check_against_flat(s_j, i_j, s_f, i_f, q @ x.T, k)
        # The documented order: score descending, lower id first, lowest tied ids kept.
        s_r, i_r = _reference(x, np.arange(1003), q, min(k, 1003))
        np.testing.assert_array_equal(s_j[:, :1003], s_r)
        np.testing.assert_array_equal(i_j[:, :1003], i_r)
        if k > 1003:
            assert np.all(i_j[:, 1003:] == -1) and np.all(s_j[:, 1003:] == -np.inf)
            assert np.all(i_f[:, 1003:] == -1)

    def test_padding_never_wins():
        """Every real score is negative, so zero padding rows (score 0) would win unmasked."""
        x, q = _int_data(13, 8, 5, lo=1, hi=4)
        q = -q
        index = build_jax_index(x)  # 13 rows on 8 devices: 3 of 16 rows are padding
        s, i = index.search(q, 13)
        assert np.all(i >= 0) and np.all(s < 0)
        np.testing.assert_array_equal(i, _reference(x, np.arange(13), q, 13)[1])

    def test_unordered_ids_keep_the_lower_id_first_on_ties():
        x, q = _int_data(500, 8, 20, seed=1)
        ids = np.random.default_rng(2).permutation(10_000)[:500]
        s_j, i_j = build_jax_index(x, ids, JaxSearchSpec(block_rows=24)).search(q, 50)
        s_f, i_f = _flat(x, ids).search(q, 50)
        np.testing.assert_array_equal(s_j, s_f)
        above = s_f > s_f[:, -1:]
        np.testing.assert_array_equal(i_j[above], i_f[above])
        for srow, irow in zip(s_j, i_j):  # within equal scores, ascending ids
            same = srow[1:] == srow[:-1]
            assert np.all(irow[1:][same] > irow[:-1][same])

    def test_float_data_equals_flat():
        """Gaussian vectors: scores equal up to float32 summation order; ids equal wherever
        the neighbouring scores are not within that rounding."""
        rng = np.random.default_rng(3)
        x = rng.standard_normal((2001, 64), dtype=np.float32)
        q = rng.standard_normal((50, 64), dtype=np.float32)
        s_j, i_j = build_jax_index(x, spec=JaxSearchSpec(block_rows=100)).search(q, 100)
        s_f, i_f = _flat(x).search(q, 100)
        np.testing.assert_allclose(s_j, s_f, rtol=1e-5, atol=1e-4)
        gap = np.minimum(np.abs(np.diff(s_f, axis=1, prepend=np.inf)),
                         np.abs(np.diff(s_f, axis=1, append=-np.inf)))
        clear = gap > 1e-3
        assert clear.mean() > 0.9
        np.testing.assert_array_equal(i_j[clear], i_f[clear])

    def _recall(found, exact):
        return float(np.mean([len(np.intersect1d(f, e)) / len(e) for f, e in zip(found, exact)]))

    def test_bfloat16_and_approx_recall_vs_flat():
        rng = np.random.default_rng(4)
        centers = rng.standard_normal((20, 64)).astype(np.float32)
        x = (centers[rng.integers(0, 20, 4000)] + rng.standard_normal((4000, 64))).astype(np.float32)
        q = (centers[rng.integers(0, 20, 64)] + rng.standard_normal((64, 64))).astype(np.float32)
        _, exact = _flat(x).search(q, 100)
        bf16 = build_jax_index(x, spec=JaxSearchSpec(dtype="bfloat16"))
        assert bf16.device_bytes == bf16._corpus.shape[0] * 64 * 2
        s_b, i_b = bf16.search(q, 100)
        r_bf16 = _recall(i_b, exact)
        approx = build_jax_index(x, spec=JaxSearchSpec(approx=True, recall_target=0.95))
        r_approx = _recall(approx.search(q, 100)[1], exact)
        print(f"recall@100 vs flat: bfloat16 {r_bf16:.4f}, approx(0.95) {r_approx:.4f}")
        # bfloat16 keeps 8 mantissa bits: scores move by ~0.4 %, so near-ties at the boundary
        # swap; most of the top-100 stays.
        assert 0.9 <= r_bf16 <= 1.0
        assert r_approx >= 0.95
        assert np.all(np.diff(s_b, axis=1) <= 0)

    def _write_export(d, x, sizes, dtype=np.float16):
        """Shards in the exporter's layout (ids-K.npy + embeddings-K.npy, float16)."""
        os.makedirs(d, exist_ok=True)
        start = 0
        for s, m in enumerate(sizes):
            np.save(os.path.join(d, f"embeddings-{s:05d}.npy"), x[start:start + m].astype(dtype))
            np.save(os.path.join(d, f"ids-{s:05d}.npy"), np.arange(start, start + m, dtype=np.int64))
            start += m

    def test_build_from_export_dir_save_and_load(tmp_path):
        rng = np.random.default_rng(5)
        x = rng.standard_normal((700, 32), dtype=np.float32)
        emb = str(tmp_path / "export")
        _write_export(emb, x, [300, 1, 250, 149])  # shard edges inside the device blocks
        q = rng.standard_normal((30, 32), dtype=np.float32)
        spec = JaxSearchSpec(block_rows=30, query_batch_size=7)
        index = build_jax_index_from_dir(emb, spec, progress=False)
        s_j, i_j = index.search(q, 40)
        s_f, i_f = build_index_from_dir(emb, IndexSpec(kind="flat", use_gpu=False),
                                        progress=False).search(q, 40)
        np.testing.assert_allclose(s_j, s_f, rtol=1e-5, atol=1e-4)
        assert (i_j == i_f).mean() > 0.95
        # The float16 values on disk, not the float32 originals.
        s_r, i_r = _reference(x.astype(np.float16).astype(np.float32), np.arange(700), q, 40)
        np.testing.assert_allclose(s_j, s_r, rtol=1e-5, atol=1e-4)

        saved = str(tmp_path / "index")
        manifest = index.save(saved)
        assert manifest["kind"] == "jax" and len(manifest["shards"]) == 4
        assert sorted(os.listdir(saved)) == ["index.json"]  # the vectors stay in the export
        again = load_index(saved)
        assert isinstance(again, JaxIndex) and again.spec == spec
        np.testing.assert_array_equal(again.search(q, 40)[1], i_j)
        # A changed shard is refused, naming it.
        _write_export(emb, x[::-1].copy(), [300, 1, 250, 149])
        with pytest.raises(ValueError, match="embeddings-000"):
            load_index(saved)

    def test_bad_input_is_named():
        with pytest.raises(ValueError, match="dtype"):
            JaxSearchSpec(dtype="float8")
        with pytest.raises(ValueError, match="recall_target"):
            JaxSearchSpec(recall_target=0)
        with pytest.raises(ValueError, match="select"):
            JaxSearchSpec(select="heap")
        with pytest.raises(ValueError, match="chunk_k"):
            JaxSearchSpec(chunk_rows=16, chunk_k=16)
        index = build_jax_index(np.ones((10, 4), np.float32))
        with pytest.raises(ValueError, match=r"\[Q, 4\]"):
            index.search(np.ones((2, 5), np.float32), 3)
        with pytest.raises(ValueError, match="duplicate ids"):
            build_jax_index(np.ones((3, 4), np.float32), np.array([1, 1, 2]))
        with pytest.raises(ValueError, match="no files"):
            index.save("/nonexistent")

    def test_config_accepts_jax_and_checks_its_fields():
        from dense_cf.configs.base import base_config
        from dense_cf.train.validate import problems as config_problems
        c = base_config()
        c.eval.index = "jax"
        assert not [p for p in config_problems(c, check_files=False) if "eval." in p]
        c.eval.jax.dtype = "float8"
        c.eval.jax.recall_target = 1.5
        c.eval.jax.select = "heap"
        c.eval.jax.chunk_k = 2048
        problems = " ".join(config_problems(c, check_files=False))
        for field in ("dtype", "recall_target", "select", "chunk_k"):
            assert f"eval.jax.{field}" in problems
        c = base_config()
        c.eval.jax.dtype = "float16"
        assert not [p for p in config_problems(c, check_files=False) if "eval." in p]
        from dense_cf.retrieval.retriever import index_spec
        assert index_spec(c.eval, "jax") == JaxSearchSpec(dtype="float16")  # every key is a field

    def test_retrieval_eval_with_jax_equals_flat(tmp_path):
        """An untrained tiny run over a 300-passage synthetic benchmark: the top-k report of
        ``eval.index=jax`` is flat's, and the jax index is reused on a second call."""
        from helpers import sharded_params, tiny_synthetic_config

        from dense_cf.eval.retrieval import evaluate_run
        from dense_cf.synthetic import generate as synthetic
        from dense_cf.train.run import Run, build_model, run_tokenizer
        data = tmp_path / "synth"
        synthetic.generate(str(data), num_passages=300, seed=1)
        cfg = tiny_synthetic_config(data, **{"eval.embedding_dtype": "float32"})
        model, _, tok_dir = build_model(cfg, load_pretrained=False)
        mesh, rules, params, _ = sharded_params(model, cfg.data.max_p_len, 2, 1)
        run = Run(config=cfg, model=model, params=params, tokenizer=run_tokenizer(cfg, tok_dir),
                  step=0, mesh=mesh, rules=rules)
        work = str(tmp_path / "run")
        flat = evaluate_run(work, run=run, index_kind="flat", out_dir=str(tmp_path / "e_flat"))
        jx = evaluate_run(work, run=run, index_kind="jax", out_dir=str(tmp_path / "e_jax"))
        assert jx["index"] == "jax" and not jx["timing"]["index_reused"]
        assert jx["top_k"] == flat["top_k"] and jx["mrr"] == flat["mrr"]
        per_item = [json.load(open(os.path.join(r["out_dir"], "report.json")))["first_hit_rank"]
                    for r in (flat, jx)]
        assert per_item[0] == per_item[1]
        again = evaluate_run(work, run=run, index_kind="jax", out_dir=str(tmp_path / "e_jax2"))
        assert again["timing"]["index_reused"] and again["top_k"] == flat["top_k"]
        # Another dtype is another index: rebuilt, not reused.
        run.config.eval.jax.dtype = "bfloat16"
        bf = evaluate_run(work, run=run, index_kind="jax", out_dir=str(tmp_path / "e_bf16"))
        assert not bf["timing"]["index_reused"]

    def test_memory_per_device_is_the_layout():
        from dense_cf.index.jax_search import memory_per_device
        spec = JaxSearchSpec(dtype="bfloat16", query_batch_size=128, block_rows=65_536)
        m = memory_per_device(21_015_324, 768, 8, spec)
        # 41 blocks per device, each rounded up to whole 1,024-row chunks
        assert 21_015_324 <= 8 * m["rows"] < 21_015_324 + 8 * 1024 * 41
        assert m["rows"] % 1024 == 0
        assert m["corpus_bytes"] == m["rows"] * 768 * 2
        index = build_jax_index(np.ones((1003, 16), np.float32), spec=JaxSearchSpec(block_rows=40))
        layout = memory_per_device(1003, 16, DEVICES, JaxSearchSpec(block_rows=40))
        assert index.device_bytes == DEVICES * layout["corpus_bytes"]
