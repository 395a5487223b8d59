"""XLA flags: probing whether this jaxlib accepts a flag, and the flags adopted per platform.

XLA aborts the whole process on a flag it does not know, and flags come and go between jaxlib
versions, so a flag is probed in a child process (a tiny jitted matmul) before it is set.
``XLA_FLAGS`` is read once, when the backend starts: adopted flags are set by the launcher
(``launch/slurm_gpu.sbatch`` runs ``python -m dense_cf.cli.xla_flags --platform=gpu``), never
from inside a running process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

# Adopted flags per platform, each with the measurement that adopted it (docs/results). The
# pre-registered rule (../shared/reviews/gpu-levers.md §6): an XLA flag is adopted when it makes
# the BERT-base layer's fwd+bwd >= 3 % faster, and a search flag when it is accepted and keeps
# the exact top-k's tie order (tests/test_jax_topk.py passed with it on the device).
ADOPTED: dict[str, tuple[tuple[str, str], ...]] = {
    "gpu": (
        ("--xla_gpu_experimental_enable_raft_for_stable_topk=true",
         "stable top-k through RAFT select_k: exact search 1M x 768 bf16, batch 4096, sort "
         "13,388 -> 84,436 q/s, bmc/128 50,011 -> 156,527 q/s; the top-k tests pass with it "
         "(H200, 2026-11-30, docs/results/gpu_levers_h200_2026-11-30.md)"),
        ("--xla_gpu_enable_triton_gemm=false",
         "cuBLAS instead of Triton GEMMs: BERT-base layer fwd+bwd 11.24 -> 10.84 ms (+3.5 %) "
         "(H200, 2026-11-30, same file)"),
    ),
}

_PROBE = ("import jax, jax.numpy as jnp\n"
          "x = jnp.arange(64 * 64, dtype=jnp.float32).reshape(64, 64) / 4096\n"
          "print(float(jax.jit(lambda a: (a @ a).sum())(x)))\n")


def env_with_xla_flags(xla_flags: str) -> dict[str, str]:
    """This process's environment with ``xla_flags`` appended to ``XLA_FLAGS`` (for a child)."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = " ".join(x for x in (env.get("XLA_FLAGS", ""), xla_flags) if x)
    return env


def probe(xla_flags: str, timeout: float = 300.0) -> tuple[bool, str]:
    """Whether XLA accepts ``xla_flags`` (a child process runs a tiny jitted matmul with them on
    the CPU): ``(accepted, the child's last line of error output when not)``."""
    if not xla_flags:
        return True, ""
    # XLA parses every flag, GPU ones too, whatever the backend: the child runs on the CPU so
    # that it never takes accelerator memory from (or waits for) a job beside it.
    env = {**env_with_xla_flags(xla_flags), "JAX_PLATFORMS": "cpu"}
    p = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True,
                       timeout=timeout)
    if p.returncode == 0:
        return True, ""
    lines = [x for x in p.stderr.strip().splitlines() if x.strip()]
    return False, (lines[-1] if lines else f"exit {p.returncode}")[:300]


def _name(flag: str) -> str:
    return flag.split("=", 1)[0]


def missing(platform: str) -> list[str]:
    """The platform's adopted flags that ``XLA_FLAGS`` does not name, whatever the value there
    (no probe: a running process can only say so, since XLA read its flags when the backend
    started)."""
    user = {_name(f) for f in os.environ.get("XLA_FLAGS", "").split()}
    return [f for f, _ in ADOPTED.get(platform, ()) if _name(f) not in user]


def adopted(platform: str, probe_fn: Callable[[str], tuple[bool, str]] | None = None
            ) -> tuple[list[str], list[tuple[str, str]]]:
    """The platform's adopted flags split into ``(accepted, [(rejected flag, why)])`` by
    ``probe_fn`` (default :func:`probe`). A platform with no entry has none. Flags already in
    ``XLA_FLAGS`` (by name, whatever their value) are left to the user's setting and not
    returned."""
    probe_fn = probe_fn or probe
    if platform not in ADOPTED and platform not in ("cpu", "tpu"):
        raise ValueError(f"unknown platform {platform!r}: one of cpu, gpu, tpu")
    ok, bad = [], []
    for flag in missing(platform):
        accepted, why = probe_fn(flag)
        (ok.append(flag) if accepted else bad.append((flag, why)))
    return ok, bad
