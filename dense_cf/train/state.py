"""Train state and optimizer (docs/method.md §9: Adam, lr 2e-5, eps 1e-8, warm-up then linear decay, clip 2.0)."""

from __future__ import annotations

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
    """AdamW with global-norm clipping; ``cfg`` is the ``optim`` ConfigDict."""
    schedule = make_schedule(cfg.learning_rate, cfg.warmup_steps, total_steps, cfg.get("decay", "linear"))
    tx = optax.chain(
        optax.clip_by_global_norm(cfg.grad_clip),
        optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay))
    return tx, schedule
