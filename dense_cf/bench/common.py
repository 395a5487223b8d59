"""Pieces shared by the benchmark commands: the training batch schema and a random batch."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


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
