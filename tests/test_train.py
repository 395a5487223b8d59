"""Sharded training equals single-device training; save → stop → resume equals an uninterrupted run.

Runs on 8 simulated CPU devices (see conftest.py).
"""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from dense_cf.config import base_config
from dense_cf.data.formats import BiencoderExample, Passage, write_biencoder
from dense_cf.losses import loss_kwargs_from_config
from dense_cf.models.bert import BertConfig, axis_rules_for
from dense_cf.models.dual_encoder import DualEncoder
from dense_cf.train import mesh as mesh_lib
from dense_cf.train.state import TrainState, make_optimizer
from dense_cf.train.step import batch_loss, make_train_step

B, LQ, LP, H, V = 8, 8, 16, 1, 64


def _batch(seed=0):
    r = np.random.default_rng(seed)

    def ids(*shape):
        x = r.integers(5, V, size=shape).astype(np.int32)
        m = np.ones(shape, np.int32)
        m[..., shape[-1] - r.integers(0, 4):] = 0   # some padding
        return x * m, m

    b = {}
    b["q_ids"], b["q_mask"] = ids(B, LQ)
    b["pos_ids"], b["pos_mask"] = ids(B, LP)
    b["hard_ids"], b["hard_mask"] = ids(B, H, LP)
    b["cf_ids"], b["cf_mask"] = ids(B, LP)
    b["hard_valid"] = np.array([[True]] * 6 + [[False]] * 2)
    b["cf_valid"] = np.array([True, False, True, True, True, True, False, True])
    return b


MODEL = DualEncoder(BertConfig.tiny(vocab_size=V, hidden=32, layers=2, heads=2,
                                    max_position_embeddings=32), shared=False)
LOSS = dict(lam=0.2, tau1=1.0, tau2=1.0, use_dpr=True)


def _setup(data, model):
    devices = jax.devices()[: data * model]
    mesh = mesh_lib.make_mesh(data, model, devices=devices)
    rules = axis_rules_for(MODEL.config, model)
    ids = jnp.ones((1, LP), jnp.int32)
    init = lambda r: MODEL.init(r, ids, ids, ids, ids)["params"]
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        sh = mesh_lib.tree_shardings(jax.eval_shape(init, jax.random.key(0)), mesh, rules)
        params = jax.jit(lambda r: nn.meta.unbox(init(r)), out_shardings=sh)(jax.random.key(0))
    return mesh, rules, params, sh


def _loss_and_grads(data, model):
    mesh, rules, params, sh = _setup(data, model)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        batch = mesh_lib.global_batch(_batch(), mesh)

        def f(p, b):
            return batch_loss(MODEL, p, b, loss_kwargs=LOSS, mesh=mesh, deterministic=False,
                              rngs={"dropout": jax.random.key(7)})

        (loss, metrics), grads = jax.jit(jax.value_and_grad(f, has_aux=True),
                                         in_shardings=(sh, mesh_lib.batch_sharding(mesh)))(params, batch)
    return jax.device_get((loss, metrics, grads)), grads


@pytest.fixture(scope="module")
def single():
    return _loss_and_grads(1, 1)[0]


@pytest.mark.parametrize("data,model", [(8, 1), (4, 2)])
def test_sharded_loss_and_grads_equal_single_device(single, data, model):
    (loss, metrics, grads), dev_grads = _loss_and_grads(data, model)
    (loss1, metrics1, grads1) = single
    assert np.isfinite(loss1) and loss1 > 0
    np.testing.assert_allclose(loss, loss1, rtol=1e-5, atol=1e-6)
    for k in metrics1:
        np.testing.assert_allclose(metrics[k], metrics1[k], rtol=1e-5, atol=1e-6, err_msg=k)
    flat, flat1 = jax.tree.leaves(grads), jax.tree.leaves(grads1)
    assert len(flat) == len(flat1) and any(np.abs(g).max() > 0 for g in flat1)
    for g, g1 in zip(flat, flat1):
        np.testing.assert_allclose(g, g1, rtol=1e-4, atol=1e-6)
    # The parameters really are sharded over "model" when model > 1.
    if model > 1:
        specs = {str(x.sharding.spec) for x in jax.tree.leaves(dev_grads)}
        assert any("model" in s for s in specs), specs


def test_in_batch_negatives_span_the_global_batch():
    """With data=8 each device holds one question; its DPR loss must still use all passages."""
    from dense_cf.train.step import embed_batch
    mesh, rules, params, sh = _setup(8, 1)
    dpr = dict(lam=0.0, tau1=0.0, tau2=0.0, use_dpr=True)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        batch = mesh_lib.global_batch(_batch(), mesh)
        _, m = jax.jit(lambda p, b: batch_loss(MODEL, p, b, loss_kwargs=dpr, mesh=mesh,
                                                 deterministic=True))(params, batch)
    host = jax.device_get(params)
    q, pos, hard, _ = jax.device_get(embed_batch(MODEL, host, _batch(), deterministic=True))
    valid = _batch()["hard_valid"][:, 0]
    cands = np.concatenate([pos, hard[valid, 0]]).astype(np.float64)
    s = q.astype(np.float64) @ cands.T
    global_nll = np.mean([np.log(np.exp(s[i]).sum()) - s[i, i] for i in range(B)])
    local_nll = np.mean([np.log(np.exp(s[i, i]) + (np.exp(q[i] @ hard[i, 0]) if valid[i] else 0))
                         - s[i, i] for i in range(B)])
    np.testing.assert_allclose(float(m["l_dpr"]), global_nll, rtol=1e-4)
    assert abs(global_nll - local_nll) > 1e-3  # the check can tell the two apart


def test_train_step_sharded_equals_single_device():
    cfg = base_config().optim
    cfg.warmup_steps = 1
    tx, sched = make_optimizer(cfg, total_steps=10)
    out = []
    for data, model in [(1, 1), (4, 2)]:
        mesh, rules, params, sh = _setup(data, model)
        with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
            state = TrainState(step=jnp.zeros((), jnp.int32), params=params,
                               opt_state=jax.jit(tx.init)(params))
            state_sh = jax.tree.map(lambda x: x.sharding, state)
            step = jax.jit(make_train_step(MODEL, tx, loss_kwargs=LOSS, mesh=mesh, schedule=sched),
                           in_shardings=(state_sh, mesh_lib.batch_sharding(mesh), None),
                           out_shardings=(state_sh, None), donate_argnums=(0,))
            for s in range(2):
                state, m = step(state, mesh_lib.global_batch(_batch(s), mesh), jax.random.key(1))
        out.append((jax.device_get(state.params), float(m["loss"])))
    (p1, l1), (p8, l8) = out
    np.testing.assert_allclose(l8, l1, rtol=1e-5)
    # Adam divides by sqrt(v): where a gradient is ~1e-7 (summation-order noise of the same
    # size), the normalised update differs by up to ~lr. Compare at a fraction of lr = 1e-3.
    for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p8)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5)


# ---------------------------------------------------------------- end-to-end loop and resume

def _write_data(d):
    exs = []
    for i in range(24):
        pos = Passage(title=f"Tower {i}", text=f"The tower {i} stands in town {i % 5}. "
                                               f"It was built in {1800 + i}. It is tall.")
        hard = [Passage(title=f"Tower {i + 1}", text=f"The tower {i + 1} is old. It is grey.")]
        exs.append(BiencoderExample(f"when was tower {i} built?", [str(1800 + i)], [pos], [], hard))
    write_biencoder(os.path.join(d, "train.json"), exs)
    write_biencoder(os.path.join(d, "dev.json"), exs[:8])


def _tiny_config(data_dir, **over):
    c = base_config()
    c.model.name_or_path = "tiny"
    c.model.tiny_hidden, c.model.tiny_layers, c.model.tiny_heads = 32, 1, 2
    c.data.data_dir = str(data_dir)
    c.data.train_file, c.data.dev_file = "train.json", "dev.json"
    c.data.max_q_len, c.data.max_p_len = 12, 24
    c.loss.lam, c.loss.tau1, c.loss.tau2 = 0.2, 1.0, 1.0
    c.train.global_batch = 8
    c.train.num_steps = 6
    c.train.log_every = 2
    c.train.checkpoint_every = 3
    c.train.eval_every = 3
    c.optim.warmup_steps = 2
    c.optim.learning_rate = 1e-3
    c.mesh.data, c.mesh.model = 4, 2
    for k, v in over.items():
        node = c
        *path, last = k.split(".")
        for p in path:
            node = node[p]
        node[last] = v
    return c


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    _write_data(str(d))
    return d


def test_resume_gives_the_same_parameters(tmp_path, data_dir):
    from dense_cf.train.loop import train
    full = train(_tiny_config(data_dir), str(tmp_path / "full"))
    part = train(_tiny_config(data_dir, **{"train.stop_at_step": 3}), str(tmp_path / "resumed"))
    assert part["step"] == 3
    resumed = train(_tiny_config(data_dir), str(tmp_path / "resumed"))
    assert resumed["step"] == full["step"] == 6
    for a, b in zip(jax.tree.leaves(jax.device_get(full["state"].params)),
                    jax.tree.leaves(jax.device_get(resumed["state"].params))):
        np.testing.assert_array_equal(a, b)
    # A finished run loads for inference onto a different mesh (all 8 devices, data-parallel).
    from dense_cf.train.loop import load_run
    run = load_run(str(tmp_path / "full"), mesh=mesh_lib.make_mesh(8, 1))
    assert run.step == 6 and dict(run.mesh.shape) == {"data": 8, "model": 1}
    for a, b in zip(jax.tree.leaves(jax.device_get(full["state"].params)),
                    jax.tree.leaves(jax.device_get(run.params))):
        np.testing.assert_array_equal(a, b)
    # Metrics were written as JSONL (train and dev) and the loss is finite.
    lines = [json.loads(l) for l in open(tmp_path / "full" / "metrics.jsonl")]
    assert any("train/l_cpp" in l for l in lines) and any("dev/loss" in l for l in lines)
    assert all(np.isfinite(l["train/loss"]) for l in lines if "train/loss" in l)
    assert os.path.isdir(tmp_path / "full" / "tb")


def test_cli_smoke(tmp_path, data_dir):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    cmd = [sys.executable, "-m", "dense_cf.main", "--config=configs/dpr_nq.py",
           f"--workdir={tmp_path / 'run'}", "--config.model.name_or_path=tiny",
           "--config.model.tiny_layers=1", f"--config.data.data_dir={data_dir}",
           "--config.data.train_file=train.json", "--config.data.dev_file=dev.json",
           "--config.data.max_q_len=12", "--config.data.max_p_len=24",
           "--config.train.global_batch=8", "--config.train.num_steps=2",
           "--config.train.log_every=1", "--config.train.eval_every=2"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout[r.stdout.index("{"):])
    assert out["step"] == 2 and np.isfinite(out["train"]["train/loss"])
    assert out["train"]["train/l_chn"] == 0.0  # DPR: no counterfactual terms


def test_missing_data_file_message(tmp_path):
    from dense_cf.train.loop import train
    c = _tiny_config(tmp_path)
    with pytest.raises(FileNotFoundError, match="dl.fbaipublicfiles.com/dpr"):
        train(c, str(tmp_path / "w"))


def test_sigkill_then_resume_matches_uninterrupted_run(tmp_path, data_dir):
    """A training process killed with SIGKILL after its first checkpoint resumes to the same end."""
    import signal
    import time
    from dense_cf.train.loop import load_run
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def cmd(workdir):
        return [sys.executable, "-m", "dense_cf.main", "--config=configs/picl_nq.py",
                f"--workdir={workdir}", "--config.model.name_or_path=tiny",
                "--config.model.tiny_layers=1", f"--config.data.data_dir={data_dir}",
                "--config.data.train_file=train.json", "--config.data.dev_file=",
                "--config.data.max_q_len=12", "--config.data.max_p_len=24",
                "--config.train.global_batch=8", "--config.train.num_steps=100",
                "--config.train.checkpoint_every=20", "--config.train.log_every=50",
                "--config.train.eval_every=0", "--config.optim.warmup_steps=5"]

    full = subprocess.Popen(cmd(tmp_path / "full"), cwd=root, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    victim = subprocess.Popen(cmd(tmp_path / "killed"), cwd=root, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = tmp_path / "killed" / "checkpoints" / "20"
    deadline = time.time() + 240
    while not first.exists() and victim.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=60) == -signal.SIGKILL
    last = tmp_path / "killed" / "checkpoints" / "100"
    assert first.exists() and not last.exists(), "the run was not killed mid-training"
    r = subprocess.run(cmd(tmp_path / "killed"), cwd=root, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "restored step" in r.stderr
    _, err = full.communicate(timeout=300)
    assert full.returncode == 0, err[-3000:]
    a, b = load_run(str(tmp_path / "full")), load_run(str(tmp_path / "killed"))
    assert a.step == b.step == 100
    for x, y in zip(jax.tree.leaves(jax.device_get(a.params)), jax.tree.leaves(jax.device_get(b.params))):
        np.testing.assert_array_equal(x, y)
