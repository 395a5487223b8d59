"""parallel.cpu_rng: the unrolled CPU lowering of threefry gives jax's own bits."""

import os
import subprocess
import sys

import jax
import numpy as np

from dense_cf.parallel import cpu_rng

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Bits and a dropout-style mask, small (rolled either way) and large (unrolled once applied).
_CODE = """
import hashlib, sys
import jax, numpy as np
if sys.argv[1] == "1":
    from dense_cf.parallel import cpu_rng
    assert cpu_rng.unroll_threefry_on_cpu()
key = jax.random.key(7)
h = hashlib.sha256()
for shape in ((1000,), (16, 96, 384)):
    f = jax.jit(lambda k: (jax.random.bits(k, shape), jax.random.bernoulli(k, 0.9, shape)))
    if sys.argv[1] == "1":
        hlo = f.lower(key).compile().as_text()
        assert ("while" in hlo) == (shape == (1000,)), (shape, "while" in hlo)
    for a in f(key):
        h.update(np.asarray(a).tobytes())
print(h.hexdigest())
"""


def _digest(apply: bool) -> str:
    env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu",
               DENSE_CF_THREEFRY="" if apply else "rolled")
    r = subprocess.run([sys.executable, "-c", _CODE, "1" if apply else "0"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip().splitlines()[-1]


def test_unrolled_threefry_gives_jaxs_bits_and_drops_the_loop_only_for_large_arrays():
    """Two fresh processes, jax's lowering and ours: the same bits and masks; in ours the
    large array's HLO has no while loop and the small one keeps it."""
    assert _digest(False) == _digest(True)


def test_on_unless_turned_off_and_idempotent(monkeypatch):
    """Registered unless DENSE_CF_THREEFRY=rolled (as set for this whole process), and a second
    call repeats the first whatever the variable says by then; the bits stay random."""
    wanted = os.environ.get("DENSE_CF_THREEFRY") != "rolled"
    first = cpu_rng.unroll_threefry_on_cpu()
    assert first is wanted
    monkeypatch.setenv("DENSE_CF_THREEFRY", "unrolled" if not wanted else "rolled")
    assert cpu_rng.unroll_threefry_on_cpu() is first
    a, b = (np.asarray(jax.random.bits(jax.random.key(k), (1 << 17,))) for k in (3, 4))
    assert a.dtype == np.uint32 and (a != b).mean() > 0.99  # distinct keys, distinct streams
