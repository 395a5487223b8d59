"""The training loop's step on a run's own batches, padded against packed
(``data.pack_row_len``), alternating in one command:

    python -m dense_cf.bench.packed_step --method=picl --row_lens=96,160,288 --rounds=8

The config is the demo's (``presets.demo_config(--method)``: MiniLM, B 16, Lq 32 / Lp 96; its
synthetic world is generated into ``--data_dir`` if absent), ``--max_q_len`` / ``--max_p_len`` /
``--global_batch`` / ``--model`` override it. ``--rounds`` batches come from the method's own
input pipeline (Grain); every round runs each variant's jitted train step (``train.step``,
dropout on, the loop's optimizer) on that round's batch, in an order rotated per round. A
variant is the loop's own packer (``train.loop.sequence_packer``) at one row length, or none
(padded). The host-side packing is timed apart. A step whose batch shape is new compiles; it is
reported and not timed (a row count rounds up to ``--rows_multiple``, so a few shapes recur).

Prints per variant: the median step, its speed-up over padded, the share of token slots packing
removed, the packing's host time and the number of compiled shapes. The CPU is named.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from typing import Any

import jax
import numpy as np
from absl import flags
from flax import linen as nn

from dense_cf import app as _app
from dense_cf.bench.common import cpu_description
from dense_cf.configs.presets import demo_config
from dense_cf.experiment import maybe_generate_synthetic
from dense_cf.inputs.source import GrainOptions
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.train import loop
from dense_cf.train.run import axis_rules, build_model, init_state, method_of, run_tokenizer
from dense_cf.train.state import make_optimizer
from dense_cf.train.step import jit_train_step

FLAGS = flags.FlagValues()
_METHOD = flags.DEFINE_string("method", "picl", "The demo config's method.", flag_values=FLAGS)
_DATA = flags.DEFINE_string("data_dir", "", "The synthetic world ('' = a temporary one).",
                            flag_values=FLAGS)
_MODEL = flags.DEFINE_string("model", "", "model.name_or_path ('' = the demo's MiniLM).",
                             flag_values=FLAGS)
_LQ = flags.DEFINE_integer("max_q_len", 0, "data.max_q_len (0 = the demo's).", flag_values=FLAGS)
_LP = flags.DEFINE_integer("max_p_len", 0, "data.max_p_len (0 = the demo's).", flag_values=FLAGS)
_BATCH = flags.DEFINE_integer("global_batch", 0, "train.global_batch (0 = the demo's).",
                              flag_values=FLAGS)
_ROWS = flags.DEFINE_list("row_lens", ["96", "160", "288"], "data.pack_row_len of each packed "
                          "variant.", flag_values=FLAGS)
_MULTIPLE = flags.DEFINE_integer("rows_multiple", 2, "data.pack_rows_multiple.", flag_values=FLAGS)
_ROUNDS = flags.DEFINE_integer("rounds", 8, "Timed rounds (one batch each).", flag_values=FLAGS)


def config_for(method: str, data_dir: str, *, model: str = "", max_q_len: int = 0,
               max_p_len: int = 0, global_batch: int = 0):
    """The demo's config of ``method`` with the benchmark's overrides."""
    cfg = demo_config(method)
    cfg.data.data_dir = data_dir
    if model:
        cfg.model.name_or_path = model
    cfg.data.max_q_len = max_q_len or cfg.data.max_q_len
    cfg.data.max_p_len = max_p_len or cfg.data.max_p_len
    cfg.train.global_batch = global_batch or cfg.train.global_batch
    return cfg


def measure(cfg, row_lens: list[int], rows_multiple: int, rounds: int) -> dict[str, Any]:
    """Each variant's step times over the same ``rounds`` batches (module docstring)."""
    maybe_generate_synthetic(cfg)
    method = method_of(cfg)
    mesh = mesh_lib.make_mesh(1, 1)  # one device: the CPU backend uses every core on one
    model, hf_params, tok_dir = build_model(cfg, method=method)
    rules = axis_rules(cfg, model, mesh, method=method)
    tok = run_tokenizer(cfg, tok_dir, method=method)
    data = method.inputs.prepare(cfg, tok, method.inputs.load(cfg, tok, "train_file", 0))
    spec = loop.batch_spec(cfg, tok, method=method)
    it = method.inputs.batch_iterator(data, spec, process_index=0, process_count=1,
                                      pipeline="grain", grain_options=GrainOptions(2, 2))
    batches = [next(it) for _ in range(rounds)]
    variants = {"padded": None}
    for r in row_lens:
        c = cfg.copy_and_resolve_references()
        c.data.pack_row_len, c.data.pack_rows_multiple = int(r), int(rows_multiple)
        variants[f"packed {r}"] = loop.sequence_packer(method, c, mesh)
    tx, schedule = make_optimizer(cfg.optim, 1000)
    names = list(variants)
    out = {k: {"step_s": [], "host_s": [], "removed": [], "shapes": set(), "compile_s": []}
           for k in names}
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        state = init_state(cfg, model, hf_params, tx, mesh, rules, jax.random.key(0), method=method)
        step = jit_train_step(method, model, tx, state, mesh, schedule=schedule,
                              loss_hparams=method.loss_hparams(cfg.loss))
        rng = jax.random.key(1)
        for i, batch in enumerate(batches):
            for k in names[i % len(names):] + names[:i % len(names)]:
                t0 = time.perf_counter()
                b, removed = (batch, 0.0) if variants[k] is None else variants[k](batch)
                host = time.perf_counter() - t0
                shape = loop.batch_shape_key(b)
                t0 = time.perf_counter()
                state, m = step(state, mesh_lib.global_batch(b, mesh), rng)
                jax.block_until_ready(m)
                dt = time.perf_counter() - t0
                rec = out[k]
                if shape in rec["shapes"]:
                    rec["step_s"].append(dt)
                    rec["host_s"].append(host)
                else:
                    rec["shapes"].add(shape)
                    rec["compile_s"].append(dt)
                    print(f"round {i}: {k} compiled a new shape in {dt:.1f} s (not timed)",
                          flush=True)
                rec["removed"].append(removed)
    base = statistics.median(out["padded"]["step_s"]) if out["padded"]["step_s"] else None
    summary = {}
    for k, rec in out.items():
        med = statistics.median(rec["step_s"]) if rec["step_s"] else None
        summary[k] = {"median_step_s": med, "timed": len(rec["step_s"]),
                      "speedup": base / med if base and med else None,
                      "padding_removed": float(np.mean(rec["removed"])),
                      "host_ms": 1e3 * statistics.median(rec["host_s"]) if rec["host_s"] else None,
                      "shapes": len(rec["shapes"]), "compile_s": rec["compile_s"]}
    return summary


def main(argv) -> dict[str, Any]:
    del argv
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config_for(_METHOD.value, _DATA.value or tmp, model=_MODEL.value,
                         max_q_len=_LQ.value, max_p_len=_LP.value, global_batch=_BATCH.value)
        print(f"cpu: {cpu_description()}; method {_METHOD.value}, B {cfg.train.global_batch}, "
              f"Lq {cfg.data.max_q_len}, Lp {cfg.data.max_p_len}, model "
              f"{cfg.model.name_or_path}", flush=True)
        summary = measure(cfg, [int(r) for r in _ROWS.value], _MULTIPLE.value, _ROUNDS.value)
    print(f"{'variant':12s} {'step s':>8s} {'speed-up':>9s} {'timed':>6s} {'removed':>8s} "
          f"{'host ms':>8s} {'shapes':>7s}")
    for k, s in summary.items():
        med = f"{s['median_step_s']:.3f}" if s["median_step_s"] else "-"
        sp = f"{s['speedup']:.3f}x" if s["speedup"] else "-"
        host = f"{s['host_ms']:.1f}" if s["host_ms"] is not None else "-"
        print(f"{k:12s} {med:>8s} {sp:>9s} {s['timed']:>6d} {s['padding_removed']:>8.3f} "
              f"{host:>8s} {s['shapes']:>7d}")
    return summary


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
