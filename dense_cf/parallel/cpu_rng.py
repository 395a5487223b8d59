"""Dropout's random bits on the CPU: jax's threefry unrolled where the arrays are large.

On a CPU backend jax lowers ``threefry2x32`` (the hash behind ``jax.random.bits`` and so every
dropout mask) as a ``fori_loop`` of 5 iterations, to keep compiles short: each iteration runs
as its own set of kernels and writes both [n] uint32 halves back to memory. The unrolled form
(the one jax emits on every other backend) is the same 20 rounds with the same constants, so
its bits are identical, and XLA fuses it into one elementwise kernel per mask.

Measured (issue 46; the demo's PiCL step, MiniLM, B 16, Lq 32, Lp 96, float32, 2 Zen 5 cores,
per-op profile with ``--xla_cpu_enable_xprof_traceme``): dropout's bits and masks took 203 ms
of 1,290 thunk-ms per step rolled, ~130 unrolled; the whole step 1.06-1.14 s -> 0.99-1.03 s
with bit-identical losses and parameters, at +3 s of compile. Small arrays keep the rolled loop
(:data:`UNROLL_MIN_ELEMENTS`): there the compile would cost more than the step gains.

On by default; ``DENSE_CF_THREEFRY=rolled`` keeps jax's lowering. It was opt-in for a day
(30 Nov): after the demo reader's 300 steps the process sometimes stood ~40 s before the next
stage, more often with it on. gdb placed that wait in tf.data, not here: the training
iterator's destructor waiting on tf.data's autotuning thread (``Model::OptimizeLoop``), which
can sleep out its optimisation period (up to 60 s). :mod:`dense_cf.inputs.source` now runs
tf.data without that thread.

The rule is registered through jax's private lowering registry (``jax._src``): where this jax
lays it out differently, :func:`unroll_threefry_on_cpu` does nothing and says so once.
"""

from __future__ import annotations

import math
import os

from absl import logging

try:  # private: guarded, see the module docstring
    from jax._src.interpreters import mlir as _mlir
    try:
        from jax._src.random import threefry2x32 as _tf
    except ImportError:  # the older layout
        from jax._src import prng as _tf
    _RULES = (_tf.threefry2x32_p, _tf._threefry2x32_cpu_lowering_rule,
              _tf._threefry2x32_lowering_rule)
    _MISSING = ""
except (ImportError, AttributeError) as e:
    _RULES, _MISSING = None, str(e)

# Output elements from which the unrolled lowering is used (a [16, 96, 384] dropout mask is
# 589,824; the tests' tiny models stay below).
UNROLL_MIN_ELEMENTS = 1 << 16

_state: dict[str, bool] = {}


def unroll_threefry_on_cpu(min_elements: int = UNROLL_MIN_ELEMENTS) -> bool:
    """Registers the size-dependent CPU lowering of ``threefry2x32`` (once per process; later
    calls return the first outcome). True when registered. Affects only functions traced after
    the call; the bits are those of jax's own lowering either way."""
    if "applied" in _state:
        return _state["applied"]
    if os.environ.get("DENSE_CF_THREEFRY", "") == "rolled":  # the way out: jax's own lowering
        _state["applied"] = False
        return False
    if _RULES is None:
        logging.info("threefry: jax's private lowering rules are not where expected (%s); "
                     "the CPU keeps jax's rolled loop", _MISSING)
        _state["applied"] = False
        return False
    prim, rolled, unrolled = _RULES

    def rule(ctx, *args):
        size = math.prod(ctx.avals_out[0].shape)
        return (unrolled if size >= min_elements else rolled)(ctx, *args)

    _mlir.register_lowering(prim, rule, platform="cpu")
    _state["applied"] = True
    return True
