"""Field checks that name the field, the value and what is allowed (``train.validate``, and the
methods checking their own config blocks). Each appends one message to ``out``."""

from __future__ import annotations

import difflib
from typing import Any, Iterable

__all__ = ["enum", "number"]


def enum(out: list[str], field: str, value: Any, allowed: Iterable[str]) -> None:
    """``value`` must be one of ``allowed`` (with a "did you mean" for a near miss)."""
    allowed = tuple(allowed)
    if value not in allowed:
        close = difflib.get_close_matches(str(value), allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        out.append(f"config.{field}={value!r} is not one of {', '.join(allowed)}{hint}")


def number(out: list[str], field: str, value: Any, lo: float | None = None, hi: float | None = None,
           *, lo_open: bool = False, hi_open: bool = False) -> None:
    """``value`` must be a number (not a bool) within the bounds."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and lo is not None:
        ok = value > lo if lo_open else value >= lo
    if ok and hi is not None:
        ok = value < hi if hi_open else value <= hi
    if not ok:
        lo_s = "" if lo is None else f"{'>' if lo_open else '>='} {lo}"
        hi_s = "" if hi is None else f"{'<' if hi_open else '<='} {hi}"
        out.append(f"config.{field}={value!r} must be a number {' and '.join(s for s in (lo_s, hi_s) if s)}")
