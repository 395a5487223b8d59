"""FiD benchmark: ``python -m dense_cf.bench.fid_step`` (prints numbers; no asserts).

Times, for a random T5 of a named size (no checkpoint needed), the jitted train step of the
``fid`` method as the training loop runs it (teacher-forced loss, dropout on, AdamW update) on a
random batch of ``global_batch`` questions × ``passages`` rows × ``max_len`` pieces with
``answer_len`` target pieces, and the greedy decoding ``predict`` runs on the same inputs
(``decode_len`` steps, every row forced to run them all: no early ``</s>``). Prints questions/s,
rows/s, encoder tokens/s, step and compile times, XLA's FLOP count of the step and the achieved
FLOP/s against this machine's matmul peak (``dense_cf.bench.peak``). Defaults are
``configs/fid_demo.py``'s shape (T5-small, 4 × 4 × 128); FiD-base is ``--size=base
--global_batch=64 --passages=100 --max_len=250`` (an accelerator's job).
"""

from __future__ import annotations

import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from dense_cf import app as _app
from dense_cf import methods
from dense_cf.bench.common import time_method_train_step
from dense_cf.bench.peak import measure_matmul_peak
from dense_cf.bench.rss import peak_rss_mb
from dense_cf.configs.presets import fid_demo_config
from dense_cf.models.fid import FiD, greedy_decode_scored
from dense_cf.models.t5 import T5Config
from dense_cf.parallel import mesh as mesh_lib

# HF's t5-small / t5-base (v1.0: ReLU, tied head).
SIZES = {"small": dict(d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8),
         "base": dict(d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12)}

FLAGS = flags.FlagValues()  # its own: tests import several benchmarks in one process
_SIZE = flags.DEFINE_enum("size", "small", sorted(SIZES), "T5 size (random weights).", flag_values=FLAGS)
_BATCH = flags.DEFINE_integer("global_batch", 4, "Questions per global batch.", flag_values=FLAGS)
_PASSAGES = flags.DEFINE_integer("passages", 4, "Passages read per question.", flag_values=FLAGS)
_LEN = flags.DEFINE_integer("max_len", 128, "Encoder row length in pieces.", flag_values=FLAGS)
_ANSWER = flags.DEFINE_integer("answer_len", 16, "Target pieces in training.", flag_values=FLAGS)
_DECODE = flags.DEFINE_integer("decode_len", 16, "Greedy decoding steps.", flag_values=FLAGS)
_STEPS = flags.DEFINE_integer("steps", 5, "Timed steps (and decodes).", flag_values=FLAGS)
_DTYPE = flags.DEFINE_string("dtype", "float32", "Compute dtype.", flag_values=FLAGS)
_JSON = flags.DEFINE_string("json_out", "", "Also write the figures to this JSON file.", flag_values=FLAGS)


def main(argv) -> None:
    del argv
    cfg = fid_demo_config()
    b, n, length, t = _BATCH.value, _PASSAGES.value, _LEN.value, _ANSWER.value
    cfg.fid.n_passages, cfg.fid.max_len, cfg.fid.max_answer_len = n, length, t
    model = FiD(T5Config(vocab_size=32128, dtype=_DTYPE.value, dropout_rate=0.1, **SIZES[_SIZE.value]))
    method = methods.get("fid")
    mesh = mesh_lib.make_mesh(-1, 1)
    rules = method.model.axis_rules(model, 1)
    r = np.random.default_rng(0)
    ids = r.integers(3, 32000, size=(b, n, length)).astype(np.int32)
    labels = r.integers(3, 32000, size=(b, t)).astype(np.int32)
    labels[:, -1] = 1
    batch = {"input_ids": ids, "attention_mask": np.ones_like(ids), "labels": labels}
    state, m, compile_s, xla_flops, times = time_method_train_step(cfg, method, model, None, batch,
                                                                   mesh, rules, _STEPS.value)
    with jax.set_mesh(mesh):
        gbatch = mesh_lib.global_batch(batch, mesh)
        # eos_id -1: no row ever ends early, so each decode runs decode_len steps.
        decode = lambda: greedy_decode_scored(model, state.params, gbatch["input_ids"],  # noqa: E731
                                              gbatch["attention_mask"], max_length=_DECODE.value, eos_id=-1)
        t0 = time.perf_counter()
        jax.block_until_ready(decode())
        decode_compile_s = time.perf_counter() - t0
        decode_times = []
        for _ in range(_STEPS.value):
            t0 = time.perf_counter()
            jax.block_until_ready(decode())
            decode_times.append(time.perf_counter() - t0)
    step_s, dec_s = statistics.median(times), statistics.median(decode_times)
    peak = measure_matmul_peak(dtype=jnp.float32 if _DTYPE.value == "float32" else jnp.bfloat16)
    out = {
        "size": _SIZE.value, "devices": jax.device_count(), "global_batch": b, "passages": n,
        "max_len": length, "answer_len": t, "decode_len": _DECODE.value, "dtype": _DTYPE.value,
        "compile_s": round(compile_s, 2), "step_time_s_median": round(step_s, 4),
        "step_time_s_min": round(min(times), 4), "train_questions_per_s": round(b / step_s, 2),
        "train_rows_per_s": round(b * n / step_s, 2),
        "train_encoder_tokens_per_s": round(b * n * length / step_s, 1),
        "flops_per_step_xla": xla_flops,
        "achieved_gflops": round(xla_flops / step_s / 1e9, 2) if xla_flops else None,
        "matmul_peak_gflops": round(peak / 1e9, 2),
        "flop_utilisation": round(xla_flops / step_s / peak, 4) if xla_flops else None,
        "decode_compile_s": round(decode_compile_s, 2), "decode_time_s_median": round(dec_s, 4),
        "decode_questions_per_s": round(b / dec_s, 2),
        "peak_rss_mb": peak_rss_mb(),
        "loss": float(m["loss"]),
    }
    for k, v in out.items():
        print(f"{k:>28}: {v}")
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
