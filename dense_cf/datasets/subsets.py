"""Nested uniform subsets of a file's valid records (the data-efficiency setting, docs/method.md §7).

Training (``config.data.train_fraction``) and the statistics job
(``dense_cf.mining.stats``) use the same subsets.
"""

from __future__ import annotations

import math

import numpy as np


def subset_count(n: int, fraction: float) -> int:
    """Records in a subset of ``fraction`` of ``n`` (round half up; at least 1 if f > 0)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if n == 0:
        return 0
    return max(1, min(n, int(math.floor(fraction * n + 0.5))))


def subset_mask(n: int, fraction: float, seed: int = 0) -> np.ndarray:
    """bool[n]: the uniform random subset of ``fraction`` of n records (nested in fraction).

    One permutation per (n, seed); fraction f takes its first :func:`subset_count` entries, so
    subsets of growing fractions are nested. fraction 1.0 selects everything.
    """
    k = subset_count(n, fraction)
    mask = np.zeros(n, dtype=bool)
    if k == n:
        mask[:] = True
        return mask
    perm = np.random.default_rng(np.random.SeedSequence([int(seed), 7013])).permutation(n)
    mask[perm[:k]] = True
    return mask
