"""Train-step benchmark: ``python -m dense_cf.bench.train_step`` (prints numbers; no asserts).

Times the jitted, sharded train step used by the loop on the demo shapes with MiniLM, and
prints questions/s, passages/s, step time, compile time, peak RSS, the step's FLOPs (from XLA's
cost analysis, cross-checked with the 6·N·tokens estimate) and the achieved FLOP/s as a
fraction of this machine's measured matmul peak (``dense_cf.bench.peak``).
``--grad_cache_chunks`` / ``--remat`` / ``--dtype`` time the memory-saving variants.
"""

from __future__ import annotations

import json
import statistics

import jax
import jax.numpy as jnp
from absl import flags
from flax import linen as nn

from dense_cf import app as _app
from dense_cf.bench.common import batch_shapes, jitted_train_step, random_batch, time_train_step
from dense_cf.bench.peak import measure_matmul_peak
from dense_cf.bench.rss import peak_rss_mb
from dense_cf.configs.base import base_config
from dense_cf.methods.contrastive import PICL_LOSS
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.train import run as loop

FLAGS = flags.FlagValues()  # its own: tests import several benchmarks in one process
_MODEL = flags.DEFINE_string("model", "minilm", "Model name/dir, or 'tiny'.", flag_values=FLAGS)
_BATCH = flags.DEFINE_integer("global_batch", 16, "Questions per global batch.", flag_values=FLAGS)
_LQ = flags.DEFINE_integer("max_q_len", 32, "Question length.", flag_values=FLAGS)
_LP = flags.DEFINE_integer("max_p_len", 96, "Passage length.", flag_values=FLAGS)
_HARD = flags.DEFINE_integer("num_hard", 1, "Hard negatives per question.", flag_values=FLAGS)
_CF = flags.DEFINE_bool("counterfactual", True, "PiCL batch (one counterfactual per question).", flag_values=FLAGS)
_STEPS = flags.DEFINE_integer("steps", 8, "Timed steps.", flag_values=FLAGS)
_DTYPE = flags.DEFINE_string("dtype", "float32", "Compute dtype (bfloat16 is slow on this CPU).", flag_values=FLAGS)
_REMAT = flags.DEFINE_bool("remat", False, "Rematerialise encoder layers.", flag_values=FLAGS)
_REMAT_POLICY = flags.DEFINE_enum("remat_policy", "nothing_saveable",
                                  ["nothing_saveable", "dots_with_no_batch_dims_saveable",
                                   "dots_saveable"], "jax checkpoint policy of remat'ed layers.", flag_values=FLAGS)
_CHUNKS = flags.DEFINE_integer("grad_cache_chunks", 1, "GradCache chunks (1 = off).", flag_values=FLAGS)
_MESH_MODEL = flags.DEFINE_integer("mesh_model", 1, "Size of the 'model' mesh axis.", flag_values=FLAGS)
_JSON = flags.DEFINE_string("json_out", "", "Also write the figures to this JSON file.", flag_values=FLAGS)




def main(argv) -> None:
    del argv


    cfg = base_config()
    cfg.model.name_or_path = _MODEL.value
    cfg.model.dtype = _DTYPE.value
    cfg.model.remat = _REMAT.value
    cfg.data.max_q_len, cfg.data.max_p_len = _LQ.value, _LP.value
    cfg.data.num_hard = _HARD.value
    if _CF.value:
        cfg.loss.update(PICL_LOSS)
    b, h = _BATCH.value, _HARD.value

    mesh = mesh_lib.make_mesh(-1, _MESH_MODEL.value)
    cfg.train.grad_cache_chunks = _CHUNKS.value
    model, hf_params, _ = loop.build_model(cfg)
    if _REMAT.value:
        model = model.clone(config=model.config.replace(remat_policy=_REMAT_POLICY.value))
    batch = random_batch(batch_shapes(b, h, _LQ.value, _LP.value, _CF.value),
                         model.config.vocab_size)
    passages = b * (1 + h + int(_CF.value))
    step, state, rules = jitted_train_step(cfg, model, hf_params, mesh)

    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        gbatch = mesh_lib.global_batch(batch, mesh)
        state, m, compile_s, xla_flops, times = time_train_step(step, state, gbatch,
                                                                jax.random.key(1), _STEPS.value)
        if cfg.train.grad_cache_chunks > 1:
            xla_flops = None  # XLA counts a while-loop body once: use the estimate instead

    n_params = sum(x.size for x in jax.tree.leaves(state.params))
    tower = model.config
    emb = (tower.vocab_size + tower.max_position_embeddings + tower.type_vocab_size) * tower.hidden_size
    towers = 1 if model.shared else 2
    non_emb = n_params / towers - emb
    tokens = b * _LQ.value + passages * _LP.value
    # 6·N·T for the dense layers (fwd + bwd) plus attention scores/context: 12·L·T·Lseq·H;
    # GradCache adds one forward pass (2·N·T + 4·L·T·Lseq·H).
    passes = 4 if cfg.train.grad_cache_chunks > 1 else 3
    attn = 4 * passes * tower.num_layers * tower.hidden_size * (
        b * _LQ.value ** 2 + passages * _LP.value ** 2)
    est_flops = 2 * passes * non_emb * tokens + attn
    flops = xla_flops or est_flops
    step_s = statistics.median(times)
    peak = measure_matmul_peak(dtype=jnp.float32 if _DTYPE.value == "float32" else jnp.bfloat16)
    out = {
        "model": _MODEL.value, "devices": jax.device_count(), "mesh": dict(mesh.shape),
        "global_batch": b, "passages_per_step": passages, "max_q_len": _LQ.value,
        "max_p_len": _LP.value, "dtype": _DTYPE.value, "remat": _REMAT.value,
        "remat_policy": _REMAT_POLICY.value if _REMAT.value else None,
        "grad_cache_chunks": cfg.train.grad_cache_chunks,
        "compile_s": round(compile_s, 2), "step_time_s_median": round(step_s, 4),
        "step_time_s_min": round(min(times), 4),
        "questions_per_s": round(b / step_s, 2), "passages_per_s": round(passages / step_s, 2),
        "peak_rss_mb": peak_rss_mb(),
        "flops_per_step_xla": xla_flops, "flops_per_step_estimate": est_flops,
        "achieved_gflops": round(flops / step_s / 1e9, 2),
        "matmul_peak_gflops": round(peak / 1e9, 2),
        "flop_utilisation": round(flops / step_s / peak, 4),
        "loss": float(m["loss"]),
    }
    for k, v in out.items():
        print(f"{k:>26}: {v}")
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
