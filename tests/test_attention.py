"""BertConfig.attention_impl: jax.nn.dot_product_attention equals the einsum attention.

On CPU "dot_product" resolves to XLA's implementation (cuDNN is GPU-only); the GPU run of this
file (docs/feasibility.md) also exercises "cudnn" through the bfloat16 case.
"""

import json

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import linen as nn

from dense_cf import methods
from dense_cf.configs.base import base_config, merge_over_base
from dense_cf.models.bert import BertConfig, BertEncoder, _fused_impl
from dense_cf.models.dual_encoder import model_from_config

B, L, V = 4, 16, 64


def _inputs(seed: int = 0) -> tuple[jax.Array, jax.Array]:
    r = np.random.default_rng(seed)
    ids = r.integers(1, V, size=(B, L)).astype(np.int32)
    lengths = np.array([L, 11, 5, 1])  # full row, padding, heavy padding, [CLS] only
    mask = (np.arange(L)[None] < lengths[:, None]).astype(np.int32)
    ids = ids * mask
    return jnp.asarray(ids), jnp.asarray(mask)


def _run(cfg: BertConfig, params, ids, mask, deterministic: bool = True, rng=None):
    rngs = {"dropout": rng} if rng is not None else None
    return BertEncoder(cfg).apply({"params": params}, ids, mask, deterministic=deterministic,
                                  rngs=rngs)


def _setup(dtype: str = "float32", **kw):
    cfg = BertConfig.tiny(vocab_size=V, hidden=32, layers=2, heads=4, max_position_embeddings=L,
                          dtype=dtype, **kw)
    ids, mask = _inputs()
    params = nn.meta.unbox(BertEncoder(cfg).init(jax.random.key(0), ids, mask)["params"])
    return cfg, params, ids, mask


@pytest.mark.parametrize("impl", ["dot_product", "xla"])
def test_dot_product_attention_matches_einsum_with_padding(impl):
    cfg, params, ids, mask = _setup()
    ref = _run(cfg, params, ids, mask)
    out = _run(cfg.replace(attention_impl=impl), params, ids, mask)
    valid = np.asarray(mask, bool)  # padded positions carry no meaning in either path
    np.testing.assert_allclose(np.asarray(out)[valid], np.asarray(ref)[valid], atol=2e-5, rtol=2e-5)


def test_dot_product_attention_gradients_match_einsum():
    cfg, params, ids, mask = _setup()

    def loss(p, c):
        return jnp.sum(_run(c, p, ids, mask)[:, 0] ** 2)

    g_ref = jax.grad(loss)(params, cfg)
    for impl in ("dot_product", "xla"):  # on the CPU dot_product is the einsum path itself
        g_dp = jax.grad(loss)(params, cfg.replace(attention_impl=impl))
        for a, b in zip(jax.tree.leaves(g_dp), jax.tree.leaves(g_ref)):
            np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-4, err_msg=impl)


def test_bfloat16_dot_product_attention_close_to_einsum():
    cfg, params, ids, mask = _setup("bfloat16")
    ref = np.asarray(_run(cfg, params, ids, mask), np.float32)
    out = np.asarray(_run(cfg.replace(attention_impl="dot_product"), params, ids, mask), np.float32)
    valid = np.asarray(mask, bool)
    err = np.linalg.norm(out[valid] - ref[valid]) / np.linalg.norm(ref[valid])
    assert err < 2e-2, err  # bf16 operands, differently rounded scale: ~1e-3..1e-2


def test_training_with_attention_dropout_takes_the_einsum_path():
    """No dropout in jax.nn.dot_product_attention: with attention dropout active every impl runs
    the einsum path, so the dropout masks (and outputs) are identical."""
    cfg, params, ids, mask = _setup(dropout_rate=0.1, attention_dropout_rate=0.1)
    rng = jax.random.key(7)
    ref = _run(cfg, params, ids, mask, deterministic=False, rng=rng)
    out = _run(cfg.replace(attention_impl="dot_product"), params, ids, mask, deterministic=False,
               rng=rng)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(ref))
    assert _fused_impl(cfg.replace(attention_impl="dot_product"), attn_dropout=True) is None


def test_training_without_attention_dropout_uses_dot_product():
    """Hidden dropout on, attention dropout 0: the fused path trains; same dropout masks on the
    hidden states, so the outputs agree with the einsum path."""
    cfg, params, ids, mask = _setup(dropout_rate=0.1, attention_dropout_rate=0.0)
    rng = jax.random.key(7)
    ref = _run(cfg, params, ids, mask, deterministic=False, rng=rng)
    dp = cfg.replace(attention_impl="dot_product")
    backend = jax.default_backend()
    # On the CPU "dot_product" is the (head-major) einsum path, faster there than XLA's.
    assert _fused_impl(dp, attn_dropout=False) == (
        "cudnn" if backend == "gpu" and dp.dtype != "float32" else None if backend == "cpu"
        else "xla")
    valid = np.asarray(mask, bool)
    for impl in ("dot_product", "xla"):  # the fused path XLA implements trains too
        out = _run(cfg.replace(attention_impl=impl), params, ids, mask, deterministic=False, rng=rng)
        np.testing.assert_allclose(np.asarray(out)[valid], np.asarray(ref)[valid], atol=2e-5,
                                   rtol=2e-5, err_msg=impl)


def test_attention_impl_validated():
    with pytest.raises(ValueError, match="attention_impl"):
        BertConfig.tiny(attention_impl="flash")


def test_attention_impl_round_trips_through_run_config_and_dict():
    cfg = base_config()
    cfg.model.name_or_path = "tiny"
    cfg.model.attention_impl = "dot_product"
    cfg.model.attention_dropout = 0.0
    # A run's config.json (train() writes to_json_best_effort; load_config reads it back).
    reloaded = ml_collections.ConfigDict(json.loads(cfg.to_json_best_effort()))
    model, _ = model_from_config(reloaded)
    assert model.config.attention_impl == "dot_product"
    assert model.config.attention_dropout_rate == 0.0 and model.config.dropout_rate == 0.1
    assert BertConfig(**model.config.to_dict()) == model.config
    # Old run configs without the fields take the base's defaults (loaders merge over the base).
    del reloaded.model["attention_impl"], reloaded.model["attention_dropout"]
    model, _ = model_from_config(merge_over_base(reloaded))
    assert model.config.attention_impl == base_config().model.attention_impl == "dot_product"
    assert model.config.attention_dropout_rate == 0.1


def test_accelerator_config_builds_bf16_fused_attention_model():
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs", "picl_nq_accel.py")
    spec = importlib.util.spec_from_file_location("picl_nq_accel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cfg = mod.get_config()
    cfg.model.name_or_path = "tiny"
    model, _ = model_from_config(cfg)
    c = model.config
    assert (c.dtype, c.param_dtype, c.attention_impl) == ("bfloat16", "float32", "dot_product")
    assert c.attention_dropout_rate == 0.0 and c.dropout_rate == 0.1
    hp = methods.get(cfg.method).loss_hparams(cfg.loss)
    assert cfg.method == "picl" and (hp["lam"], hp["tau1"], hp["tau2"]) == (0.2, 1.0, 1.0)
