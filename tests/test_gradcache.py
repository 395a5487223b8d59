"""GradCache (train/gradcache.py) gives the plain step's gradients on 8 simulated devices."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn
from helpers import random_batch, sharded_params

from dense_cf import methods
from dense_cf.configs.base import base_config
from dense_cf.methods import embed_passages
from dense_cf.models.bert import BertConfig
from dense_cf.models.dual_encoder import DualEncoder
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.train import gradcache
from dense_cf.train.state import TrainState, make_optimizer
from dense_cf.train.step import batch_loss, gathered_loss, make_train_step

METHOD = methods.get("picl")  # loss weights come from each test's LOSS

B, LQ, LP, H, V = 32, 8, 16, 1, 64
MODEL = DualEncoder(BertConfig.tiny(vocab_size=V, hidden=32, layers=1, heads=2,
                                    max_position_embeddings=32), shared=False)
LOSS = dict(lam=0.2, tau1=1.0, tau2=1.0, use_dpr=True)   # every PiCL term on


def _batch(seed=0):
    return random_batch(B, LQ, LP, H, V, seed=seed, valid_p=0.8)


@functools.lru_cache(maxsize=None)
def _setup(data, model):
    return sharded_params(MODEL, LP, data, model)


def _grads(data, model, chunks, *, dropout, reference=False):
    """(loss, metrics, grads) by GradCache (``chunks``), or with ``reference`` by autodiff through
    the chunked forward (chunks=0: the plain, unchunked batch_loss)."""
    mesh, rules, params, sh = _setup(data, model)
    rngs = {"dropout": jax.random.key(7)} if dropout else None

    def f(p, b):
        if reference:
            return jax.value_and_grad(
                lambda p: batch_loss(METHOD, MODEL, p, b, loss_hparams=LOSS, mesh=mesh,
                                     deterministic=not dropout, rngs=rngs,
                                     grad_cache_chunks=max(chunks, 1)), has_aux=True)(p)
        return gradcache.grad_cache_value_and_grad(
            lambda e: gathered_loss(METHOD, e, loss_hparams=LOSS, mesh=mesh), embed_passages, MODEL, p, b,
            num_chunks=chunks, mesh=mesh, deterministic=not dropout, rngs=rngs)

    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        batch = mesh_lib.global_batch(_batch(), mesh)
        (loss, metrics), grads = jax.jit(f, in_shardings=(sh, mesh_lib.batch_sharding(mesh)),
                                         out_shardings=(None, sh))(params, batch)
    return jax.device_get((loss, metrics, grads))


@functools.lru_cache(maxsize=None)
def _plain(data, model, dropout):
    return _grads(data, model, 0, dropout=dropout, reference=True)


def _assert_same(got, want, rtol=1e-5):
    (loss, metrics, grads), (loss1, metrics1, grads1) = got, want
    assert np.isfinite(loss1) and loss1 > 0
    np.testing.assert_allclose(loss, loss1, rtol=rtol)
    for k in metrics1:
        np.testing.assert_allclose(metrics[k], metrics1[k], rtol=rtol, atol=1e-6, err_msg=k)
    flat, flat1 = jax.tree.leaves(grads), jax.tree.leaves(grads1)
    assert len(flat) == len(flat1)
    scale = max(float(np.abs(g).max()) for g in flat1)
    assert scale > 0
    for path, g, g1 in zip(jax.tree_util.tree_leaves_with_path(grads1), flat, flat1):
        # Relative to the tensor's own scale: chunking changes only the summation order.
        tol = rtol * max(float(np.abs(g1).max()), 1e-3 * scale)
        np.testing.assert_allclose(g, g1, rtol=0, atol=tol, err_msg=jax.tree_util.keystr(path[0]))


# Compiles dominate this file's time (~7-15 s each), so each mesh/chunking/dropout combination
# is compiled once: data=4 x model=2 with 2 chunks, data=8 with 4 chunks (one example per device
# per chunk), dropout on and off.
def test_grad_cache_equals_plain_gradients():
    """Without dropout the loss is deterministic: the chunked gradients are the plain ones."""
    _assert_same(_grads(4, 2, 2, dropout=False), _plain(4, 2, False))


def test_grad_cache_with_dropout_equals_autodiff():
    """With dropout the cached gradients equal backprop through the same chunked forward (same
    masks): pass 2 replays pass 1's dropout rng per chunk."""
    got = _grads(8, 1, 4, dropout=True)
    want = _grads(8, 1, 4, dropout=True, reference=True)
    _assert_same(got, want)
    # Dropout really is on (the loss moved), and one chunk keeps the step's own key, so
    # chunks=1 draws the plain step's masks.
    rngs = {"dropout": jax.random.key(7)}
    assert abs(float(got[0]) - float(_grads(8, 1, 4, dropout=False, reference=True)[0])) > 1e-4
    assert gradcache.chunk_rngs(rngs, 0, 1) is rngs


def test_chunks_take_a_slice_of_every_device():
    """Chunk c holds the c-th slice of each data shard's examples and stays on those devices."""
    mesh = mesh_lib.make_mesh(4, 2)
    x = np.arange(32, dtype=np.int32)
    with jax.set_mesh(mesh):
        gx = mesh_lib.global_batch({"x": x}, mesh)
        chunks = jax.jit(lambda b: gradcache.split_chunks(b, 2, mesh))(gx)["x"]
        back = jax.jit(lambda c: gradcache.merge_chunks(c, mesh))(chunks)
    # 4 shards of 8 examples; chunk 0 = first 4 of every shard, chunk 1 = last 4.
    want = x.reshape(4, 2, 4).transpose(1, 0, 2).reshape(2, 16)
    np.testing.assert_array_equal(np.asarray(chunks), want)
    np.testing.assert_array_equal(np.asarray(back), x)
    # Device (data=i) holds rows of chunk c that came from its own shard i.
    for shard in chunks.addressable_shards:
        i = mesh.devices.flatten().tolist().index(shard.device) // 2
        np.testing.assert_array_equal(np.asarray(shard.data), want[:, 4 * i:4 * i + 4])


def test_indivisible_batch_is_a_clear_error():
    mesh = mesh_lib.make_mesh(8, 1)
    with pytest.raises(ValueError, match="grad_cache_chunks"):
        gradcache.split_chunks({"x": jnp.zeros((24, 3))}, 2, mesh)
    with pytest.raises(ValueError, match="grad_cache_chunks"):
        make_train_step(METHOD, MODEL, None, loss_hparams=LOSS, mesh=None, grad_cache_chunks=0)


def _train(data, model, chunks, dropout, steps=2):
    mesh, rules, params, sh = _setup(data, model)
    cfg = base_config().optim
    cfg.warmup_steps = 1
    tx, sched = make_optimizer(cfg, total_steps=10)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        state = TrainState(step=jnp.zeros((), jnp.int32), params=jax.tree.map(jnp.copy, params),
                           opt_state=jax.jit(tx.init)(params))
        state_sh = jax.tree.map(lambda x: x.sharding, state)
        step = jax.jit(make_train_step(METHOD, MODEL, tx, loss_hparams=LOSS, mesh=mesh, schedule=sched,
                                       dropout=dropout, grad_cache_chunks=chunks),
                       in_shardings=(state_sh, mesh_lib.batch_sharding(mesh), None),
                       out_shardings=(state_sh, None))
        for s in range(steps):
            state, m = step(state, mesh_lib.global_batch(_batch(s), mesh), jax.random.key(1))
        # Params and optimizer state keep their shardings (the accumulator is not replicated).
        assert jax.tree.map(lambda x: x.sharding, state) == state_sh
    return jax.device_get((state.params, m))


def test_train_step_with_grad_cache_equals_plain():
    p0, m0 = _train(8, 1, 1, dropout=False)   # chunks=1: the plain step
    p1, m1 = _train(8, 1, 4, dropout=False)
    np.testing.assert_allclose(m1["loss"], m0["loss"], rtol=1e-5)
    np.testing.assert_allclose(m1["grad_norm"], m0["grad_norm"], rtol=1e-5)
    # Adam divides by sqrt(v): compare at a fraction of lr (see test_sharding.py).
    for a, b in zip(jax.tree.leaves(p0), jax.tree.leaves(p1)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5)


def test_grad_cache_reduces_compiled_memory():
    """XLA's buffer assignment: temp memory of the step falls with the number of chunks."""
    cfg = BertConfig.tiny(vocab_size=V, hidden=64, layers=2, heads=2, max_position_embeddings=64)
    model = DualEncoder(cfg)
    n, lp = 32, 64
    params = jax.eval_shape(lambda: nn.meta.unbox(model.init(
        jax.random.key(0), *(jnp.ones((1, lp), jnp.int32),) * 4)["params"]))
    def spec(*s):
        return jax.ShapeDtypeStruct(s, jnp.int32)

    batch = {"q_ids": spec(n, LQ), "q_mask": spec(n, LQ), "pos_ids": spec(n, lp),
             "pos_mask": spec(n, lp), "hard_ids": spec(n, H, lp), "hard_mask": spec(n, H, lp),
             "cf_ids": spec(n, lp), "cf_mask": spec(n, lp),
             "hard_valid": jax.ShapeDtypeStruct((n, H), bool),
             "cf_valid": jax.ShapeDtypeStruct((n,), bool)}
    temp = {}
    for chunks in (1, 4):
        def f(p, b):
            if chunks == 1:
                return jax.value_and_grad(
                    lambda p: batch_loss(METHOD, model, p, b, loss_hparams=LOSS, mesh=None, deterministic=True),
                    has_aux=True)(p)
            return gradcache.grad_cache_value_and_grad(
                lambda e: gathered_loss(METHOD, e, loss_hparams=LOSS, mesh=None), embed_passages, model,
                p, b, num_chunks=chunks, mesh=None, deterministic=True)
        temp[chunks] = jax.jit(f).lower(params, batch).compile().memory_analysis().temp_size_in_bytes
    assert temp[4] < 0.6 * temp[1], temp
