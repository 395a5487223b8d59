"""Jitted functions shared by value within a process (docs/ARCHITECTURE.md, "Compiles").

``jax.jit`` caches its traces and executables per function object. The training loop and the
evaluators build their functions per run (closures over the run's model, optimizer and mesh),
so a process that trains or evaluates several runs of one architecture (a study over seeds,
the test suite) traced and compiled the same program once per run. :func:`cached` keys the
jitted function on what it closes over instead, so such runs share one trace and one compile
per input shape.

A key also holds what the trace reads from its context rather than its arguments: flax's
logical axis rules and XLA's optimisation switch (``jax_disable_most_optimizations``, read at
compile time and not part of jit's own key).
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Hashable

import jax
from flax import linen as nn

__all__ = ["Identity", "cached", "clear", "shardings_key"]

MAX_ENTRIES = 32
_CACHE: collections.OrderedDict[tuple, Any] = collections.OrderedDict()
_LOCK = threading.Lock()


class Identity:
    """A key part that compares by object identity, for unhashable values (a method's registry
    entry holds dicts); it keeps the object alive so its id is not reused while cached."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Identity) and other.obj is self.obj


def shardings_key(tree: Any) -> Hashable:
    """A pytree of shardings (or None) as a hashable key: its structure and leaves."""
    return (jax.tree.structure(tree), tuple(jax.tree.leaves(tree)))


def _context() -> tuple:
    rules = nn.get_logical_axis_rules()
    return (tuple(tuple(r) for r in rules),
            bool(jax.config.read("jax_disable_most_optimizations")))


def cached(kind: str, key: tuple, build: Callable[[], Any]) -> Any:
    """``build()`` (a jitted function, or a tuple of them) for ``(kind, key)`` in the current
    context, built once and then returned again (least recently used dropped past
    ``MAX_ENTRIES``). ``key`` must name everything ``build`` closes over."""
    full = (kind, key, _context())
    with _LOCK:
        if full in _CACHE:
            _CACHE.move_to_end(full)
            return _CACHE[full]
    value = build()
    with _LOCK:
        _CACHE[full] = value
        _CACHE.move_to_end(full)
        while len(_CACHE) > MAX_ENTRIES:
            _CACHE.popitem(last=False)
    return value


def clear() -> None:
    """Drops every cached function (and the executables and arrays they hold)."""
    with _LOCK:
        _CACHE.clear()
