"""Training levers of BertConfig (issue 47): each is off by default, keeps the param tree (so
checkpoints and the HF export are untouched), and the numerics-preserving ones give the
baseline's outputs, loss and gradients (float32, dropout active with the same key)."""

import contextlib
import io

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.ad_checkpoint import print_saved_residuals

from dense_cf.configs.base import base_config
from dense_cf.models.bert import MATMUL_NAMES, BertConfig, BertEncoder
from dense_cf.models.dual_encoder import model_from_config

CFG = BertConfig.tiny(vocab_size=64, hidden=32, layers=2, heads=2)


def _batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(1, CFG.vocab_size, size=(3, 9)).astype(np.int32)
    mask = (np.arange(9)[None] < np.array([9, 6, 2])[:, None]).astype(np.int32)
    return jnp.asarray(ids * mask), jnp.asarray(mask)


def _loss_and_grads(cfg, params):
    ids, mask = _batch()
    model = BertEncoder(cfg)

    def loss(p):
        out = model.apply({"params": p}, ids, mask, deterministic=False,
                          rngs={"dropout": jax.random.key(3)})
        return jnp.mean(jnp.square(out * mask[..., None]))

    return jax.jit(jax.value_and_grad(loss))(params)


@pytest.fixture(scope="module")
def params():
    ids, mask = _batch()
    return nn.unbox(jax.jit(BertEncoder(CFG).init)(jax.random.key(0), ids, mask))["params"]


def test_levers_are_off_by_default():
    assert not CFG.layer_norm_remat and not CFG.fused_qkv and not CFG.remat
    assert CFG.hidden_act == "gelu" and CFG.attention_impl == "einsum"


@pytest.mark.parametrize("over", [dict(layer_norm_remat=True), dict(fused_qkv=True),
                                  dict(remat=True, remat_policy="matmul_outputs")])
def test_lever_keeps_param_tree(over):
    ids, mask = _batch()
    base = jax.eval_shape(BertEncoder(CFG).init, jax.random.key(0), ids, mask)
    lever = jax.eval_shape(BertEncoder(CFG.replace(**over)).init, jax.random.key(0), ids, mask)
    assert jax.tree.structure(nn.unbox(base)) == jax.tree.structure(nn.unbox(lever))
    assert jax.tree.map(lambda a, b: a.shape == b.shape, nn.unbox(base), nn.unbox(lever))


@pytest.mark.parametrize("over", [dict(layer_norm_remat=True), dict(fused_qkv=True),
                                  dict(remat=True, remat_policy="matmul_outputs"),
                                  dict(layer_norm_remat=True, fused_qkv=True,
                                       attention_impl="xla")])
def test_numerics_preserving_lever_same_loss_and_grads(params, over):
    base_loss, base_g = _loss_and_grads(CFG.replace(attention_dropout_rate=0.0), params)
    loss, g = _loss_and_grads(CFG.replace(attention_dropout_rate=0.0, **over), params)
    np.testing.assert_allclose(loss, base_loss, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(base_g)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)


def test_ln_remat_in_bfloat16_within_tolerance(params):
    cfg = CFG.replace(dtype="bfloat16", attention_dropout_rate=0.0)
    base_loss, base_g = _loss_and_grads(cfg, params)
    loss, g = _loss_and_grads(cfg.replace(layer_norm_remat=True), params)
    np.testing.assert_allclose(loss, base_loss, rtol=1e-2)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(base_g)):
        np.testing.assert_allclose(a, b, rtol=5e-2, atol=5e-3)


def test_tanh_gelu_is_opt_in_and_changes_the_output(params):
    ids, mask = _batch()
    erf = BertEncoder(CFG).apply({"params": params}, ids, mask)
    tanh = BertEncoder(CFG.replace(hidden_act="gelu_new")).apply({"params": params}, ids, mask)
    diff = float(jnp.max(jnp.abs(erf - tanh)))
    assert 0 < diff < 1e-2, diff


def test_matmul_outputs_policy_saves_only_the_named_matmuls():
    # The policy's residuals are exactly the tagged matmul outputs (plus the layer inputs).
    cfg = CFG.replace(remat=True, remat_policy="matmul_outputs", dropout_rate=0.0,
                      attention_dropout_rate=0.0, num_layers=1)
    ids, mask = _batch()
    model = BertEncoder(cfg)
    p = nn.unbox(model.init(jax.random.key(0), ids, mask))["params"]

    def f(p):
        return jnp.sum(model.apply({"params": p}, ids, mask))

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_saved_residuals(f, p)
    named = [ln for ln in buf.getvalue().splitlines() if "named" in ln]
    names = {n for ln in named for n in MATMUL_NAMES if f"'{n}'" in ln}
    assert names == {"query_proj", "key_proj", "value_proj", "attention_out", "mlp_in", "mlp_out"}


def test_config_switches_reach_the_model():
    c = base_config()
    c.model.name_or_path = "tiny"
    model, _ = model_from_config(c)
    assert not model.config.layer_norm_remat and not model.config.fused_qkv
    assert model.config.hidden_act == "gelu"
    c.model.layer_norm_remat, c.model.fused_qkv, c.model.hidden_act = True, True, "gelu_new"
    c.model.remat, c.model.remat_policy = True, "matmul_outputs"
    model, _ = model_from_config(c)
    cfg = model.config
    assert cfg.layer_norm_remat and cfg.fused_qkv and cfg.hidden_act == "gelu_new"
    assert cfg.remat_policy == "matmul_outputs"
