"""Sequence packing (dense_cf.inputs.packing + the encoder's segment ids): the layout, its
errors, and the packed batch giving the padded batch's embeddings, loss and gradients."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dense_cf.inputs import packing
from dense_cf.models.bert import BertConfig
from dense_cf.models.dual_encoder import DualEncoder

CFG = BertConfig.tiny(vocab_size=64, hidden=32, layers=2, heads=2)
LENGTHS = [5, 17, 3, 9, 12, 2, 20, 7]
LP, ROW = 24, 32


def _padded(lengths=LENGTHS, lp=LP, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, CFG.vocab_size, size=(len(lengths), lp)).astype(np.int32)
    ids[:, 0] = 1  # [CLS]
    mask = (np.arange(lp)[None] < np.array(lengths)[:, None]).astype(np.int32)
    return ids * mask, mask


def test_layout_keeps_every_passage_and_restarts_positions():
    ids, mask = _padded()
    b = packing.pack(ids, mask, ROW)
    assert b.real_tokens == sum(LENGTHS)
    assert b.ids.shape[0] == len(packing.assign_rows(np.array(LENGTHS), ROW)) < len(LENGTHS)
    flat_ids, flat_pos = b.ids.reshape(-1), b.position_ids.reshape(-1)
    for p, n in enumerate(LENGTHS):
        s = b.starts[p]
        np.testing.assert_array_equal(flat_ids[s:s + n], ids[p, :n])
        np.testing.assert_array_equal(flat_pos[s:s + n], np.arange(n))
        seg = b.segment_ids.reshape(-1)[s:s + n]
        assert seg.min() == seg.max() > 0
    np.testing.assert_array_equal(b.mask, (b.segment_ids > 0).astype(np.int32))
    assert 0 < b.fill <= 1


def test_max_segments_num_rows_and_errors():
    ids, mask = _padded()
    b = packing.pack(ids, mask, ROW, max_segments=2, num_rows=6)
    assert b.ids.shape == (6, ROW) and b.segment_ids.max() <= 2
    with pytest.raises(ValueError, match="num_rows=2"):
        packing.pack(ids, mask, ROW, num_rows=2)
    with pytest.raises(ValueError, match="passage 1 has 17 tokens"):
        packing.pack(ids, mask, 16)
    bad = mask.copy()
    bad[1, 0] = 0
    with pytest.raises(ValueError, match="passage 1: mask is not right-padded"):
        packing.pack(ids, bad, ROW)


@pytest.mark.parametrize("pooling,impl", [("cls", "einsum"), ("mean", "einsum"), ("cls", "xla")])
def test_packed_equals_padded_embeddings_loss_and_grads(pooling, impl):
    cfg = CFG.replace(attention_impl=impl)
    model = DualEncoder(cfg, pooling=pooling)
    ids, mask = _padded()
    b = packing.pack(ids, mask, ROW)
    rng = np.random.default_rng(1)
    q_ids = rng.integers(3, CFG.vocab_size, size=(len(LENGTHS), 6)).astype(np.int32)
    q_mask = np.ones_like(q_ids)
    params = nn.unbox(model.init(jax.random.key(0), q_ids, q_mask, ids, mask))["params"]
    labels = jnp.arange(len(LENGTHS))

    def loss(p, passages):
        q = model.apply({"params": p}, q_ids, q_mask, method=model.encode_question)
        scores = q @ passages(p).T
        return optax.softmax_cross_entropy_with_integer_labels(scores, labels).mean()

    def padded(p):
        return model.apply({"params": p}, ids, mask, method=model.encode_passage)

    def packed(p):
        return model.apply({"params": p}, b.ids, b.mask, b.segment_ids, b.position_ids, b.starts,
                           method=model.encode_passage_packed)

    np.testing.assert_allclose(jax.jit(packed)(params), jax.jit(padded)(params), rtol=1e-5,
                               atol=1e-5)
    l_pad, g_pad = jax.jit(jax.value_and_grad(lambda p: loss(p, padded)))(params)
    l_pack, g_pack = jax.jit(jax.value_and_grad(lambda p: loss(p, packed)))(params)
    np.testing.assert_allclose(l_pack, l_pad, rtol=1e-5)
    paths = jax.tree_util.tree_leaves_with_path(g_pad)
    assert jax.tree.structure(g_pad) == jax.tree.structure(g_pack)
    for (path, a), b_ in zip(paths, jax.tree.leaves(g_pack)):
        np.testing.assert_allclose(b_, a, rtol=1e-4, atol=1e-5, err_msg=jax.tree_util.keystr(path))
