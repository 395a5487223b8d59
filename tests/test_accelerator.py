"""dense_cf.bench.accelerator at small shapes on the simulated CPU devices (no timed asserts)."""

import json
import math
import os
import subprocess
import sys

import pytest
from helpers import child_pythonpath, xla_flags

from dense_cf.bench import accelerator as acc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("kind,name,tflops", [
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM", 989.4),
    ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe", 756),
    ("NVIDIA H200", "NVIDIA H200", 989.4),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100", 312),
    ("TPU v4", "TPU v4", 275),
    ("TPU v5 lite", "TPU v5e", 197),
    ("TPU v5", "TPU v5p", 459),
    ("TPU v6 lite", "TPU v6e", 918),
])
def test_peak_table_lookup(kind, name, tflops):
    peak, entry = acc.peak_bf16_flops(kind)
    assert entry == name and peak == pytest.approx(tflops * 1e12)


def test_unknown_device_has_no_peak():
    assert acc.peak_bf16_flops("cpu") == (None, None)


def test_analytic_flops_of_bert_base():
    """6·N·T + attention at the paper's shapes: 85.05M non-embedding params per tower."""
    cfg = acc.bert_config(acc.BenchOptions(shapes="paper"))
    total, non_emb = acc.count_params(cfg)
    assert non_emb == 85_054_464 and total == 85_054_464 + (30522 + 512 + 2) * 768 + 2 * 768
    flops = acc.train_step_flops(cfg, 128, 384, 64, 256)
    dense = 6 * non_emb * (128 * 64 + 384 * 256)
    attn = 12 * 12 * 768 * (128 * 64**2 + 384 * 256**2)
    assert flops == pytest.approx(dense + attn)


def _finite_positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_cli_small_shapes_writes_json(tmp_path):
    """The CLI end to end (2 simulated devices: sharding check included), TensorFlow and faiss
    blocked as on the GPU hosts: JAX search runs, its faiss peer is skipped with the reason."""
    out = tmp_path / "accel.json"
    code = ("import runpy, sys\n"
            "sys.modules['tensorflow'] = sys.modules['tensorflow_datasets'] = None\n"
            "sys.modules['faiss'] = None\n"
            "sys.argv = ['accelerator'] + sys.argv[1:]\n"
            "runpy.run_module('dense_cf.bench.accelerator', run_name='__main__')\n")
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=child_pythonpath(ROOT),
               XLA_FLAGS=xla_flags(2))
    p = subprocess.run([sys.executable, "-c", code, "--shapes=small", "--steps=1", "--warmup=1",
                        "--export_batches=1", "--matmul_peak=false", "--search_n=300",
                        "--search_queries=20", "--search_k=7", f"--out={out}"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    res = json.loads(out.read_text())
    assert res["inventory"]["device_count"] == 2 and res["inventory"]["devices"]
    tr, ex = res["train"], res["export"]
    for k in ("step_s_median", "questions_per_s", "passages_per_s", "flops_model",
              "achieved_flops_model", "flops_xla", "loss", "grad_norm"):
        assert _finite_positive(tr[k]), (k, tr[k])
    assert tr["passages"] == 3 * tr["questions"] and tr["grad_cache_chunks"] == 1
    assert tr["memory_analysis_bytes"]["total"] > 0
    for k in ("step_s_median", "passages_per_s", "flops_model", "encoder_passages_per_s"):
        assert _finite_positive(ex[k]), (k, ex[k])
    assert ex["embedding_finite"]
    assert tr["mfu"] is None and res["peak_bf16_flops_per_device"] is None  # CPU: no table entry
    se = res["search"]
    assert (se["n"], se["dim"], se["queries"], se["k"]) == (300, 32, 20, 7)
    assert [r["dtype"] for r in se["runs"]] == ["float32", "bfloat16"]
    for r in se["runs"]:
        assert r["devices"] == 2 and r["device_bytes"] == 2 * r["per_device"]["corpus_bytes"]
        for k in ("load_s", "compile_s", "search_s", "qps"):
            assert _finite_positive(r[k]), (k, r[k])
        assert 0.0 <= r["recall_at_k_vs_float32"] <= 1.0
    assert se["runs"][0]["recall_at_k_vs_float32"] == 1.0  # float32 is the reference
    assert "faiss is not importable" in se["peer"]["skipped"], se["peer"]
    assert "faiss flat peer skipped" in p.stdout
    assert res["sharding_check"]["ok"], res["sharding_check"]
    assert "train :" in p.stdout and "export:" in p.stdout


def test_host_init_equals_device_init():
    """The host-CPU init path (default on GPU/TPU) gives the same sharded params."""
    import jax
    import numpy as np

    setup = acc._Setup(acc.BenchOptions(shapes="small"))
    with setup.context():
        on_host = setup.init_params(host=True)
        on_device = setup.init_params(host=False)
    for a, b in zip(jax.tree.leaves(on_host), jax.tree.leaves(on_device)):
        assert a.sharding == b.sharding
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_search_with_faiss_peer():
    """With faiss importable the Flat peer runs on the same vectors and queries."""
    opts = acc.BenchOptions(shapes="small", search_n=256, search_queries=8, search_k=5)
    se = acc.bench_search(opts, 16)
    assert (se["n"], se["dim"], se["k"]) == (256, 16, 5)
    peer = se["peer"]
    assert peer["searcher"] == "faiss flat" and "skipped" not in peer
    assert _finite_positive(peer["qps"]) and _finite_positive(peer["search_s"])
    # Exact float32 both: the same top-5 up to float32 near-ties at the 5th place.
    assert peer["recall_at_k_vs_float32"] >= 0.9, peer
    assert "faiss flat (CPU)" in acc.search_summary(se)
