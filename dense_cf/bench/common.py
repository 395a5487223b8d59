"""Pieces shared by the benchmark commands: the training batch schema, a random batch, the
loop's jitted train step and the timed loop around it."""

from __future__ import annotations

import os
import platform
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from dense_cf import methods
from dense_cf.models.bert import axis_rules_for
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.train import run as run_lib
from dense_cf.train.state import make_optimizer
from dense_cf.train.step import jit_train_step


def cpu_description() -> str:
    """``model name (family F, model M; AVX-512 yes|no; N CPUs)`` from /proc/cpuinfo: the
    model name alone ("AMD EPYC") does not tell a Zen 3 from a Zen 4."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() not in info:
                    info[key.strip()] = value.strip()
                if not line.strip() and info:
                    break  # the first processor's block is enough
    except OSError:
        pass
    name = info.get("model name") or platform.processor() or "unknown CPU"
    cpu_flags = set(info.get("flags", "").split())
    avx512 = "avx512f" in cpu_flags
    # bfloat16 dot products in hardware: what model.matmul_dtype="bfloat16" needs to run faster.
    bf16 = bool(cpu_flags & {"avx512_bf16", "amx_bf16"})
    return (f"{name} (family {info.get('cpu family', '?')}, model {info.get('model', '?')}; "
            f"AVX-512 {'yes' if avx512 else 'no'}; bf16 dot {'yes' if bf16 else 'no'}; "
            f"{os.cpu_count()} CPUs)")


def batch_shapes(b: int, h: int, lq: int, lp: int, cf: bool) -> dict[str, jax.ShapeDtypeStruct]:
    """Shapes of a DPR/PiCL training batch (docs/ARCHITECTURE.md "Batch layout")."""
    def i32(*s):
        return jax.ShapeDtypeStruct(s, jnp.int32)

    d = {"q_ids": i32(b, lq), "q_mask": i32(b, lq), "pos_ids": i32(b, lp), "pos_mask": i32(b, lp),
         "hard_ids": i32(b, h, lp), "hard_mask": i32(b, h, lp),
         "hard_valid": jax.ShapeDtypeStruct((b, h), bool)}
    if cf:
        d.update(cf_ids=i32(b, lp), cf_mask=i32(b, lp), cf_valid=jax.ShapeDtypeStruct((b,), bool))
    return d


def random_batch(shapes: dict[str, Any], vocab_size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Full-length inputs: random word pieces (ids >= 1000, past BERT's special/unused rows) in
    every ``*_ids`` field, all-ones masks and valid flags."""
    r = np.random.default_rng(seed)
    return {k: (r.integers(1000, vocab_size, size=v.shape).astype(np.int32)
                if k.endswith("_ids") else np.ones(v.shape, v.dtype))
            for k, v in shapes.items()}


def time_train_step(step: Callable, state: Any, batch: Any, rng: jax.Array, steps: int
                    ) -> tuple[Any, Any, float, float, list[float]]:
    """Compiles ``step`` (timed apart), runs one warm-up step, then ``steps`` timed steps, each
    blocked on its metrics. Returns (state, the last step's metrics, compile seconds, XLA's FLOP
    count of one step or 0 when it gives none, per-step seconds)."""
    t0 = time.perf_counter()
    compiled = step.lower(state, batch, rng).compile()
    compile_s = time.perf_counter() - t0
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    xla_flops = float(cost.get("flops", 0.0)) if cost else 0.0
    state, m = step(state, batch, rng)  # warm-up
    jax.block_until_ready(m)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        state, m = step(state, batch, rng)
        jax.block_until_ready(m)
        times.append(time.perf_counter() - t0)
    return state, m, compile_s, xla_flops, times


def time_method_train_step(config, method: Any, model: Any, params: Any, batch: dict[str, np.ndarray],
                           mesh: Any, rules: Any, steps: int) -> tuple[Any, Any, float, float, list[float]]:
    """A method's train step as the loop jits it (state sharded by ``rules`` on ``mesh``, batch
    split over ``data``, state donated), initialised from ``params`` (None: random), timed by
    :func:`time_train_step` on the host batch ``batch``. Returns what that returns."""
    tx, sched = make_optimizer(config.optim, total_steps=1000)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        state = run_lib.init_state(config, model, params, tx, mesh, rules, jax.random.key(0))
        step = jit_train_step(method, model, tx, state, mesh, loss_hparams={}, schedule=sched)
        return time_train_step(step, state, mesh_lib.global_batch(batch, mesh), jax.random.key(1), steps)


def jitted_train_step(cfg, model, hf_params, mesh, *, dropout: bool = True, total_steps: int = 1000
                      ) -> tuple[Callable, Any, Any]:
    """The train step as the loop jits it (sharded, donated state) for ``cfg`` on ``mesh``, and
    a fresh state from ``hf_params``: ``(step, state, logical axis rules)``. Call (and trace) the
    step inside ``jax.set_mesh(mesh)`` and ``nn.logical_axis_rules(rules)``."""
    rules = axis_rules_for(model.config, mesh.shape["model"])
    tx, sched = make_optimizer(cfg.optim, total_steps=total_steps)
    method = methods.get(cfg.method)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        state = run_lib.init_state(cfg, model, hf_params, tx, mesh, rules, jax.random.key(0))
    step = jit_train_step(method, model, tx, state, mesh,
                          loss_hparams=method.loss_hparams(cfg.loss), schedule=sched,
                          dropout=dropout, grad_cache_chunks=cfg.train.grad_cache_chunks)
    return step, state, rules
