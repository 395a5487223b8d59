"""Two CPU processes as two hosts give the same training run as one process with all devices.

2 processes x 2 CPU devices (``--distributed=explicit`` on a free localhost port) and 1 process x
4 devices train the same tiny PiCL config for 3 steps on a (data=2, model=2) mesh, so the data
axis spans the hosts (in-batch negatives are gathered across processes) and every host feeds its
column of the global batch. Compared: the per-step losses, and the final parameters restored from
each run's checkpoint into this (single) process.
"""

import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest
from helpers import communicate_all, write_tower_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 3


def _gloo_available() -> bool:
    try:
        from jax._src.lib import _jax
        return hasattr(_jax, "make_gloo_tcp_collectives")
    except ImportError:
        return False


pytestmark = pytest.mark.skipif(
    not _gloo_available(), reason="this jaxlib has no gloo CPU collectives: multi-process CPU "
                                  "runs are impossible")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_OVERRIDES = {
    "model.name_or_path": "tiny", "model.tiny_layers": 1, "model.tiny_hidden": 32,
    "model.tiny_heads": 2, "data.train_file": "train.json", "data.dev_file": "",
    "data.max_q_len": 12, "data.max_p_len": 24, "train.global_batch": 8,
    "train.num_steps": STEPS, "train.log_every": 1, "train.checkpoint_every": STEPS,
    "train.eval_every": 0, "train.dropout": False, "optim.warmup_steps": 1,
    "optim.learning_rate": 1e-3, "mesh.data": 2, "mesh.model": 2}


def _cmd(workdir, data_dir, *extra):
    return [sys.executable, "-m", "dense_cf.main", "--config=configs/picl_nq.py",
            f"--workdir={workdir}", f"--config.data.data_dir={data_dir}",
            *[f"--config.{k}={v}" for k, v in _OVERRIDES.items()], *extra]


def _env(devices: int) -> dict:
    return dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
                JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2",
                JAX_COMPILATION_CACHE_DIR=os.path.join(ROOT, ".jax_cache"))


def _losses(workdir) -> dict[int, float]:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    return {rec["step"]: rec["train/loss"] for rec in lines if "train/loss" in rec}


def test_two_processes_match_one_process(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_tower_data(str(data), dev=False)
    multi, single = tmp_path / "multi", tmp_path / "single"
    addr = f"127.0.0.1:{_free_port()}"
    popen = dict(cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    hosts = [subprocess.Popen(_cmd(multi, data, "--distributed=explicit",
                                   f"--coordinator_address={addr}", "--num_processes=2",
                                   f"--process_id={i}"), env=_env(2), **popen) for i in range(2)]
    # The reference at the same time (the hosts spend much of their time waiting on each
    # other): one process with 4 devices, the same (data=2, model=2) mesh, its own token cache.
    ref = subprocess.Popen(_cmd(single, data, "--distributed=none",
                                f"--config.data.cache_dir={tmp_path / 'ref_cache'}"),
                           env=_env(4), **popen)
    results = communicate_all(hosts + [ref], timeout=420)
    for i, (rc, _, err) in enumerate(results):
        assert rc == 0, f"process {i} failed:\n{err[-4000:]}"
    (_, out0, err0), (_, out1, err1), (_, _, err_ref) = results
    assert "process 0 of 2, 2 local / 4 global devices" in err0
    assert "process 1 of 2, 2 local / 4 global devices" in err1
    assert "single process (--distributed=none)" in err_ref

    # Same losses step by step (Adam amplifies float-summation-order noise a little).
    lm, ls = _losses(multi), _losses(single)
    assert sorted(lm) == sorted(ls) == list(range(1, STEPS + 1)), (lm, ls)
    np.testing.assert_allclose([lm[s] for s in sorted(lm)], [ls[s] for s in sorted(ls)],
                               rtol=1e-5, atol=2e-5)

    # Host 0 alone writes metrics and reports: one JSONL record per step, one TensorBoard event
    # file, the summary printed once.
    assert len(open(multi / "metrics.jsonl").readlines()) == STEPS
    assert len(os.listdir(multi / "tb")) == 1
    assert json.loads(out0[out0.index("{"):])["step"] == STEPS and "{" not in out1
    assert json.loads(open(multi / "summary.json").read())["step"] == STEPS
    assert json.loads(open(multi / "config.json").read())["mesh"]["model"] == 2
    # Both hosts saved their shards of the state, and hosts shared one tokenised cache file.
    state_dir = multi / "checkpoints" / str(STEPS) / "state"
    assert {"ocdbt.process_0", "ocdbt.process_1"} <= set(os.listdir(state_dir))
    assert len([f for f in os.listdir(data / ".cache") if f.endswith(".npz")]) == 1

    # The 2-host checkpoint restores in one process (8 devices here) to the same parameters.
    from dense_cf.train.run import load_run
    a, b = load_run(str(multi)), load_run(str(single))
    assert a.step == b.step == STEPS
    for x, y in zip(jax.tree.leaves(jax.device_get(a.params)),
                    jax.tree.leaves(jax.device_get(b.params))):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=2e-5)
