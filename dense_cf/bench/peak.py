"""Measured matmul peak of the current default device (denominator for FLOP utilisation).

``measure_matmul_peak`` times a jitted square ``n x n @ n x n`` matmul (2 n^3 FLOPs): it warms
up (compile + first runs), then takes the best of ``repeats`` timings, each of ``inner``
back-to-back calls ended by ``block_until_ready``. ``inner`` is chosen so that one timing lasts at
least ``min_time`` seconds, which keeps dispatch overhead out of the number on fast devices.

    python -m dense_cf.bench.peak            # float32 GFLOP/s
    python -m dense_cf.bench.peak --bf16     # float32 and both bfloat16 forms

``--bf16`` times bfloat16 operands twice: with bfloat16 sums (what ``model.dtype=bfloat16``
computes) and with float32 sums (``preferred_element_type``; what ``model.matmul_dtype`` and a
bfloat16 ``jax_search`` corpus compute). On a CPU the two differ by ~2× (XLA's CPU library GEMM
with AVX512_BF16 takes only the second; docs/scale.md "bfloat16 operands on the CPU").

float32 uses jax's default matmul precision (on TPU that is bf16 passes, the same precision a
default-configured train step gets), so the number is the ceiling for the code as actually run.
Importing this module has no side effects (no device initialisation, no computation).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import jax
import jax.numpy as jnp


def matmul_flops(n: int) -> float:
    """FLOPs of one n x n by n x n matmul (a multiply-add counts as 2)."""
    return 2.0 * float(n) ** 3


def measure_matmul_peak(
    n: int = 2048,
    dtype: Any = None,
    repeats: int = 5,
    *,
    warmup: int = 2,
    min_time: float = 0.05,
    device: Any = None,
    seed: int = 0,
    sum_dtype: Any = None,
) -> float:
    """Best observed FLOP/s of a jitted square matmul of size ``n`` in ``dtype``.

    Args:
      n: matrix side.  dtype: jnp dtype of the operands (default float32).
      sum_dtype: dtype the products are summed in and returned (``preferred_element_type``;
        default ``dtype``).
      repeats: number of timed measurements; the best (fastest) one is reported.
      warmup: untimed calls after compilation.  min_time: minimum seconds per measurement.
      device: a jax.Device (default: jax's default device).  seed: RNG seed of the operands.

    Returns:
      FLOP/s as a float (2 n^3 / best seconds per matmul).
    """

    if n <= 0 or repeats <= 0:
        raise ValueError(f"n and repeats must be positive, got n={n}, repeats={repeats}")
    dtype = jnp.float32 if dtype is None else jnp.dtype(dtype)
    sum_dtype = dtype if sum_dtype is None else jnp.dtype(sum_dtype)
    device = device if device is not None else jax.devices()[0]

    ka, kb = jax.random.split(jax.random.PRNGKey(seed))
    a = jax.device_put(jax.random.normal(ka, (n, n), jnp.float32).astype(dtype), device)
    b = jax.device_put(jax.random.normal(kb, (n, n), jnp.float32).astype(dtype), device)
    # Divide to keep magnitudes bounded when outputs are chained; the scale is fused and its
    # n^2 cost is negligible next to the n^3 matmul.
    scale = jnp.asarray(1.0 / n, sum_dtype)

    @jax.jit
    def mm(x, y):
        return jnp.matmul(x, y, preferred_element_type=sum_dtype) * scale

    out = mm(a, b).block_until_ready()  # compile
    for _ in range(warmup):
        out = mm(a, b)
    out.block_until_ready()

    # Calibrate the number of back-to-back calls per timing.
    t0 = time.perf_counter()
    mm(a, b).block_until_ready()
    one = max(time.perf_counter() - t0, 1e-9)
    inner = max(1, int(min_time / one + 0.999))

    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            out = mm(a, b)
        out.block_until_ready()
        best = min(best, (time.perf_counter() - t0) / inner)
    return matmul_flops(n) / best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2048, help="matrix side (default 2048)")
    parser.add_argument("--repeats", type=int, default=5, help="timed measurements (best kept)")
    parser.add_argument("--bf16", action="store_true",
                        help="also measure bfloat16 operands, with bfloat16 and with float32 sums")
    args = parser.parse_args(argv)


    dev = jax.devices()[0]
    print(f"device: {dev.platform} {dev.device_kind} ({jax.device_count()} device(s)), n={args.n}")
    forms = [("float32", jnp.float32, None)]
    if args.bf16:
        forms += [("bfloat16 (bfloat16 sums)", jnp.bfloat16, None),
                  ("bfloat16 operands, float32 sums", jnp.bfloat16, jnp.float32)]
    for name, dt, acc in forms:
        flops = measure_matmul_peak(args.n, dt, args.repeats, sum_dtype=acc)
        print(f"{name}: {flops / 1e9:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
