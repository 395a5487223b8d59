"""Mixed precision (bfloat16 compute, float32 master weights) and remat, from the config."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn
from helpers import random_batch

from dense_cf import methods
from dense_cf.configs.base import base_config
from dense_cf.models.bert import BertConfig
from dense_cf.models.dual_encoder import DualEncoder, model_from_config
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.train import run as run_lib
from dense_cf.train.state import make_optimizer
from dense_cf.train.step import batch_loss, make_train_step

METHOD = methods.get("picl")  # loss weights come from each test's LOSS

N, LQ, LP, H, V = 8, 8, 32, 1, 64
LOSS = dict(lam=0.2, tau1=1.0, tau2=1.0, use_dpr=True)


def _batch(n=N, lp=LP, seed=0):
    return random_batch(n, LQ, lp, H, V, seed=seed)


def _model(**kw):
    return DualEncoder(BertConfig.tiny(vocab_size=V, hidden=64, layers=2, heads=2,
                                       max_position_embeddings=64, **kw))


def _params(model):
    ids = jnp.ones((1, LP), jnp.int32)
    return nn.meta.unbox(model.init(jax.random.key(0), ids, ids, ids, ids)["params"])


def _dot_dtypes(jaxpr) -> list[tuple[str, bool]]:
    """(operand dtype, is-HIGHEST-precision) of every dot_general, sub-jaxprs included."""
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            prec = eqn.params.get("precision")
            highest = prec is not None and jax.lax.Precision.HIGHEST in tuple(prec)
            out.append((str(eqn.invars[0].aval.dtype), highest))
        for sub in jax.core.jaxprs_in_params(eqn.params):
            out.extend(_dot_dtypes(sub))
    return out


def _grad_fn(model, dropout=False):
    rngs = {"dropout": jax.random.key(3, impl="rbg")} if dropout else None  # rbg compiles fast

    def f(p, b):
        return jax.value_and_grad(
            lambda p: batch_loss(METHOD, model, p, b, loss_hparams=LOSS, mesh=None,
                                 deterministic=not dropout, rngs=rngs),
            has_aux=True)(p)
    return f


def test_bfloat16_config_keeps_float32_master_weights_and_optimizer_state():
    cfg = base_config()
    cfg.model.name_or_path, cfg.model.tiny_hidden, cfg.model.tiny_layers = "tiny", 32, 1
    cfg.model.tiny_vocab, cfg.model.dtype = V, "bfloat16"
    cfg.data.max_q_len, cfg.data.max_p_len = LQ, LP
    cfg.optim.warmup_steps = 1
    model, _ = model_from_config(cfg)
    assert model.config.compute_dtype == jnp.bfloat16 and model.config.params_dtype == jnp.float32
    mesh = mesh_lib.make_mesh(1, 1, devices=jax.devices()[:1])
    tx, sched = make_optimizer(cfg.optim, total_steps=10)
    with jax.set_mesh(mesh):
        state = run_lib.init_state(cfg, model, None, tx, mesh, (), jax.random.key(0))
        step = jax.jit(make_train_step(METHOD, model, tx, loss_hparams=LOSS, mesh=mesh, schedule=sched))
        batch = mesh_lib.global_batch(_batch(), mesh)
        jaxpr = jax.make_jaxpr(step)(state, batch, jax.random.key(1)).jaxpr
        new, m = step(state, batch, jax.random.key(1))
        new, m = step(new, batch, jax.random.key(1))   # step 0 has learning rate 0 (warm-up)

    def floats(tree):
        return [x for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)]
    for name, tree in (("params", new.params), ("opt_state", new.opt_state)):
        dtypes = {str(x.dtype) for x in floats(tree)}
        assert dtypes == {"float32"}, (name, dtypes)
    assert np.isfinite(float(m["loss"])) and np.isfinite(float(m["grad_norm"]))
    assert float(m["grad_norm"]) > 0
    changed = [not np.array_equal(a, b) for a, b in zip(floats(state.params), floats(new.params))]
    assert all(changed)   # float32 masters take the (small) update bf16 weights could lose
    # Activations: every encoder matmul runs in bfloat16 (fwd and bwd); only the loss's
    # scores are float32 at HIGHEST precision (losses.py).
    dots = _dot_dtypes(jaxpr)
    assert {d for d, hi in dots if not hi} == {"bfloat16"}, dots
    assert sum(d == "bfloat16" for d, _ in dots) > 2 * sum(hi for _, hi in dots)


def test_bfloat16_grads_close_to_float32_grads():
    f32, bf16 = _model(), _model(dtype="bfloat16")
    params = _params(f32)
    batch = jax.tree.map(jnp.asarray, _batch())
    (l32, _), g32 = jax.jit(_grad_fn(f32))(params, batch)
    (l16, _), g16 = jax.jit(_grad_fn(bf16))(params, batch)
    assert np.isfinite(float(l16))
    np.testing.assert_allclose(float(l16), float(l32), rtol=2e-2)
    assert {str(g.dtype) for g in jax.tree.leaves(g16)} == {"float32"}
    a = np.concatenate([np.ravel(x) for x in jax.tree.leaves(g32)])
    b = np.concatenate([np.ravel(x) for x in jax.tree.leaves(g16)])
    # bfloat16 keeps ~3 significant digits: compare directions and norms, loosely.
    cos = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
    assert cos > 0.99, cos
    assert abs(np.linalg.norm(b) / np.linalg.norm(a) - 1) < 0.05


def _residual_bytes(model, params, batch) -> int:
    """Bytes autodiff keeps for the backward pass (the leaves of the vjp closure), traced only."""
    def f(p):
        return batch_loss(METHOD, model, p, batch, loss_hparams=LOSS, mesh=None, deterministic=False,
                          rngs={"dropout": jax.random.key(3)})[0]
    res = jax.eval_shape(lambda p: jax.tree.leaves(jax.vjp(f, p)[1]), params)
    return sum(x.size * x.dtype.itemsize for x in res)


def test_remat_saves_memory_and_keeps_gradients():
    """Remat shrinks what the backward pass keeps (nothing_saveable < dots policy < off) and
    leaves the gradients unchanged (dropout on).

    Measured on the saved residuals, not on XLA:CPU's buffer assignment: the CPU compiler
    re-fuses the recomputation into the forward pass (its ``memory_analysis`` is the same with and
    without remat, even for a plain jax.checkpoint'ed MLP), while GPU/TPU keep it.
    """
    batch = jax.tree.map(jnp.asarray, _batch(n=16, lp=64))
    params = _params(_model())
    res = {name: _residual_bytes(_model(**kw), params, batch) for name, kw in (
        ("off", {}), ("nothing", dict(remat=True)),
        ("dots", dict(remat=True, remat_policy="dots_with_no_batch_dims_saveable")))}
    assert res["nothing"] < 0.2 * res["off"], res
    assert res["nothing"] < res["dots"] < res["off"], res
    (l0, _), g0 = jax.jit(_grad_fn(_model(), dropout=True))(params, batch)
    (l1, _), g1 = jax.jit(_grad_fn(_model(remat=True), dropout=True))(params, batch)
    np.testing.assert_allclose(float(l1), float(l0), rtol=1e-6)
    # Remat recomputes the forward inside the backward, and XLA:CPU fuses that recomputation
    # (the head-major attention matmuls included) differently: sums are reordered, so a few
    # elements differ at ~4e-4 relative (1 of 4,096 in one gradient measured).
    for x, y in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
        np.testing.assert_allclose(x, y, rtol=1e-3, atol=1e-6)


def test_unknown_remat_policy_is_a_clear_error():
    with pytest.raises(ValueError, match="remat_policy"):
        BertConfig.tiny(remat=True, remat_policy="everything")
