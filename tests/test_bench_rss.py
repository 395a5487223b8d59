"""dense_cf.bench.rss: the one peak-memory measurement of the benchmarks."""

import os
import subprocess
import sys

import numpy as np

from dense_cf.bench.rss import PeakRSS, peak_rss_bytes, peak_rss_mb, rss_bytes

MB = 2**20


def test_a_childs_peak_comes_from_its_wait4_usage():
    """The child touches 200 MiB and frees it; its lifetime peak covers them, this process's
    own peak is not what is reported."""
    code = "import numpy as np; a = np.ones(200 * 2**20, np.uint8); a.sum(); del a"
    proc = subprocess.Popen([sys.executable, "-c", code])
    _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert peak_rss_bytes(usage) >= 200 * MB
    assert peak_rss_mb(usage) == round(peak_rss_bytes(usage) / MB, 1)


def test_peak_over_a_block_sees_a_freed_allocation():
    with PeakRSS(interval=0.005) as mem:
        a = np.ones(300 * MB, np.uint8)
        a.sum()
        del a
    assert mem.peak - mem.base >= 250 * MB  # ru_maxrss catches it even between samples
    assert mem.peak_anon >= mem.base_anon
    assert 0 < rss_bytes() <= peak_rss_bytes()
