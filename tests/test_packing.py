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


# --- Packed training batches (pack_batch, Method.pack_groups, data.pack_row_len) -------------

def _dpr_batch(n=8, h=2, lq=12, lp=24, seed=0):
    """A PiCL-format batch with varied row lengths; example 1's second hard negative and
    example 6's counterfactual are empty rows (their valid flags False)."""
    rng = np.random.default_rng(seed)

    def rows(*shape, lo):
        ids = rng.integers(5, CFG.vocab_size, size=shape).astype(np.int32)
        lengths = rng.integers(lo, shape[-1] + 1, size=shape[:-1])
        mask = (np.arange(shape[-1]) < lengths[..., None]).astype(np.int32)
        return ids * mask, mask

    b = {}
    b["q_ids"], b["q_mask"] = rows(n, lq, lo=3)
    b["pos_ids"], b["pos_mask"] = rows(n, lp, lo=4)
    b["hard_ids"], b["hard_mask"] = rows(n, h, lp, lo=4)
    b["cf_ids"], b["cf_mask"] = rows(n, lp, lo=4)
    b["hard_valid"], b["cf_valid"] = np.ones((n, h), bool), np.ones(n, bool)
    for key, idx, flag in (("hard", (1, 1), ("hard_valid", (1, 1))), ("cf", (6,), ("cf_valid", (6,)))):
        b[f"{key}_ids"][idx] = 0
        b[f"{key}_mask"][idx] = 0
        b[flag[0]][flag[1]] = False
    return b


def test_pack_batch_packs_each_data_shard_alone():
    from dense_cf.methods.base import DPR_LENGTH_GROUPS
    b = _dpr_batch()
    need = packing.rows_needed(b, DPR_LENGTH_GROUPS, 40, 2)
    out, stats = packing.pack_batch(b, DPR_LENGTH_GROUPS, 40, 2, rows={"q": need["q"] + 1})
    assert not {k for k in out if k.split("_")[0] in ("q", "pos", "hard", "cf")} - {
        "hard_valid", "cf_valid"}  # the padded token arrays are gone, the flags stay
    assert out["packed_q_ids"].shape == (2, need["q"] + 1, 40)
    assert out["packed_pos_ids"].shape == (2, need["pos"], 40)
    assert out["packed_pos_starts"].shape == (2, 4 * 4)  # 4 examples x (pos, 2 hard, cf)
    for key, parts in (("q", ("q",)), ("pos", ("pos", "hard", "cf"))):
        rows = np.concatenate([b[f"{p}_ids"][:, None] if b[f"{p}_ids"].ndim == 2 else b[f"{p}_ids"]
                               for p in parts], axis=1)
        masks = np.concatenate([b[f"{p}_mask"][:, None] if b[f"{p}_mask"].ndim == 2
                                else b[f"{p}_mask"] for p in parts], axis=1)
        for s in range(2):
            flat = out[f"packed_{key}_ids"][s].reshape(-1)
            pos = out[f"packed_{key}_position_ids"][s].reshape(-1)
            seg = out[f"packed_{key}_segment_ids"][s].reshape(-1)
            for j, start in enumerate(out[f"packed_{key}_starts"][s]):
                e, part = divmod(j, rows.shape[1])
                n = int(masks[4 * s + e, part].sum())
                if n == 0:  # an empty row points at the shard's first token
                    assert start == 0
                    continue
                np.testing.assert_array_equal(flat[start:start + n], rows[4 * s + e, part, :n])
                np.testing.assert_array_equal(pos[start:start + n], np.arange(n))
                assert seg[start] > 0 and (seg[start:start + n] == seg[start]).all()
    assert stats["tokens"] == sum(int(b[f"{p}_mask"].sum()) for p in ("q", "pos", "hard", "cf"))
    assert stats["slots"] == out["packed_q_ids"].size + out["packed_pos_ids"].size
    assert stats["slots_padded"] == sum(b[f"{p}_ids"].size for p in ("q", "pos", "hard", "cf"))
    with pytest.raises(ValueError, match="does not split into 3 data shards"):
        packing.pack_batch(b, DPR_LENGTH_GROUPS, 40, 3)
    with pytest.raises(ValueError, match="num_rows=1"):
        packing.pack_batch(b, DPR_LENGTH_GROUPS, 40, 2, rows={"pos": 1})


def test_only_embed_functions_that_read_packed_batches_declare_groups():
    from dense_cf import methods
    from dense_cf.methods.base import DPR_LENGTH_GROUPS
    assert methods.get("picl").pack_groups == methods.get("dpr").pack_groups == DPR_LENGTH_GROUPS
    assert methods.get("dcsr").pack_groups == ()  # its embed reads sentence positions
    from dense_cf.configs.base import base_config
    from dense_cf.train import validate
    c = base_config()
    c.method, c.data.pack_row_len = "dcsr", 64
    assert any("method dcsr's batches cannot be packed" in p
               for p in validate.problems(c, check_files=False))
    c.method = "picl"
    assert not any("pack_row_len" in p for p in validate.problems(c, check_files=False))


@pytest.mark.parametrize("sharded", [False, True])
def test_packed_batch_gives_the_padded_loss_and_gradients(sharded):
    """PiCL's loss over a packed batch equals the padded batch's, one pack per data shard
    (``sharded``: a 2-device mesh, in-batch negatives gathered across it)."""
    from helpers import tiny_run

    from dense_cf import methods
    from dense_cf.parallel import mesh as mesh_lib
    from dense_cf.train.step import batch_loss

    run = tiny_run("picl", max_p_len=24)
    method = methods.get("picl")
    b = _dpr_batch()
    b = {k: (v % run.model.config.vocab_size if k.endswith("_ids") else v) for k, v in b.items()}
    shards = 2 if sharded else 1
    packed, stats = packing.pack_batch(b, method.pack_groups, 48, shards)
    assert stats["slots"] < stats["slots_padded"]
    hp = method.loss_hparams(run.config.loss)
    mesh = run.mesh if sharded else None

    def loss_and_grads(batch):
        def f(params):
            return batch_loss(method, run.model, params, batch, loss_hparams=hp, mesh=mesh,
                              deterministic=True)[0]
        if not sharded:
            return jax.jit(jax.value_and_grad(f))(jax.device_get(run.params))
        with jax.set_mesh(run.mesh), nn.logical_axis_rules(run.rules):
            return jax.jit(jax.value_and_grad(f))(run.params)

    if sharded:
        with jax.set_mesh(run.mesh):
            b, packed = mesh_lib.global_batch(b, run.mesh), mesh_lib.global_batch(packed, run.mesh)
    (l_pad, g_pad), (l_pack, g_pack) = loss_and_grads(b), loss_and_grads(packed)
    assert float(l_pack) == pytest.approx(float(l_pad), rel=1e-5)
    for a, c in zip(jax.tree.leaves(jax.device_get(g_pad)), jax.tree.leaves(jax.device_get(g_pack))):
        np.testing.assert_allclose(c, a, rtol=1e-3, atol=1e-6)


def test_packed_training_follows_the_padded_run(tmp_path):
    """``data.pack_row_len`` through the training loop on a 2-device mesh: without dropout the
    packed run's losses and final weights are the padded run's within float tolerance, and it
    reports the padding it removed."""
    import json

    from helpers import tiny_tower_config, write_tower_data

    from dense_cf.train.loop import train
    from dense_cf.train.validate import ConfigError

    write_tower_data(str(tmp_path / "data"))

    def config(**over):
        return tiny_tower_config(tmp_path / "data", **{
            "train.num_steps": 3, "train.log_every": 1, "train.checkpoint_every": 3,
            "train.eval_every": 0, "train.dropout": False, "mesh.data": 2, "mesh.model": 1,
            "data.pipeline": "grain", **over})

    runs = {}
    for name, over in (("padded", {}), ("packed", {"data.pack_row_len": 40})):
        _, run = train(config(**over), str(tmp_path / name))
        lines = [json.loads(x) for x in open(tmp_path / name / "metrics.jsonl")]
        runs[name] = ([x["train/loss"] for x in lines if "train/loss" in x],
                      [x.get("train/padding_removed") for x in lines if "train/loss" in x],
                      jax.device_get(run.params))
    (l_pad, removed_pad, p_pad), (l_pack, removed, p_pack) = runs["padded"], runs["packed"]
    assert len(l_pack) == len(l_pad) == 3
    np.testing.assert_allclose(l_pack, l_pad, rtol=1e-4)
    assert removed_pad == [None] * 3 and all(0 < r < 1 for r in removed)
    # Two leaves have a zero gradient by construction: attention's key bias (softmax ignores a
    # shift) and the passage tower's last LayerNorm bias (the contrastive loss's passage
    # gradients sum to 0 over the batch). AdamW turns their float noise into +-lr steps, so
    # they are not compared.
    zero_grad = ("['key']['bias']", "['passage']['layer_0']['output_norm']['bias']")
    for (path, a), c in zip(jax.tree_util.tree_leaves_with_path(p_pad), jax.tree.leaves(p_pack)):
        name = jax.tree_util.keystr(path)
        if not name.endswith(zero_grad[0]) and name != zero_grad[1]:
            np.testing.assert_allclose(c, a, rtol=1e-3, atol=1e-5, err_msg=name)
    with pytest.raises(ConfigError, match="pack_row_len=40 and config.train.grad_cache_chunks=2"):
        train(config(**{"data.pack_row_len": 40, "train.grad_cache_chunks": 2}),
              str(tmp_path / "gradcache"))


def test_best_fit_assignment_fills_the_tightest_row():
    # 6 opens row 0 (4 left), 5 row 1 (5 left); 4 fits row 0 exactly (best fit, not first fit
    # order), 3 and 2 then fill row 1: two rows, both full.
    assert packing.assign_rows(np.array([6, 5, 4, 3, 2]), 10) == [[0, 2], [1, 3, 4]]


@pytest.mark.parametrize("row_len,max_segments", [(32, 0), (32, 3), (17, 0)])
def test_assignment_keeps_every_passage_once_within_its_row(row_len, max_segments):
    lengths = np.random.default_rng(7).integers(1, 18, size=300)
    rows = packing.assign_rows(lengths, row_len, max_segments)
    assert sorted(i for r in rows for i in r) == list(range(300))
    assert all(lengths[r].sum() <= row_len for r in rows)
    if max_segments:
        assert max(len(r) for r in rows) <= max_segments
    # no two rows could be merged: best fit leaves at most one row half empty or less
    assert sum(lengths[r].sum() <= row_len // 2 for r in rows) <= 1 or max_segments


def test_layout_of_a_given_assignment_and_its_errors():
    ids, mask = _padded()
    rows = [[6, 0], [1, 3]]  # a subset: passages in no row get start 0
    b = packing.layout(ids, mask, rows, ROW, num_rows=3)
    assert b.ids.shape == (3, ROW) and b.segment_ids[2].max() == 0
    assert b.starts[0] == 0 and b.starts[6] == LENGTHS[0]  # row order = passage order
    assert b.starts[1] == ROW and b.starts[3] == ROW + LENGTHS[1]
    with pytest.raises(ValueError, match="row 0: its passages need more than 24"):
        packing.layout(ids, mask, [[6, 4]], 24)
    with pytest.raises(ValueError, match="2 rows given, num_rows=1"):
        packing.layout(ids, mask, rows, ROW, num_rows=1)
