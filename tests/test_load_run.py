"""Evaluation restores only what it needs (issue 33 item 3): ``load_run`` takes the parameter
shapes from ``jax.eval_shape`` and reads ``state.params`` alone; no optimizer, no init."""

from __future__ import annotations

import jax
import numpy as np
from flax import linen as nn
from helpers import tiny_tower_config

from dense_cf.parallel import mesh as mesh_lib
from dense_cf.train import run as run_lib
from dense_cf.train.checkpoint import Checkpointer
from dense_cf.train.run import RunDir, axis_rules, build_model, init_state, load_run
from dense_cf.train.state import make_optimizer


def _saved_run(tmp_path, data, model_parallel):
    """A run directory holding one checkpoint of a tiny model (random params, Adam state)."""
    c = tiny_tower_config(tmp_path, **{"mesh.data": data, "mesh.model": model_parallel})
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / "config.json").write_text(c.to_json_best_effort())
    mesh = mesh_lib.make_mesh(data, model_parallel, devices=jax.devices()[: data * model_parallel])
    model, _, _ = build_model(c, load_pretrained=False)
    rules = axis_rules(c, model, mesh)
    tx, _ = make_optimizer(c.optim, 10)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        state = init_state(c, model, None, tx, mesh, rules, jax.random.key(3))
    ckpt = Checkpointer(RunDir(str(workdir)).checkpoints, async_save=False)
    ckpt.save(5, state, {"step": 5}, force=True)
    ckpt.close()
    return str(workdir), state, mesh


def test_load_run_restores_the_params_alone(tmp_path, monkeypatch):
    workdir, state, mesh = _saved_run(tmp_path, 4, 2)

    def refuse(*a, **k):
        raise AssertionError("load_run must not build an optimizer or initialise a state")

    monkeypatch.setattr(run_lib, "init_state", refuse)
    monkeypatch.setattr(run_lib, "make_optimizer", refuse, raising=False)
    run = load_run(workdir, mesh=mesh)
    assert run.step == 5
    want, got = jax.tree_util.tree_leaves_with_path(state.params), jax.tree_util.tree_leaves_with_path(run.params)
    assert [p for p, _ in got] == [p for p, _ in want]
    for (path, a), (_, b) in zip(want, got):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=jax.tree_util.keystr(path))
        assert b.sharding.is_equivalent_to(a.sharding, a.ndim), jax.tree_util.keystr(path)


def test_abstract_params_allocate_nothing(tmp_path):
    c = tiny_tower_config(tmp_path)
    mesh = mesh_lib.make_mesh(4, 2, devices=jax.devices()[:8])
    model, _, _ = build_model(c, load_pretrained=False)
    rules = axis_rules(c, model, mesh)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        abstract = run_lib.abstract_params(c, model, mesh, rules)
    leaves = jax.tree.leaves(abstract)
    assert leaves and all(isinstance(x, jax.ShapeDtypeStruct) and x.sharding is not None for x in leaves)
