"""bench.peak: the matmul peak in each operand / sum dtype form (docs/scale.md "bfloat16 operands
on the CPU")."""

import contextlib
import io

import jax.numpy as jnp
import pytest

from dense_cf.bench import peak


@pytest.mark.parametrize("dtype,sum_dtype", [(jnp.float32, None), (jnp.bfloat16, None),
                                             (jnp.bfloat16, jnp.float32)])
def test_each_form_compiles_and_runs(dtype, sum_dtype):
    # bfloat16 x bfloat16 -> float32 is the form XLA's CPU dot thunk rejects for some layouts:
    # the probe must run it, not fail at dispatch.
    flops = peak.measure_matmul_peak(128, dtype, repeats=1, warmup=0, min_time=0.0,
                                     sum_dtype=sum_dtype)
    assert flops > 0 and flops == flops  # finite, positive


def test_cli_prints_both_bfloat16_forms():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        peak.main(["--n", "128", "--repeats", "1", "--bf16"])
    lines = [line.split(":")[0] for line in out.getvalue().splitlines()[1:]]
    assert lines == ["float32", "bfloat16 (bfloat16 sums)", "bfloat16 operands, float32 sums"]
