"""Wall time and peak RSS of ``train.run.load_run`` in a fresh process (issue 33 item 3).

    XLA_FLAGS=--xla_force_host_platform_device_count=1 JAX_PLATFORMS=cpu PYTHONPATH=ROOT \\
        python tools/measure_load_run.py ROOT RUN_DIR

``ROOT`` is the source tree to measure (a checkout of another commit for "before"); ``RUN_DIR``
a trained run (e.g. ``configs/demo.py`` with ``--config.train.num_steps=2``). Loads twice,
prints one JSON line: load times, peak RSS after each load, its increase over the process
before loading, the params' size and a sha256 over their paths and bytes (equal params give
equal hashes whichever tree loaded them).
"""

import hashlib
import json
import resource
import sys
import time

sys.path.insert(0, sys.argv[1])

import jax  # noqa: E402
import numpy as np  # noqa: E402

from dense_cf.train.run import load_run  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:")) / 1024


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


jax.devices()
base = max(rss_mib(), peak_mib())
out = {"root": sys.argv[1], "rss_before_mib": round(rss_mib(), 1)}
for i in range(2):
    t0 = time.perf_counter()
    run = load_run(sys.argv[2])
    jax.block_until_ready(run.params)
    out[f"load_s_{i}"] = round(time.perf_counter() - t0, 3)
    out[f"peak_rss_after_load_{i}_mib"] = round(peak_mib(), 1)
out["peak_increase_first_load_mib"] = round(out["peak_rss_after_load_0_mib"] - base, 1)
h = hashlib.sha256()
for path, x in jax.tree_util.tree_leaves_with_path(run.params):
    h.update(jax.tree_util.keystr(path).encode())
    h.update(np.asarray(x).tobytes())
out["params_mib"] = round(sum(x.nbytes for x in jax.tree.leaves(run.params)) / 2**20, 1)
out["params_sha256"] = h.hexdigest()[:16]
print(json.dumps(out))
