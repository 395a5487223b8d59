"""Matmuls whose operands are rounded to a narrower dtype while products accumulate in the
compute dtype: the TPU's default-precision scheme, made explicit (``BertConfig.matmul_dtype``).

Why explicit: XLA's CPU backend ignores ``precision=`` on float32 dots, and a bfloat16 × bfloat16
dot that *returns* bfloat16 runs no faster than float32 there. A bfloat16 × bfloat16 dot that
returns float32 (``preferred_element_type``) does: on a CPU with AVX512_BF16 (Zen 4, Sapphire
Rapids) it runs ~1.6x the float32 GEMM (docs/scale.md "bfloat16 operands on the CPU"). The
backward pass is written out (``jax.custom_vjp``) so that its two matmuls take the same fast
form: autodiff of the forward would pair the float32 cotangent with a bfloat16 operand and run
in float32.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

__all__ = ["mixed_einsum"]


def _check(spec: str) -> tuple[str, str, str]:
    ins, out = spec.split("->")
    a, b = ins.split(",")
    # Each operand's indices must appear in the other operand or the output, else its gradient
    # is not an einsum of the other two (an index summed away inside one operand).
    for name, own, other in (("first", a, b), ("second", b, a)):
        lost = set(own) - set(other) - set(out)
        if lost or len(set(own)) != len(own):
            raise ValueError(f"mixed_einsum({spec!r}): the {name} operand's indices must be distinct "
                             f"and appear in the other operand or the output")
    return a, b, out


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 3))
def mixed_einsum(spec: str, a: jax.Array, b: jax.Array, operand_dtype: jnp.dtype) -> jax.Array:
    """``einsum(spec, a, b)`` with both operands cast to ``operand_dtype`` and the products summed
    in ``a.dtype`` (``a`` and ``b`` share it); the gradients take the same form.

    ``spec`` is a two-operand einsum without ellipses in which every index of one operand also
    appears in the other operand or the output (every matmul in a transformer layer)."""
    _check(spec)
    return jnp.einsum(spec, a.astype(operand_dtype), b.astype(operand_dtype),
                      preferred_element_type=a.dtype)


def _fwd(spec, a, b, operand_dtype):
    _check(spec)
    ac, bc = a.astype(operand_dtype), b.astype(operand_dtype)
    # The narrow operands are the residuals: half the memory of float32 ones.
    return jnp.einsum(spec, ac, bc, preferred_element_type=a.dtype), (ac, bc)


def _bwd(spec, operand_dtype, res, g):
    ac, bc = res
    sa, sb, out = _check(spec)
    # The cotangent has the output's dtype, which is the operands' own (a.dtype == b.dtype).
    gc = g.astype(operand_dtype)
    da = jnp.einsum(f"{out},{sb}->{sa}", gc, bc, preferred_element_type=g.dtype)
    # Operand order as written: jaxlib 0.10's CPU dot thunk rejects some orders of the same
    # batched contraction (tests/test_matmul.py runs every one the model uses).
    db = jnp.einsum(f"{sa},{out}->{sb}", ac, gc, preferred_element_type=g.dtype)
    return da, db


mixed_einsum.defvjp(_fwd, _bwd)
