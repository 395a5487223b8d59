"""Multi-host helpers: one writer per shared file, and branches every host takes alike."""

from __future__ import annotations

from typing import Callable, TypeVar

import jax
import numpy as np
from jax.experimental import multihost_utils

T = TypeVar("T")

__all__ = ["host0_first", "host0_value", "is_host0"]


def is_host0() -> bool:
    return jax.process_index() == 0


def host0_value(value: bool) -> bool:
    """Host 0's ``value`` on every host (branches around collectives must agree)."""
    if jax.process_count() == 1:
        return value
    return bool(multihost_utils.broadcast_one_to_all(np.asarray(value)))


def host0_first(fn: Callable[[], T], name: str) -> T:
    """``fn()`` on host 0, a barrier, then ``fn()`` on the other hosts; returns its result.

    For idempotent cached files: on shared storage host 0 is the only writer and the others
    read what it wrote; on host-local disks every host writes its own copy.
    """
    if jax.process_count() == 1:
        return fn()
    out = fn() if jax.process_index() == 0 else None
    multihost_utils.sync_global_devices(f"dense_cf:{name}")
    return out if jax.process_index() == 0 else fn()
