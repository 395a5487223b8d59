"""Progress lines for long jobs: count/total, rate, elapsed time and ETA on absl logging.

One helper for every long loop (training, export, index build, AAR, robustness, mining,
evidence annotation, synthetic generation, downloads), so that their lines read alike::

    export passages: 120,000/21,015,324 passages (0.6%), 1,204 passages/s, elapsed 1m40s, ETA 4h49m

:class:`Progress` logs when ``every_s`` seconds have passed since its last line (and, if given,
every ``every_n`` items); :func:`timed` brackets one silent step (a compile, an index build)
with a start line and a "done in" line. Progress is logging only: nothing here changes what a
job computes or writes. This module imports nothing from dense_cf (it sits at the bottom of
the layering, docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Callable, Iterator

from absl import logging

# Seconds between time-based lines when a caller does not choose. Read when a Progress is made,
# so tests (and impatient users) can lower it for every job at once.
DEFAULT_EVERY_S = 15.0


def format_duration(seconds: float | None) -> str:
    """``4.2s``, ``42s``, ``3m07s``, ``2h05m``, ``3d04h``; ``?`` for None, negative or infinite."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "?"
    if seconds < 10:
        return f"{seconds:.1f}s"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def format_count(n: float) -> str:
    """Integers with thousands separators; fractions (e.g. rates) with about 3 significant digits."""
    if n == int(n) and abs(n) >= 1 or n == 0:
        return f"{int(n):,}"
    a = abs(n)
    if a >= 100:
        return f"{n:,.0f}"
    if a >= 10:
        return f"{n:.1f}"
    return f"{n:.2f}" if a >= 0.01 else f"{n:.2g}"


def format_line(label: str, count: float, total: float | None, *, unit: str = "items",
                rate: float | None, elapsed: float, eta: float | None = None,
                fmt: Callable[[float], str] | None = None, detail: str = "") -> str:
    """One progress line. With ``fmt`` (e.g. a bytes formatter) quantities carry their own unit.

    ``label: 1,200/10,000 items (12.0%), 40.0 items/s, elapsed 30s, ETA 3m40s[, detail]``; the
    ETA (and the percentage) only when ``total`` is known, the rate ``?`` while unknown.
    """
    def q(x: float) -> str:
        return fmt(x) if fmt is not None else format_count(x)

    suffix = "" if fmt is not None else f" {unit}"
    if total is not None:
        pct = 100.0 * count / total if total else 100.0
        head = f"{label}: {q(count)}/{q(total)}{suffix} ({pct:.1f}%)"
    else:
        head = f"{label}: {q(count)}{suffix}"
    parts = [head, f"{q(rate) if rate is not None else '?'}{suffix}/s", f"elapsed {format_duration(elapsed)}"]
    if total is not None:
        parts.append(f"ETA {format_duration(eta)}")
    if detail:
        parts.append(detail)
    return ", ".join(parts)


class Progress:
    """Counts a loop's items and logs :func:`format_line` lines at a steady cadence.

    A line is logged by :meth:`update` / :meth:`set` when ``every_s`` seconds have passed since
    the previous line, or when the count crossed a multiple of ``every_n``. The rate counts only
    items done since the start or since :meth:`restart_rate` (so resumed work, ``start`` and
    :meth:`skip`, and a first compiling step do not inflate it); elapsed time counts from
    construction. ``detail`` returns extra text for each line. ``enabled=False`` keeps the
    counts but logs nothing (e.g. on non-zero hosts). Usable as a context manager: a clean exit
    calls :meth:`done`.
    """

    def __init__(self, label: str, total: float | None = None, *, unit: str = "items",
                 every_s: float | None = None, every_n: int | None = None, start: float = 0,
                 fmt: Callable[[float], str] | None = None, detail: Callable[[], str] | None = None,
                 enabled: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.every_s = DEFAULT_EVERY_S if every_s is None else float(every_s)
        self.every_n = every_n
        self.fmt, self.detail, self.enabled, self.clock = fmt, detail, enabled, clock
        self.count = start
        self.t0 = self.t_line = clock()
        self._rate_t0, self._rate_n0 = self.t0, start

    # -- counting ------------------------------------------------------------------------------

    def update(self, n: float = 1, *, log: bool = True) -> bool:
        """Adds ``n`` done items; returns whether a line was logged."""
        return self.set(self.count + n, log=log)

    def set(self, count: float, *, log: bool = True) -> bool:
        """Sets the done count; returns whether a line was logged (``log=False``: never)."""
        before, self.count = self.count, count
        if not log:
            return False
        now = self.clock()
        due = now - self.t_line >= self.every_s
        if self.every_n and int(count // self.every_n) > int(before // self.every_n):
            due = True
        if due:
            self.log(now)
        return due

    def skip(self, n: float) -> None:
        """Counts ``n`` items that cost nothing (resumed or reused): in the count, not the rate."""
        self.count += n
        self._rate_n0 += n

    def restart_rate(self) -> None:
        """Measures the rate from now on (e.g. after a first step that compiled)."""
        self._rate_t0, self._rate_n0 = self.clock(), self.count

    def mark_logged(self) -> None:
        """Restarts the time cadence, for callers that just logged their own line."""
        self.t_line = self.clock()

    # -- reading -------------------------------------------------------------------------------

    def elapsed(self, now: float | None = None) -> float:
        return (self.clock() if now is None else now) - self.t0

    def rate(self, now: float | None = None) -> float | None:
        """Items per second since the rate started; None before any item or time."""
        now = self.clock() if now is None else now
        dt, dn = now - self._rate_t0, self.count - self._rate_n0
        return dn / dt if dt > 0 and dn > 0 else None

    def eta(self, now: float | None = None) -> float | None:
        """Seconds left at the current rate; None without a total or a rate."""
        rate = self.rate(now)
        if self.total is None or rate is None:
            return None
        return max(self.total - self.count, 0) / rate

    def line(self, now: float | None = None) -> str:
        now = self.clock() if now is None else now
        return format_line(self.label, self.count, self.total, unit=self.unit, rate=self.rate(now),
                           elapsed=self.elapsed(now), eta=self.eta(now), fmt=self.fmt,
                           detail=self.detail() if self.detail else "")

    def stats(self) -> str:
        """``rate, elapsed, ETA`` alone, for a caller's own line (the training console)."""
        now = self.clock()
        rate, suffix = self.rate(now), "" if self.fmt else f" {self.unit}"
        q = self.fmt or format_count
        out = f"{q(rate) if rate is not None else '?'}{suffix}/s, elapsed {format_duration(self.elapsed(now))}"
        return out + (f", ETA {format_duration(self.eta(now))}" if self.total is not None else "")

    # -- logging -------------------------------------------------------------------------------

    def log(self, now: float | None = None) -> None:
        """Logs the current line now, whatever the cadence."""
        now = self.clock() if now is None else now
        self.t_line = now
        if self.enabled:
            logging.info("%s", self.line(now))

    def done(self) -> None:
        """Logs the final line: count, total elapsed time and mean rate."""
        if not self.enabled:
            return
        now = self.clock()
        q, suffix = self.fmt or format_count, "" if self.fmt else f" {self.unit}"
        rate = self.rate(now)
        detail = self.detail() if self.detail else ""
        logging.info("%s: done, %s%s in %s (%s%s/s)%s", self.label, q(self.count), suffix,
                     format_duration(self.elapsed(now)), q(rate) if rate is not None else "?",
                     suffix, f", {detail}" if detail else "")

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.done()


class Timer:
    """What :func:`timed` yields: ``seconds`` is set when the block ends."""

    seconds: float | None = None


@contextlib.contextmanager
def timed(label: str, done_label: str | None = None, *, enabled: bool = True,
          clock: Callable[[], float] = time.monotonic) -> Iterator[Timer]:
    """Logs ``label…`` now and ``<done_label or label + ' done'> in <duration>`` at the end.

    For one step with no count to report (a compile, a bm25s index call), so the log shows
    the job is busy rather than hung, and how long the step took.
    """
    if enabled:
        logging.info("%s…", label)
    timer = Timer()
    t0 = clock()
    yield timer
    timer.seconds = clock() - t0
    if enabled:
        logging.info("%s in %s", done_label or f"{label} done", format_duration(timer.seconds))
