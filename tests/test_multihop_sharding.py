"""The MDR + EADPR loss sharded over 8 simulated devices equals the single-device loss (the
two hops of the GLOBAL batch are flattened after the all-gather; conftest.py sets 8 devices)."""

import jax
import numpy as np
import pytest
from flax import linen as nn
from helpers import sharded_params

from dense_cf import methods
from dense_cf.models.bert import BertConfig
from dense_cf.models.dual_encoder import DualEncoder
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.train import gradcache
from dense_cf.train.step import batch_loss, gathered_loss

METHOD = methods.get("mdr-eadpr")
B, LQ, LQ2, LP, H, V = 8, 8, 20, 16, 1, 64
MODEL = DualEncoder(BertConfig.tiny(vocab_size=V, hidden=32, layers=1, heads=2,
                                    max_position_embeddings=32), shared=True)
LOSS = dict(lam=1.0, tau1=1.0, tau2=1.0, use_dpr=True)


def _batch():
    r = np.random.default_rng(0)

    def ids(*shape):
        x = r.integers(5, V, size=shape).astype(np.int32)
        m = np.ones(shape, np.int32)
        m[..., shape[-1] - r.integers(0, 4):] = 0
        return x * m, m

    b = {}
    for name, shape in (("q", (B, LQ)), ("q2", (B, LQ2)), ("p1", (B, LP)), ("p2", (B, LP)),
                        ("hard", (B, H, LP)), ("cf1", (B, LP)), ("cf2", (B, LP))):
        b[f"{name}_ids"], b[f"{name}_mask"] = ids(*shape)
    b["hard_valid"] = np.array([[True]] * 5 + [[False]] * 3)
    b["cf1_valid"] = np.array([True, False, True, True, True, True, False, True])
    b["cf2_valid"] = np.array([True, True, True, False, True, True, True, False])
    return b


def _loss_and_grads(data, model, chunks=0):
    """Plain autodiff, or GradCache with ``chunks`` > 0 (the MDR embeddings pytree chunked)."""
    mesh, rules, params, sh = sharded_params(MODEL, LP, data, model)

    def plain(p, b):
        return jax.value_and_grad(
            lambda p: batch_loss(METHOD, MODEL, p, b, loss_hparams=LOSS, mesh=mesh,
                                 deterministic=True), has_aux=True)(p)

    def cached(p, b):
        return gradcache.grad_cache_value_and_grad(
            lambda e: gathered_loss(METHOD, e, loss_hparams=LOSS, mesh=mesh), METHOD.embed,
            MODEL, p, b, num_chunks=chunks, mesh=mesh, deterministic=True)

    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        batch = mesh_lib.global_batch(_batch(), mesh)
        (loss, metrics), grads = jax.jit(cached if chunks else plain,
                                         in_shardings=(sh, mesh_lib.batch_sharding(mesh)),
                                         out_shardings=(None, sh))(params, batch)
    return jax.device_get((loss, metrics, grads))


@pytest.fixture(scope="module")
def single():
    return _loss_and_grads(1, 1)


@pytest.mark.parametrize("data,model,chunks", [(8, 1, 0), (4, 2, 0), (4, 1, 2)])
def test_sharded_mdr_loss_equals_single_device(single, data, model, chunks):
    loss1, metrics1, grads1 = single
    loss, metrics, grads = _loss_and_grads(data, model, chunks)
    assert np.isfinite(loss1) and loss1 > 0 and metrics1["l_cpp"] > 0
    np.testing.assert_allclose(loss, loss1, rtol=1e-5, atol=1e-6)
    assert {"hop1_loss", "hop2_loss", "hop1_rank_acc", "hop2_rank_acc"} <= set(metrics1)
    for k in metrics1:
        np.testing.assert_allclose(metrics[k], metrics1[k], rtol=1e-5, atol=1e-6, err_msg=k)
    flat, flat1 = jax.tree.leaves(grads), jax.tree.leaves(grads1)
    assert len(flat) == len(flat1) and any(np.abs(g).max() > 0 for g in flat1)
    for g, g1 in zip(flat, flat1):
        np.testing.assert_allclose(g, g1, rtol=1e-4, atol=2e-6 * max(1.0, float(np.abs(g1).max())))
