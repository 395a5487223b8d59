"""tools/gpu/levers.sh on the CPU at tiny sizes (as tests/test_gpu_check.py does for check.sh),
so the one prepared device run cannot rot; plus the decision rules and the HLO classifier."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
from helpers import xla_flags

from dense_cf.bench import levers
from dense_cf.models.hf import resolve_model_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Every part, "step" (not in the script's default list) included: one script run for all.
PARTS = "layer,flags,hlo,attn,encode,pack,export_base,export,step,decide"


def test_levers_script_runs_every_part_on_the_cpu(tmp_path):
    """Every part, and the isolated step with levers (LEVERS_STEP_ARGS) among them."""
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), LEVERS_SIZE="tiny", LEVERS_WORK=str(tmp_path / "work"),
               LEVERS_CARRY=str(tmp_path / "no_carry"), JAX_PLATFORMS="cpu",
               XLA_FLAGS=xla_flags(1), PYTHON=sys.executable,
               LEVERS_PARTS=PARTS, LEVERS_VARIANTS="baseline,ln_remat,fused_qkv,remat_matmul_outputs",
               LEVERS_TOKENIZER=resolve_model_dir("minilm"),
               LEVERS_STEP_ARGS="--layer_norm_remat --fused_qkv --remat "
                                "--remat_policy=matmul_outputs")
    r = subprocess.run(["bash", "tools/gpu/levers.sh"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for part in PARTS.split(","):
        assert f"rc=0 ({part})" in r.stdout, r.stdout[-4000:]
    lines = [json.loads(ln) for ln in (out / "levers.jsonl").read_text().splitlines()]
    by = {}
    for ln in lines:
        by.setdefault(ln["part"], []).append(ln)
    layer = {x["variant"]: x for x in by["layer"] if not x.get("label")}
    assert set(layer) == {"baseline", "ln_remat", "fused_qkv", "remat_matmul_outputs"}
    assert all(x["ok"] and x["ms"] > 0 and x["mfu"] is None for x in layer.values())
    flags = {x["label"]: x for x in by["flags"]}
    assert flags["no_remat_pass"]["accepted"] and not flags["unknown_flag"]["accepted"]
    assert any(x.get("label") == "flag:no_remat_pass" for x in by["layer"])
    hlo = {x["cls"]: x for x in by["hlo"]}
    assert hlo["matmul"]["gflops"] > 0 and hlo["total"]["ms"] > 0 and hlo["optimizer"]["ms"] > 0
    assert sum(hlo[c]["share_est"] for c in levers.CLASSES) == pytest.approx(1, abs=1e-3)
    attn = {x["case"]: x for x in by["attn"]}
    assert attn["xla_mask"]["ok"] and not attn["cudnn_no_mask"]["ok"]
    assert len(by["encode"]) == len(levers.SHAPES["tiny"].encode)
    pack = {x["layout"]: x for x in by["pack"]}
    assert pack["packed"]["fill"] > pack["padded"]["fill"] and pack["packed"]["real_tokens_per_s"] > 0
    assert pack["compare"]["packed_vs_padded"] > 0
    exp, base = by["export"][0], by["export_base"][0]
    assert exp["passages"] == 64 and exp["shard_size"] == 32 and exp["token_table_equal"]
    assert exp["passages_per_s"] > 0 and exp["encode_only_passages_per_s"] > 0
    assert base["passages"] == 64 and not base["token_table"] and base["token_budget"] == 0
    assert exp["token_table"] and exp["token_budget"] == 1024 and exp["background_write"]
    assert by["decide"][0]["export_levers_speedup"] == pytest.approx(
        exp["passages_per_s"] / base["passages_per_s"])
    (step,) = by["step"]
    assert step["step_s_median"] > 0 and "--fused_qkv" in step["args"]
    assert by["decide"][0]["baseline_ms"] == layer["baseline"]["ms"]
    assert "ADOPT" in r.stdout or "keep " in r.stdout


def test_hlo_classifier_counts_the_layers_matmul_flops():
    shapes = levers.SHAPES["tiny"]
    cfg, policy = levers.layer_config(shapes, "baseline")
    step, params, x, rng = levers.layer_step(cfg, policy, shapes.rows, shapes.length)
    classes = levers.classify_hlo(step.lower(params, x, rng).compile().as_text())
    h, i, t = cfg.hidden_size, cfg.intermediate_size, shapes.rows * shapes.length
    # forward + backward of the six weight matmuls: 6·N·T, N = 4H² + 2HI
    assert classes["matmul"]["flops"] == 6 * (4 * h * h + 2 * h * i) * t
    assert classes["attention"]["flops"] == 12 * h * shapes.length ** 2 * shapes.rows
    assert classes["layernorm"]["ops"] > 0 and classes["dropout/rng"]["ops"] > 0


def _layer(variant, ms, label=""):
    return {"part": "layer", "ok": True, "variant": variant, "ms": ms,
            **({"label": label} if label else {})}


def test_decision_rules():
    lines = [_layer("baseline", 10.0), _layer("ln_remat", 9.4), _layer("fused_qkv", 9.6),
             _layer("gelu_new", 9.0), _layer("baseline", 9.6, "flag:cublaslt"),
             _layer("baseline", 9.8, "flag:no_triton_gemm"),
             _layer("gelu_new", 8.0, "flag:cublaslt"),
             {"part": "attn", "ok": True, "case": "cudnn_padding", "tflops": 120.0},
             {"part": "encode", "mfu": 0.41}]
    d = levers.decide(lines)
    v = {x["lever"]: x for x in d["verdicts"]}
    assert v["ln_remat"]["adopt"] and not v["fused_qkv"]["adopt"]  # 6 % vs 4 % (needs 5 %)
    assert v["gelu_new"]["adopt"] and v["gelu_new"]["needs"] == "CPU suite + demo metrics"
    assert v["flag:cublaslt baseline"]["adopt"] and not v["flag:no_triton_gemm baseline"]["adopt"]
    assert v["flag:cublaslt gelu_new"]["ref_ms"] == 9.0  # against gelu_new without the flag
    assert d["prioritise_packing_and_attention"] and d["export_device_goal_met"]
    assert d["export_levers_speedup"] is None and d["export_levers_adopt"] is None
    exp = {"part": "export", "passages_per_s": 1150.0, "token_table_equal": True}
    base = {"part": "export_base", "passages_per_s": 1000.0}
    d = levers.decide(lines + [exp, base])
    assert d["export_levers_speedup"] == pytest.approx(1.15) and d["export_levers_adopt"]
    assert not levers.decide(lines + [dict(exp, token_table_equal=False), base])["export_levers_adopt"]
    assert not levers.decide(lines + [dict(exp, passages_per_s=1050.0), base])["export_levers_adopt"]


GPU_HLO = """HloModule jit_loss, entry_computation_layout={(bf16[64,768]{1,0})->bf16[64,2304]{1,0}}

%fused_ln (param_0: f32[64,768]) -> bf16[64,768] {
  %param_0 = f32[64,768]{1,0} parameter(0)
  %r = f32[64]{0} reduce(%param_0, %c), dimensions={1}, to_apply=%add, metadata={op_name="jit(loss)/attention_norm/reduce_sum"}
  ROOT %cv = bf16[64,768]{1,0} convert(%param_0), metadata={op_name="jit(loss)/attention_norm/mul"}
}

ENTRY %main (p0: bf16[64,768], p1: bf16[768,2304], p2: f32[64,768]) -> bf16[64,2304] {
  %p0 = bf16[64,768]{1,0} parameter(0)
  %p1 = bf16[768,2304]{1,0} parameter(1)
  %p2 = f32[64,768]{1,0} parameter(2)
  %ln = bf16[64,768]{1,0} fusion(%p2), kind=kLoop, calls=%fused_ln, metadata={op_name="jit(loss)/attention_norm/mul"}
  %gemm = (bf16[64,2304]{1,0}, s8[1024]{0}) custom-call(%ln, %p1), custom_call_target="__cublas$gemm", backend_config={"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}}
  %fmha = (bf16[4,16,12,64]{3,2,1,0}, u8[0]{0}) custom-call(%p0, %p0, %p0), custom_call_target="__cudnn$fmhaSoftmax"
  ROOT %gte = bf16[64,2304]{1,0} get-tuple-element(%gemm), index=0
}
"""  # noqa: E501 - HLO lines as XLA prints them


def test_hlo_classifier_reads_cublas_and_cudnn_custom_calls():
    classes = levers.classify_hlo(GPU_HLO)
    assert classes["matmul"] == {"ops": 1, "flops": 2.0 * 64 * 2304 * 768,
                                 "bytes": (64 * 2304 * 2 + 1024) + 64 * 768 * 2 + 768 * 2304 * 2}
    assert classes["attention"]["ops"] == 1 and classes["attention"]["flops"] == 0
    assert classes["layernorm"]["ops"] == 1 and classes["layernorm"]["bytes"] == 64 * 768 * (2 + 4)


@pytest.mark.parametrize("variant", list(levers.LAYER_VARIANTS))
def test_every_layer_variant_traces_at_the_papers_shapes(variant):
    # Abstract evaluation (no compile, no memory): shape errors at BERT-base sizes show here,
    # not in the device run.
    shapes = levers.SHAPES["full"]
    cfg, policy = levers.layer_config(shapes, variant)
    params = jax.eval_shape(lambda: levers.layer_params(levers.layer_config(shapes, "baseline")[0]))
    x = jax.ShapeDtypeStruct((shapes.rows, shapes.length, cfg.hidden_size), jnp.bfloat16)
    loss = levers.layer_loss(cfg, policy, shapes.rows, shapes.length)
    value, (g_params, g_x) = jax.eval_shape(jax.value_and_grad(loss, argnums=(0, 1)), params, x,
                                            jax.random.key(0))
    assert value.shape == () and g_x.shape == x.shape
    assert jax.tree.structure(g_params) == jax.tree.structure(params)
