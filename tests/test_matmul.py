"""bfloat16 matmul operands with float32 sums (``models.matmul.mixed_einsum``, ``BertConfig.matmul_dtype``)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dense_cf.configs.base import base_config
from dense_cf.models.bert import BertConfig, BertEncoder
from dense_cf.models.dual_encoder import runtime_overrides
from dense_cf.models.matmul import mixed_einsum
from dense_cf.train.validate import problems

BF16 = jnp.bfloat16


def _round(x):
    return np.asarray(jnp.asarray(x).astype(BF16).astype(jnp.float32), np.float64)


# Every contraction the model's weight matmuls make (x[..., in] . kernel[in, ...]).
SPECS = [("abc,cd->abd", (3, 5, 8), (8, 6)),          # MLP in/out
         ("abc,cde->abde", (3, 5, 8), (8, 2, 4)),     # query/key/value
         ("abcd,cde->abe", (3, 5, 2, 4), (2, 4, 8))]  # attention output


@pytest.mark.parametrize("spec,sa,sb", SPECS)
@pytest.mark.parametrize("jit", [False, True])
def test_value_and_gradients_are_the_rounded_operands_float64(spec, sa, sb, jit):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=sa).astype(np.float32), rng.normal(size=sb).astype(np.float32)
    g = rng.normal(size=np.einsum(spec, a, b).shape).astype(np.float32)
    def f(a, b):
        return mixed_einsum(spec, a, b, BF16)

    f = jax.jit(f) if jit else f
    out, pull = jax.vjp(f, jnp.asarray(a), jnp.asarray(b))
    assert out.dtype == jnp.float32
    ra, rb, rg = _round(a), _round(b), _round(g)
    # Products of bf16 values are exact in float32; only the float32 sums round.
    np.testing.assert_allclose(np.asarray(out), np.einsum(spec, ra, rb), rtol=1e-5, atol=1e-5)
    da, db = pull(jnp.asarray(g))
    ins, o = spec.split("->")
    sa_, sb_ = ins.split(",")
    assert da.dtype == db.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(da), np.einsum(f"{o},{sb_}->{sa_}", rg, rb), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(db), np.einsum(f"{sa_},{o}->{sb_}", ra, rg), rtol=1e-5, atol=1e-5)


def test_specs_whose_gradient_is_not_an_einsum_are_refused():
    a = jnp.ones((2, 3))
    with pytest.raises(ValueError, match="indices"):
        mixed_einsum("ab,bc->c", a, jnp.ones((3, 4)), BF16)  # a's "a" summed away inside a
    with pytest.raises(ValueError, match="indices"):
        mixed_einsum("aa,ab->b", jnp.ones((3, 3)), jnp.ones((3, 4)), BF16)


def _batch(cfg, b=2, length=12, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, cfg.vocab_size, size=(b, length)).astype(np.int32)
    mask = (np.arange(length)[None] < np.array([length, length - 5])[:, None]).astype(np.int32)
    return jnp.asarray(ids * mask), jnp.asarray(mask)


def _flat(tree):
    return np.concatenate([np.ravel(x) for x in jax.tree.leaves(nn.unbox(tree))])


@pytest.mark.parametrize("shape", ["tiny", "minilm_layer"])
def test_encoder_with_bfloat16_operands_tracks_float32(shape):
    # minilm_layer: one layer at MiniLM's widths (384 hidden, 12 heads, 1536 inner), where XLA
    # takes its library GEMM path rather than the small-dot one.
    cfg = (BertConfig.tiny(vocab_size=64, hidden=32, layers=2, heads=2) if shape == "tiny" else
           BertConfig.tiny(vocab_size=64, hidden=384, layers=1, heads=12, intermediate=1536))
    mixed = cfg.replace(matmul_dtype="bfloat16")
    assert not cfg.mixed_matmuls and mixed.mixed_matmuls and mixed.dtype == "float32"
    ids, mask = _batch(cfg)
    params = jax.jit(BertEncoder(cfg).init)(jax.random.key(0), ids, mask)
    # Same parameter tree: matmul_dtype is a run-time choice, checkpoints do not see it.
    assert jax.tree.structure(params) == jax.tree.structure(
        jax.eval_shape(BertEncoder(mixed).init, jax.random.key(0), ids, mask))

    def loss(c):
        return jax.jit(jax.value_and_grad(
            lambda p: jnp.sum(jnp.tanh(BertEncoder(c).apply(p, ids, mask)[:, 0]))))

    (l32, g32), (l16, g16) = loss(cfg)(params), loss(mixed)(params)
    o32 = BertEncoder(cfg).apply(params, ids, mask)
    o16 = BertEncoder(mixed).apply(params, ids, mask)  # eager: op-by-op dispatch works too
    assert o16.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(o16)))
    # bf16 has 8 significant bits: outputs move by ~1e-3 relative, not more; the result is not
    # the float32 one (the operands really are rounded).
    rel = float(jnp.linalg.norm(o16 - o32) / jnp.linalg.norm(o32))
    assert 1e-5 < rel < 2e-2, rel
    a, b = _flat(g16), _flat(g32)
    cos = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    assert cos > 0.999 and abs(float(l16) - float(l32)) < 2e-2 * abs(float(l32)) + 1e-3, (cos, l16, l32)


def test_float32_operands_are_the_plain_path():
    # matmul_dtype "" or equal to dtype: no rounding, bit-identical to the default config.
    cfg = BertConfig.tiny(vocab_size=64, hidden=32, layers=1, heads=2)
    ids, mask = _batch(cfg)
    params = jax.jit(BertEncoder(cfg).init)(jax.random.key(1), ids, mask)
    same = cfg.replace(matmul_dtype="float32")
    assert same.matmul_dtype == "float32" and not same.mixed_matmuls
    np.testing.assert_array_equal(np.asarray(BertEncoder(cfg).apply(params, ids, mask)),
                                  np.asarray(BertEncoder(same).apply(params, ids, mask)))


def test_config_plumbing_and_validation():
    cfg = base_config()
    assert runtime_overrides(cfg.model)["matmul_dtype"] == ""
    cfg.model.matmul_dtype = "bfloat16"
    assert runtime_overrides(cfg.model)["matmul_dtype"] == "bfloat16"
    assert not [e for e in problems(cfg, check_files=False) if "matmul_dtype" in e]
    cfg.model.matmul_dtype = "int8"
    assert [e for e in problems(cfg, check_files=False) if "matmul_dtype" in e]
