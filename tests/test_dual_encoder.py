"""DualEncoder: shared vs separate towers, CLS vs mean pooling, pretrained placement, config helper."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from dense_cf.configs.base import merge_over_base
from dense_cf.models.bert import BertConfig, BertEncoder
from dense_cf.models.dual_encoder import DualEncoder, init_params, model_from_config, pretrained_params

CFG = BertConfig.tiny(vocab_size=40, hidden=16, layers=1, heads=2)


def _batch():
    ids = np.array([[2, 5, 7, 9, 3, 0], [2, 8, 3, 0, 0, 0]], np.int32)
    return ids, (ids > 0).astype(np.int32)


def _random_params(model, seed=0):
    """Init-shaped plain params with numpy values (eval_shape: no slow RNG compile)."""
    abstract = nn.unbox(jax.eval_shape(lambda: init_params(model, jax.random.key(0))))
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: rng.normal(scale=0.2, size=s.shape).astype(np.float32), abstract)


def test_param_trees_shared_vs_separate():
    enc = nn.unbox(jax.eval_shape(lambda: BertEncoder(CFG).init(jax.random.key(0), *_batch())))["params"]
    sep = jax.eval_shape(lambda: init_params(DualEncoder(CFG), jax.random.key(0)))
    shared = jax.eval_shape(lambda: init_params(DualEncoder(CFG, shared=True), jax.random.key(0)))
    assert set(sep) == {"question", "passage"} and set(shared) == {"shared"}
    for tree in (sep["question"], sep["passage"], shared["shared"]):
        assert jax.tree.structure(nn.unbox(tree)) == jax.tree.structure(enc)
    leaves = jax.tree.leaves(sep, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))
    assert all(isinstance(x, nn.LogicallyPartitioned) for x in leaves)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_pooling_by_hand(pooling):
    ids, mask = _batch()
    model = DualEncoder(CFG, pooling=pooling)
    params = _random_params(model)
    bert = BertEncoder(CFG)

    @jax.jit
    def run(prm):  # one compile for everything this test needs
        q = model.apply({"params": prm}, ids, mask, method=DualEncoder.encode_question)
        p = model.apply({"params": prm}, ids, mask, method=DualEncoder.encode_passage)
        hq = bert.apply({"params": prm["question"]}, ids, mask)
        hp = bert.apply({"params": prm["passage"]}, ids, mask)
        return q, p, hq, hp

    q, p, hq, hp = map(np.asarray, run(params))
    for emb, h in ((q, hq), (p, hp)):
        if pooling == "cls":
            want = h[:, 0]
        else:
            want = (h * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        assert emb.dtype == np.float32 and emb.shape == (2, 16)
        np.testing.assert_allclose(emb, want, atol=1e-5)
    assert np.abs(q - p).max() > 1e-3  # separate towers with different weights


def test_shared_tower_encodes_both_sides_identically():
    ids, mask = _batch()
    model = DualEncoder(CFG, shared=True)
    params = _random_params(model)
    q, p = jax.jit(lambda prm: model.apply({"params": prm}, ids, mask, ids, mask))(params)
    np.testing.assert_array_equal(np.asarray(q), np.asarray(p))


def test_mean_pooling_all_padding_row_is_zero_not_nan():
    from dense_cf.models.dual_encoder import pool

    h = jnp.ones((2, 3, 4), jnp.bfloat16)
    out = pool(h, jnp.array([[1, 1, 0], [0, 0, 0]]), "mean")
    assert out.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(out), [[1] * 4, [0] * 4])
    with pytest.raises(ValueError):
        pool(h, h[..., 0], "max")


def test_bfloat16_outputs_float32():
    ids, mask = _batch()
    model = DualEncoder(CFG.replace(dtype="bfloat16"))
    params = _random_params(model)
    q, p = jax.jit(lambda prm: model.apply({"params": prm}, ids, mask, ids, mask))(params)
    assert q.dtype == jnp.float32 and p.dtype == jnp.float32 and np.isfinite(np.asarray(q)).all()


def test_pretrained_params_copies_into_towers():
    model = DualEncoder(CFG)
    hf = _random_params(DualEncoder(CFG, shared=True))["shared"]
    boxed = pretrained_params(model, hf)
    abstract = jax.eval_shape(lambda: init_params(model, jax.random.key(0)))
    is_box = lambda x: isinstance(x, nn.LogicallyPartitioned)  # noqa: E731
    assert jax.tree.structure(boxed, is_leaf=is_box) == jax.tree.structure(abstract, is_leaf=is_box)
    assert nn.get_partition_spec(boxed) == nn.get_partition_spec(abstract)
    plain = nn.unbox(boxed)
    jax.tree.map(np.testing.assert_array_equal, plain["question"], hf)
    jax.tree.map(np.testing.assert_array_equal, plain["passage"], hf)
    q_emb = plain["question"]["embeddings"]["word_embeddings"]["embedding"]
    p_emb = plain["passage"]["embeddings"]["word_embeddings"]["embedding"]
    assert not np.shares_memory(q_emb, p_emb)  # separate towers must train independently
    shared = pretrained_params(DualEncoder(CFG, shared=True), hf, boxed=False)
    assert set(shared) == {"shared"}


def test_model_from_config_tiny_and_minilm():
    cfg = ml_collections.ConfigDict(
        {"model": {"name_or_path": "tiny", "shared": True, "pooling": "mean", "dtype": "bfloat16",
                   "remat": True, "dropout": 0.0, "tiny_hidden": 24, "tiny_layers": 3, "tiny_heads": 4,
                   "tiny_vocab": 99}}
    )
    model, model_dir = model_from_config(merge_over_base(cfg))
    assert model_dir is None and model.shared and model.pooling == "mean"
    c = model.config
    assert (c.vocab_size, c.hidden_size, c.num_layers, c.num_heads) == (99, 24, 3, 4)
    assert c.dtype == "bfloat16" and c.remat and c.dropout_rate == 0.0 and c.attention_dropout_rate == 0.0
    cfg.model.name_or_path = "minilm"
    cfg.model.shared = False
    model, model_dir = model_from_config(merge_over_base(cfg))
    assert model_dir is not None and model.config.hidden_size == 384 and model.config.num_layers == 6


def test_invalid_pooling():
    with pytest.raises(ValueError, match="pooling"):
        jax.eval_shape(lambda: init_params(DualEncoder(CFG, pooling="max"), jax.random.key(0)))
