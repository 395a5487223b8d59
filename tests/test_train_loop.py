"""The training loop end to end: save → stop (or SIGKILL) → resume equals an uninterrupted run;
the CLI (started outside the checkout, relative paths); missing-data errors."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from helpers import (
    NO_TF_MAIN,
    child_pythonpath,
    tiny_tower_config,
    write_tower_data,
    xla_flags,
)

from dense_cf.parallel import mesh as mesh_lib

# ---------------------------------------------------------------- end-to-end loop and resume

_tiny_config = tiny_tower_config


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    write_tower_data(str(d))
    return d


def test_resume_gives_the_same_parameters(tmp_path, data_dir):
    from dense_cf.train.loop import train
    full, full_run = train(_tiny_config(data_dir), str(tmp_path / "full"))
    part, _ = train(_tiny_config(data_dir, **{"train.stop_at_step": 3}), str(tmp_path / "resumed"))
    assert part["step"] == 3
    resumed, resumed_run = train(_tiny_config(data_dir), str(tmp_path / "resumed"))
    assert resumed["step"] == full["step"] == 6
    for a, b in zip(jax.tree.leaves(jax.device_get(full_run.params)),
                    jax.tree.leaves(jax.device_get(resumed_run.params))):
        np.testing.assert_array_equal(a, b)
    # A finished run loads for inference onto a different mesh (all 8 devices, data-parallel).
    from dense_cf.train.run import load_run
    run = load_run(str(tmp_path / "full"), mesh=mesh_lib.make_mesh(8, 1))
    assert run.step == 6 and dict(run.mesh.shape) == {"data": 8, "model": 1}
    for a, b in zip(jax.tree.leaves(jax.device_get(full_run.params)),
                    jax.tree.leaves(jax.device_get(run.params))):
        np.testing.assert_array_equal(a, b)
    # Metrics were written as JSONL (train and dev) and the loss is finite.
    lines = [json.loads(l) for l in open(tmp_path / "full" / "metrics.jsonl")]
    assert any("train/l_cpp" in l for l in lines) and any("dev/loss" in l for l in lines)
    assert all(np.isfinite(l["train/loss"]) for l in lines if "train/loss" in l)
    assert os.path.isdir(tmp_path / "full" / "tb")


def test_missing_data_file_message(tmp_path):
    from dense_cf.experiment import train_and_evaluate as train
    from dense_cf.train.validate import ConfigError
    c = _tiny_config(tmp_path)
    # Found by the config check before any work: one error naming the field, the path and the fix.
    with pytest.raises(ConfigError, match=r"config.data.train_file is missing: .*dl.fbaipublicfiles.com/dpr"):
        train(c, str(tmp_path / "w"))


def test_sigkill_then_resume_matches_uninterrupted_run(tmp_path):
    """A training process killed with SIGKILL after its first checkpoint resumes to the same end:
    a tf.data run, and a Grain run with TensorFlow unimportable (helpers.NO_TF_MAIN), both to
    the parameters of one uninterrupted tf.data run.

    The runs are also the CLI smoke test: ``python -m dense_cf.main --config=configs/dpr_nq.py``
    with a dev file, started outside the checkout with a relative data_dir and workdir, trains,
    prints its JSON summary (finite loss, no counterfactual terms) and saves the config with the
    absolute data path."""
    import signal
    import time

    from dense_cf.train.run import load_run
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, XLA_FLAGS=xla_flags(2), PYTHONPATH=child_pythonpath(root))
    env.pop("DENSE_CF_TRACEBACK", None)
    (tmp_path / "data").mkdir()
    write_tower_data(str(tmp_path / "data"))
    grain = ("--config.data.pipeline=grain", "--config.data.grain_threads=2")

    def cmd(workdir, *extra):
        head = ["-c", NO_TF_MAIN] if extra else ["-m", "dense_cf.main"]
        return [sys.executable, *head, "--config=configs/dpr_nq.py",
                f"--workdir={workdir}", "--config.model.name_or_path=tiny",
                "--config.model.tiny_layers=1", "--config.data.data_dir=data",
                "--config.data.train_file=train.json", "--config.data.dev_file=dev.json",
                "--config.data.max_q_len=12", "--config.data.max_p_len=24",
                "--config.train.global_batch=8", "--config.train.num_steps=40",
                "--config.train.checkpoint_every=10", "--config.train.log_every=20",
                "--config.train.eval_every=40", "--config.optim.warmup_steps=5", *extra]

    full = subprocess.Popen(cmd("full"), cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    victims = {name: subprocess.Popen(cmd(name, *extra), cwd=tmp_path, env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for name, extra in (("killed", ()), ("grain", grain))}
    deadline = time.time() + 300  # three trainers at once
    alive = dict(victims)
    while alive and time.time() < deadline:  # each killed right after its first checkpoint
        for name, victim in list(alive.items()):
            if (tmp_path / name / "checkpoints" / "10").exists() or victim.poll() is not None:
                victim.send_signal(signal.SIGKILL)
                del alive[name]
        time.sleep(0.02)
    for name, victim in victims.items():
        victim.kill()  # a no-op for those killed above
        assert victim.wait(timeout=60) == -signal.SIGKILL, name
        first, last = (tmp_path / name / "checkpoints" / str(s) for s in (10, 40))
        assert first.exists() and not last.exists(), f"{name}: the run was not killed mid-training"
    for name, extra in (("killed", ()), ("grain", grain)):
        r = subprocess.run(cmd(name, *extra), cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "restored step" in r.stderr, name
    out, err = full.communicate(timeout=300)
    assert full.returncode == 0, err[-3000:]
    summary = json.loads(out[out.index("{"):])
    assert summary["step"] == 40 and np.isfinite(summary["train"]["train/loss"])
    assert summary["train"]["train/l_chn"] == 0.0  # DPR: no counterfactual terms
    saved = json.load(open(tmp_path / "full" / "config.json"))
    assert saved["data"]["data_dir"] == str(tmp_path / "data")
    a = load_run(str(tmp_path / "full"))
    for name in ("killed", "grain"):
        b = load_run(str(tmp_path / name))
        assert a.step == b.step == 40
        for x, y in zip(jax.tree.leaves(jax.device_get(a.params)),
                        jax.tree.leaves(jax.device_get(b.params))):
            np.testing.assert_array_equal(x, y, err_msg=name)
