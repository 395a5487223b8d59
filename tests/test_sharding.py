"""Sharded training equals single-device training (8 simulated CPU devices, see conftest.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn
from helpers import random_batch, sharded_params

from dense_cf import methods
from dense_cf.configs.base import base_config
from dense_cf.models.bert import BertConfig
from dense_cf.models.dual_encoder import DualEncoder
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.train.state import TrainState, make_optimizer
from dense_cf.train.step import batch_loss, make_train_step

METHOD = methods.get("picl")  # loss weights come from each test's LOSS

B, LQ, LP, H, V = 8, 8, 16, 1, 64


def _batch(seed=0):
    b = random_batch(B, LQ, LP, H, V, seed=seed)
    b["hard_valid"] = np.array([[True]] * 6 + [[False]] * 2)
    b["cf_valid"] = np.array([True, False, True, True, True, True, False, True])
    return b


MODEL = DualEncoder(BertConfig.tiny(vocab_size=V, hidden=32, layers=2, heads=2,
                                    max_position_embeddings=32), shared=False)
LOSS = dict(lam=0.2, tau1=1.0, tau2=1.0, use_dpr=True)


def _setup(data, model):
    return sharded_params(MODEL, LP, data, model)


def _loss_and_grads(data, model):
    mesh, rules, params, sh = _setup(data, model)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        batch = mesh_lib.global_batch(_batch(), mesh)

        def f(p, b):
            return batch_loss(METHOD, MODEL, p, b, loss_hparams=LOSS, mesh=mesh, deterministic=False,
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
        # float32 sums in another reduction order: the absolute tolerance follows each
        # tensor's scale (a 1e-5 difference on a 0.06 entry of a tensor reaching 77 is noise).
        np.testing.assert_allclose(g, g1, rtol=1e-4, atol=2e-6 * max(1.0, float(np.abs(g1).max())))
    # The parameters really are sharded over "model" when model > 1.
    if model > 1:
        specs = {str(x.sharding.spec) for x in jax.tree.leaves(dev_grads)}
        assert any("model" in s for s in specs), specs


def test_in_batch_negatives_span_the_global_batch():
    """With data=8 each device holds one question; its DPR loss must still use all passages."""
    from dense_cf.methods import embed_passages
    mesh, rules, params, sh = _setup(8, 1)
    dpr = dict(lam=0.0, tau1=0.0, tau2=0.0, use_dpr=True)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        batch = mesh_lib.global_batch(_batch(), mesh)
        _, m = jax.jit(lambda p, b: batch_loss(METHOD, MODEL, p, b, loss_hparams=dpr, mesh=mesh,
                                                 deterministic=True))(params, batch)
    host = jax.device_get(params)
    e = jax.device_get(embed_passages(MODEL, host, _batch(), deterministic=True))
    q, pos, hard = e.q, e.pos, e.neg
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
            step = jax.jit(make_train_step(METHOD, MODEL, tx, loss_hparams=LOSS, mesh=mesh, schedule=sched),
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




def test_init_on_host_equals_init_on_devices():
    """``mesh_lib.init_sharded``: the host-CPU path (the default on GPU/TPU, where XLA's
    compile of the random init takes minutes) gives the params of the jitted on-device init,
    in the same shardings, with the default (threefry) key of ``train.run.init_state``."""
    mesh, rules, on_devices, sh = sharded_params(MODEL, LP, 4, 2)
    ids = jnp.ones((1, LP), jnp.int32)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        on_host = mesh_lib.init_sharded(
            lambda r: nn.meta.unbox(MODEL.init(r, ids, ids, ids, ids)["params"]),
            jax.random.key(0), sh, host=True)
    for a, b in zip(jax.tree.leaves(on_host), jax.tree.leaves(on_devices)):
        assert a.sharding == b.sharding
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
