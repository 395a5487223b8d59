"""Peak resident memory of a benchmark: the one place that measures it (``ru_maxrss`` of this
process or of a waited-for child, and a sampling thread for the peak over a code block)."""

from __future__ import annotations

import resource
import threading
from typing import Any

import psutil

__all__ = ["PeakRSS", "peak_rss_bytes", "peak_rss_mb", "rss_anon", "rss_bytes"]


def peak_rss_bytes(usage: resource.struct_rusage | None = None) -> int:
    """Lifetime peak RSS in bytes: of this process, or of the child whose ``usage``
    (``os.wait4``) is given. Linux reports ``ru_maxrss`` in KiB."""
    usage = usage or resource.getrusage(resource.RUSAGE_SELF)
    return int(usage.ru_maxrss) * 1024


def peak_rss_mb(usage: resource.struct_rusage | None = None) -> float:
    """:func:`peak_rss_bytes` in MiB, rounded to 0.1 (the benchmarks' JSON field)."""
    return round(peak_rss_bytes(usage) / 2**20, 1)


def rss_bytes() -> int:
    """Resident bytes of this process now."""
    return int(psutil.Process().memory_info().rss)


def rss_anon() -> int:
    """Anonymous resident bytes of this process (``RssAnon`` in /proc/self/status): RSS without
    the file pages of memory maps, which are page cache the kernel may drop. 0 off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class PeakRSS:
    """Max RSS (and max anonymous RSS, :func:`rss_anon`) of this process while active, sampled
    by a thread (psutil)."""

    def __init__(self, interval: float = 0.02):
        self._proc = psutil.Process()
        self.base = self._proc.memory_info().rss
        self.peak = self.base
        self.base_anon = self.peak_anon = rss_anon()
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.peak = max(self.peak, self._proc.memory_info().rss)
            self.peak_anon = max(self.peak_anon, rss_anon())

    def __enter__(self) -> "PeakRSS":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)
        self.peak_anon = max(self.peak_anon, rss_anon())
        # ru_maxrss (KiB on Linux) catches spikes between samples; it is a lifetime maximum.
        self.peak = max(self.peak, peak_rss_bytes())
