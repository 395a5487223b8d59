"""Reader train-step benchmark: ``python -m dense_cf.bench.reader_step`` (prints numbers; no asserts).

Times the jitted, sharded train step of the extractive reader (docs/readers.md) as the training
loop runs it, on a random batch of ``global_batch`` questions × ``passages`` rows × ``max_len``
word pieces, and prints questions/s, rows (question, passage) per second, tokens/s, step time,
compile time, peak RSS, the step's FLOPs (XLA's cost analysis; 6·N·tokens + attention as a
check) and the achieved FLOP/s against this machine's matmul peak (``dense_cf.bench.peak``).
Defaults are the demo's reader (MiniLM's first 3 layers, 4 × 4 × 128); DPR's NQ reader is
``--model=bert-base-uncased --num_layers=0 --global_batch=16 --passages=24 --max_len=350``.
"""

from __future__ import annotations

import json
import statistics

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from dense_cf import app as _app
from dense_cf import methods
from dense_cf.bench.common import time_method_train_step
from dense_cf.bench.peak import measure_matmul_peak
from dense_cf.bench.rss import peak_rss_mb
from dense_cf.configs.presets import reader_demo_config
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.train import run as run_lib

FLAGS = flags.FlagValues()  # its own: tests import several benchmarks in one process
_MODEL = flags.DEFINE_string("model", "minilm", "Model name/dir, or 'tiny'.", flag_values=FLAGS)
_LAYERS = flags.DEFINE_integer("num_layers", 3, "Encoder layers kept (0: all).", flag_values=FLAGS)
_BATCH = flags.DEFINE_integer("global_batch", 4, "Questions per global batch.", flag_values=FLAGS)
_PASSAGES = flags.DEFINE_integer("passages", 4, "Rows per question (1 positive + negatives).",
                                 flag_values=FLAGS)
_LEN = flags.DEFINE_integer("max_len", 128, "Row length in word pieces.", flag_values=FLAGS)
_STEPS = flags.DEFINE_integer("steps", 5, "Timed steps.", flag_values=FLAGS)
_DTYPE = flags.DEFINE_string("dtype", "float32", "Compute dtype.", flag_values=FLAGS)
_REMAT = flags.DEFINE_bool("remat", False, "Rematerialise encoder layers.", flag_values=FLAGS)
_MESH_MODEL = flags.DEFINE_integer("mesh_model", 1, "Size of the 'model' mesh axis.", flag_values=FLAGS)
_JSON = flags.DEFINE_string("json_out", "", "Also write the figures to this JSON file.", flag_values=FLAGS)


def random_reader_batch(b: int, p: int, length: int, vocab: int, q_len: int = 16,
                        seed: int = 0) -> dict[str, np.ndarray]:
    """Full-length reader rows (docs/readers.md batch layout) with random word pieces and one
    to three gold spans in each positive's text."""
    r = np.random.default_rng(seed)
    ids = r.integers(1000, vocab, size=(b, p, length)).astype(np.int32)
    types = np.zeros((b, p, length), np.int32)
    types[..., q_len:] = 1
    starts = r.integers(q_len, length - 12, size=(b, 10)).astype(np.int32)
    return {"ids": ids, "mask": np.ones_like(ids), "type_ids": types,
            "text_lo": np.full((b, p), q_len, np.int32), "text_hi": np.full((b, p), length - 1, np.int32),
            "passage_valid": np.ones((b, p), bool), "starts": starts,
            "ends": starts + r.integers(0, 10, size=(b, 10)).astype(np.int32),
            "span_valid": np.arange(10)[None, :] < r.integers(1, 4, size=(b, 1))}


def main(argv) -> None:
    del argv
    cfg = reader_demo_config()
    cfg.model.name_or_path = _MODEL.value
    cfg.model.dtype = _DTYPE.value
    cfg.model.remat = _REMAT.value
    cfg.reader.num_layers, cfg.reader.max_len = _LAYERS.value, _LEN.value
    cfg.reader.passages = _PASSAGES.value
    b, p, length = _BATCH.value, _PASSAGES.value, _LEN.value
    method = methods.get(cfg.method)
    mesh = mesh_lib.make_mesh(-1, _MESH_MODEL.value)
    model, params, _ = run_lib.build_model(cfg)
    rules = method.model.axis_rules(model, mesh.shape["model"])
    batch = random_reader_batch(b, p, length, model.config.vocab_size)
    state, m, compile_s, xla_flops, times = time_method_train_step(cfg, method, model, params, batch,
                                                                   mesh, rules, _STEPS.value)
    c = model.config
    enc = c.num_layers * (4 * c.hidden_size ** 2 + 2 * c.hidden_size * c.intermediate_size)
    rows, tokens = b * p, b * p * length
    est = 6 * enc * tokens + 12 * c.num_layers * rows * length ** 2 * c.hidden_size
    flops = xla_flops or est
    step_s = statistics.median(times)
    peak = measure_matmul_peak(dtype=jnp.float32 if _DTYPE.value == "float32" else jnp.bfloat16)
    out = {
        "model": _MODEL.value, "layers": c.num_layers, "hidden": c.hidden_size,
        "devices": jax.device_count(), "mesh": dict(mesh.shape), "global_batch": b,
        "passages": p, "max_len": length, "dtype": _DTYPE.value, "remat": _REMAT.value,
        "compile_s": round(compile_s, 2), "step_time_s_median": round(step_s, 4),
        "step_time_s_min": round(min(times), 4), "questions_per_s": round(b / step_s, 2),
        "rows_per_s": round(rows / step_s, 2), "tokens_per_s": round(tokens / step_s, 1),
        "peak_rss_mb": peak_rss_mb(),
        "flops_per_step_xla": xla_flops, "flops_per_step_estimate": est,
        "achieved_gflops": round(flops / step_s / 1e9, 2), "matmul_peak_gflops": round(peak / 1e9, 2),
        "flop_utilisation": round(flops / step_s / peak, 4), "loss": float(m["loss"]),
    }
    for k, v in out.items():
        print(f"{k:>26}: {v}")
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
