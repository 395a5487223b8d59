"""Two CPU processes as two hosts: the same training run as one process with all devices, and a
SIGTERM sent to one host only stops both at the same saved step, from which the same command
resumes to parameters bit-identical to the uninterrupted two-host run.

2 processes x 2 CPU devices (``--distributed=explicit`` on a free localhost port) and 1 process x
4 devices train the same tiny PiCL config on a (data=2, model=2) mesh, so the data axis spans the
hosts (in-batch negatives are gathered across processes) and every host feeds its column of the
global batch. The uninterrupted two-host run is made once per module (``two_hosts``) and serves
every test: the reference of the one-process comparison and of the preempted-then-resumed run.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from helpers import (
    STEP_HOOK,
    TINY_MAIN_OVERRIDES,
    TINY_MAIN_STEPS,
    child_pythonpath,
    communicate_all,
    free_port,
    gloo_available,
    logged_steps,
    write_tower_data,
    xla_flags,
)

from dense_cf.train.preemption import PREEMPTED_EXIT
from dense_cf.train.run import load_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = TINY_MAIN_STEPS

pytestmark = pytest.mark.skipif(
    not gloo_available(), reason="this jaxlib has no gloo CPU collectives: multi-process CPU "
                                 "runs are impossible")

_OVERRIDES = dict(TINY_MAIN_OVERRIDES, **{"mesh.data": 2, "mesh.model": 2})


def _cmd(workdir, data_dir, *extra, hook: bool | str = False) -> list[str]:
    """``dense_cf.main``; with ``hook``, under helpers.STEP_HOOK (a marker line per step), or
    under the code ``hook`` names (which ends by running STEP_HOOK)."""
    head = ["-c", hook if isinstance(hook, str) else STEP_HOOK] if hook else ["-m", "dense_cf.main"]
    return [sys.executable, *head, "--config=configs/picl_nq.py", f"--workdir={workdir}",
            f"--config.data.data_dir={data_dir}",
            *[f"--config.{k}={v}" for k, v in _OVERRIDES.items()], *extra]


def _env(devices: int, marker=None) -> dict:
    env = dict(os.environ, XLA_FLAGS=xla_flags(devices),
               JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=child_pythonpath(ROOT))
    if marker is not None:
        env["STEP_MARKER"] = str(marker)
    env.pop("DENSE_CF_TRACEBACK", None)
    return env


_POPEN = dict(cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
# The fault tests (a signal, a lost host), whose subject is not the input pipeline, train with
# Grain: a trainer without TensorFlow's import costs about half the CPU (measured: 14.3 -> 7.9 s
# per process). Grain's batches equal tf.data's (tests/test_grain.py), so their resumes still
# end bit-identical to ``two_hosts``' run, which keeps tf.data (2 hosts against 1 process).
GRAIN = ("--config.data.pipeline=grain", "--config.data.grain_threads=2")


def _pod(workdir, data_dir, marker=None, *extra, hook: str | None = None
         ) -> list[subprocess.Popen]:
    """Two hosts of one run, each with 2 of the 4 devices."""
    addr = f"127.0.0.1:{free_port()}"
    return [subprocess.Popen(_cmd(workdir, data_dir, "--distributed=explicit",
                                  f"--coordinator_address={addr}", "--num_processes=2",
                                  f"--process_id={i}", *extra, hook=hook or marker is not None),
                             env=_env(2, marker), **_POPEN) for i in range(2)]


def _losses(workdir) -> dict[int, float]:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    return {rec["step"]: rec["train/loss"] for rec in lines if "train/loss" in rec}


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory):
    """The uninterrupted two-host run and, at the same time (the hosts spend much of their time
    waiting on each other), one process with 4 devices on the same mesh with its own token cache."""
    tmp = tmp_path_factory.mktemp("two_hosts")
    data = tmp / "data"
    data.mkdir()
    write_tower_data(str(data), dev=False)
    multi, single = tmp / "multi", tmp / "single"
    hosts = _pod(multi, data)
    ref = subprocess.Popen(_cmd(single, data, "--distributed=none",
                                f"--config.data.cache_dir={tmp / 'ref_cache'}"),
                           env=_env(4), **_POPEN)
    results = communicate_all(hosts + [ref], timeout=420)
    return {"data": data, "multi": multi, "single": single, "results": results}


def test_two_processes_match_one_process(two_hosts):
    multi, single, data = two_hosts["multi"], two_hosts["single"], two_hosts["data"]
    results = two_hosts["results"]
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
    a, b = load_run(str(multi)), load_run(str(single))
    assert a.step == b.step == STEPS
    for x, y in zip(jax.tree.leaves(jax.device_get(a.params)),
                    jax.tree.leaves(jax.device_get(b.params))):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=2e-5)


# ------------------------------------------------------------ waiting for a step (STEP_HOOK)
def _wait_for_step(marker, step, procs, timeout=300):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if os.path.exists(marker) and f"STEP {step}\n" in open(marker).read():
            return
        for p in procs:
            if p.poll() is not None:
                pytest.fail(f"a trainer ended (status {p.returncode}) before step {step}:\n"
                            f"{p.communicate()[1][-3000:]}")
        time.sleep(0.02)
    pytest.fail(f"no step {step} within {timeout} s")


# ------------------------------------------------------ SIGTERM to one host during a save (49 §3)
# STEP_HOOK, plus: orbax's last act of every save (finalize: the commit marker and the rename of
# the temporary step into place) appends ``SAVING`` to $STEP_MARKER, waits $SAVE_DELAY_S seconds
# and, once done, appends ``SAVED``: a background save stays in flight long enough to be hit.
SAVE_HOOK = """
import asyncio, os
from orbax.checkpoint._src.path import atomicity
_real_finalize = atomicity.AtomicRenameTemporaryPath.finalize
async def _slow_finalize(self, *a, **kw):
    with open(os.environ["STEP_MARKER"], "a") as f:
        f.write("SAVING\\n")
    await asyncio.sleep(float(os.environ.get("SAVE_DELAY_S", "1.5")))
    out = await _real_finalize(self, *a, **kw)
    with open(os.environ["STEP_MARKER"], "a") as f:
        f.write("SAVED\\n")
    return out
atomicity.AtomicRenameTemporaryPath.finalize = _slow_finalize
""" + STEP_HOOK


def test_sigterm_to_one_host_during_a_save_then_a_killed_host_and_both_resume_bit_identical(
        tmp_path, two_hosts):
    """One run, two interruptions, then a resume (one chain: each stage starts from the last).

    1. SIGTERM during a save (issue 49 §3; issue 34 §1 on two hosts). Saves every 2 steps, each
       held in flight 1.5 s in orbax's finalize (``SAVE_HOOK``); SIGTERM goes to host 1 (not the
       coordinator) while step 2's save is in flight. Host 0 learns of it in the step sync. Both
       hosts stop after the same step within a bounded time, each with exit 75 and process 0
       with one ``preempted:`` line; the save in flight is finished and sealed, the step the
       signal stopped at is saved too (by both hosts), nothing half-written is left (every step
       directory carries its SHA256SUMS, no ``*.orbax-checkpoint-tmp``), and no step ran after
       the saved one. The in-process test (tests/test_faults_training.py) draws the signal's
       step from every step.
    2. A host lost. The same command resumes right after the saved step (no step repeated) and
       has host 1 killed with kill -9 after step 5. Before: host 0 died with a raw
       ``JaxRuntimeError: … Gloo AllGather failed … Connection closed by peer`` traceback. Now
       it exits 1 at its next collective, well within the heartbeat bound, with one ``error:``
       line naming process 1 and the step a restart resumes from.
    3. The same command on both resumes from the newest complete checkpoint and ends
       bit-identical to ``two_hosts``' uninterrupted run: both resumes kept the run
       bit-identical.

    The pods train with Grain (``GRAIN``)."""
    from dense_cf import files
    from dense_cf.parallel.distributed import HEARTBEAT_TIMEOUT_S
    run, marker = tmp_path / "run", tmp_path / "run.marker"
    every2 = ("--config.train.checkpoint_every=2", *GRAIN)
    pod = _pod(run, two_hosts["data"], marker, *every2, hook=SAVE_HOOK)
    t0 = time.monotonic()
    while "SAVING\n" not in (open(marker).read() if os.path.exists(marker) else ""):
        if any(p.poll() is not None for p in pod) or time.monotonic() - t0 > 300:
            pytest.fail("no save began:\n" + pod[0].communicate()[1][-3000:])
        time.sleep(0.02)
    pod[1].send_signal(signal.SIGTERM)
    t_sig = time.monotonic()
    assert "SAVED\n" not in open(marker).read()  # the save was still in flight at the signal
    results = communicate_all(pod, timeout=HEARTBEAT_TIMEOUT_S + 60)
    took = time.monotonic() - t_sig
    print(f"both hosts exited {took:.1f} s after the SIGTERM; marker: "
          f"{open(marker).read().split()}")
    assert took < HEARTBEAT_TIMEOUT_S, took
    for i, (rc, _, err) in enumerate(results):
        assert rc == PREEMPTED_EXIT and "Traceback" not in err, (i, rc, err[-3000:])
        lines = [ln for ln in err.splitlines() if ln.startswith(("preempted:", "error:"))]
        assert len(lines) == (1 if i == 0 else 0), (i, lines)  # process 0 speaks for the pod
    (line,) = [ln for ln in results[0][2].splitlines() if ln.startswith("preempted:")]
    assert line.startswith("preempted: stopped by a signal on another host after saving step "), line
    saved = int(line.split("after saving step ")[1].split()[0])
    ckpts = run / "checkpoints"
    left = sorted(os.listdir(ckpts))
    assert all(d.isdigit() for d in left), left  # no *.orbax-checkpoint-tmp
    assert sorted(int(d) for d in left) == sorted({2, saved}), left  # the one in flight too
    for d in left:  # every step complete and sealed: a restart trusts only finished saves
        assert files.check_sums(ckpts / d / files.SUMS_NAME), d
        assert all(why is None for _, why in files.check_sums(ckpts / d / files.SUMS_NAME)), d
    assert {"ocdbt.process_0", "ocdbt.process_1"} <= set(os.listdir(ckpts / str(saved) / "state"))
    assert max(logged_steps(run)) == saved  # no step ran after the saved one
    assert saved < 5, saved  # so the resumed run trains step 5 (stage 2)
    assert not os.path.exists(run / ".dense_cf.lock")

    # 2. The resume, saving every 2 steps; host 1 killed after step 5.
    pod = _pod(run, two_hosts["data"], marker, *every2)
    _wait_for_step(marker, 5, pod)
    pod[1].send_signal(signal.SIGKILL)
    t_kill = time.monotonic()
    _, err = pod[0].communicate(timeout=HEARTBEAT_TIMEOUT_S + 60)
    took = time.monotonic() - t_kill
    pod[1].wait(timeout=60)
    print(f"host 0 stopped {took:.1f} s after host 1 was killed:\n{err[-1500:]}")
    assert f"restored step {saved}" in err, err[-4000:]
    # Each step logged once: the resume started right after the saved step (nothing repeated).
    steps = logged_steps(run)
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 5, steps
    assert pod[0].returncode == 1 and took < HEARTBEAT_TIMEOUT_S, (pod[0].returncode, took)
    assert "Traceback" not in err, err[-4000:]
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    complete = max(int(d) for d in os.listdir(ckpts) if d.isdigit())
    assert len(errors) == 1 and errors[0].startswith("error: lost process 1 of 2 ("), errors
    assert "by peer" in errors[0] and "process 0 stops too" in errors[0]
    assert f"training resumes from step {complete}, the newest complete checkpoint" in errors[0]

    # 3. The restart of both, to the end: bit-identical to the uninterrupted run.
    resumed = communicate_all(_pod(run, two_hosts["data"], marker, *every2), timeout=300)
    for rc, _, e in resumed:
        assert rc == 0, e[-3000:]
    assert f"restored step {complete}" in resumed[0][2]
    # The restart trained from the step after the checkpoint: the steps host 1's loss cost
    # (after ``complete``) run again, nothing before them.
    assert logged_steps(run) == steps + list(range(complete + 1, STEPS + 1))
    assert [r[0] for r in two_hosts["results"][:2]] == [0, 0]
    a, b = load_run(str(two_hosts["multi"])), load_run(str(run))
    assert a.step == b.step == STEPS
    for x, y in zip(jax.tree.leaves(jax.device_get(a.params)), jax.tree.leaves(jax.device_get(b.params))):
        np.testing.assert_array_equal(x, y)


def _alive(pid: int) -> bool:
    """A running process (a zombie, reparented to an init that does not reap, is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_coordinator_killed_stops_the_other_with_one_line(tmp_path, two_hosts):
    """kill -9 process 0, the coordinator, after step 3. Before (service inside process 0):
    process 1 was aborted by jax's own fatal line from a C++ thread (status −6). Now the
    service runs in process 0's side process (parallel/coordinator.py), so process 1 stops like
    any survivor: exit 1 at its next collective, one ``error:`` line naming process 0, no
    traceback; the side process goes ``coordinator.LINGER_S`` later."""
    from dense_cf.parallel.coordinator import LINGER_S
    from dense_cf.parallel.distributed import HEARTBEAT_TIMEOUT_S
    pod = _pod(tmp_path / "run", two_hosts["data"], tmp_path / "run.marker", *GRAIN)
    _wait_for_step(tmp_path / "run.marker", 3, pod)
    pod[0].send_signal(signal.SIGKILL)
    t_kill = time.monotonic()
    _, err = pod[1].communicate(timeout=HEARTBEAT_TIMEOUT_S + 60)
    took = time.monotonic() - t_kill
    _, err0 = pod[0].communicate(timeout=60)
    print(f"process 1 stopped {took:.1f} s after the coordinator was killed "
          f"(status {pod[1].returncode}):\n{err[-1500:]}")
    assert pod[1].returncode == 1 and took < HEARTBEAT_TIMEOUT_S, (pod[1].returncode, took)
    assert "Traceback" not in err and "detected fatal errors" not in err, err[-4000:]
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: lost process 0 of 2 ("), errors
    assert "process 1 stops too" in errors[0], errors
    side = [int(m) for m in re.findall(r"coordination service in side process (\d+)", err0)]
    assert len(side) == 1, err0[-3000:]
    deadline = t_kill + LINGER_S + 30
    while _alive(side[0]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _alive(side[0]), f"the side process outlived process 0 by more than {LINGER_S} s"
