"""Train state and optimizer (docs/method.md §9: Adam, lr 2e-5, eps 1e-8, warm-up then linear decay, clip 2.0)."""

from __future__ import annotations

import functools
from typing import Any

import jax
import optax
from flax import struct


class TrainState(struct.PyTreeNode):
    step: jax.Array
    params: Any
    opt_state: Any


def make_schedule(lr: float, warmup_steps: int, total_steps: int, decay: str = "linear") -> optax.Schedule:
    """Linear warm-up to ``lr`` then linear decay to 0 at ``total_steps`` (DPR's schedule), or,
    with ``decay="constant"``, ``lr`` after the warm-up (FiD's, docs/readers.md)."""
    if decay not in ("linear", "constant"):
        raise ValueError(f"optim.decay must be 'linear' or 'constant', got {decay!r}")
    warmup_steps = max(0, min(warmup_steps, total_steps))
    after = (optax.constant_schedule(lr) if decay == "constant"
             else optax.linear_schedule(lr, 0.0, max(total_steps - warmup_steps, 1)))
    return optax.join_schedules([optax.linear_schedule(0.0, lr, max(warmup_steps, 1)), after],
                                boundaries=[warmup_steps])


def make_optimizer(cfg, total_steps: int) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """AdamW with global-norm clipping; ``cfg`` is the ``optim`` ConfigDict.

    Equal settings give the same objects (cached by value), so the train steps jitted over
    them are shared by the runs of one process (``train.step.jit_train_step``)."""
    return _optimizer(float(cfg.learning_rate), int(cfg.warmup_steps), int(total_steps),
                      str(cfg.get("decay", "linear")), float(cfg.grad_clip), float(cfg.b1),
                      float(cfg.b2), float(cfg.eps), float(cfg.weight_decay))


@functools.lru_cache(maxsize=32)
def _optimizer(lr: float, warmup_steps: int, total_steps: int, decay: str, grad_clip: float,
               b1: float, b2: float, eps: float, weight_decay: float
               ) -> tuple[optax.GradientTransformation, optax.Schedule]:
    schedule = make_schedule(lr, warmup_steps, total_steps, decay)
    tx = optax.chain(optax.clip_by_global_norm(grad_clip),
                     optax.adamw(schedule, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay))
    return tx, schedule
