"""Length buckets (dense_cf/inputs/buckets.py, docs/scale.md "Length-aware encoding").

The bucket helpers on hand cases; export, question and sentence encoding with buckets equal the
unbucketed vectors within float tolerance, in the original order, and resume across a bucketed
export; a bucketed training run is deterministic and resumes exactly.
"""

import dataclasses
import json
import os

import jax
import numpy as np
import pytest
from helpers import assert_cut_batch_matches, random_batch, tiny_run, tiny_tower_config, write_tower_data

from dense_cf.inputs import buckets
from dense_cf.retrieval import export

# ------------------------------------------------------------------------------ the helpers


def test_bucket_lengths_keep_boundaries_below_max_and_add_max():
    assert buckets.bucket_lengths((64, 32, 256, 128), 96) == (32, 64, 96)
    assert buckets.bucket_lengths((32, 64), 64) == (32, 64)
    assert buckets.bucket_lengths((), 48) == (48,)
    with pytest.raises(ValueError, match="must be >= 1"):
        buckets.bucket_lengths((0, 8), 16)


def test_fit_bucket_is_the_smallest_that_holds_the_row():
    b = (8, 16, 24)
    assert [buckets.fit_bucket(n, b) for n in (1, 8, 9, 16, 17, 24)] == [8, 8, 16, 16, 24, 24]
    with pytest.raises(ValueError, match="exceeds the largest bucket 24"):
        buckets.fit_bucket(25, b)


def test_row_lengths_count_up_to_the_last_token():
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 1]])
    np.testing.assert_array_equal(buckets.row_lengths(mask), [3, 1, 0, 4])
    np.testing.assert_array_equal(buckets.row_lengths(mask.reshape(2, 2, 4)), [[3, 1], [0, 4]])


def test_plan_batches_sorts_longest_first_and_covers_every_row_once():
    lengths = np.array([3, 20, 9, 17, 5, 8, 30, 2, 16])
    plan = buckets.plan_batches(lengths, (8, 16, 32), 4)
    rows = [r.tolist() for r, _ in plan]
    assert rows == [[6, 1, 3, 8], [2, 5, 4, 0], [7]]    # by length, descending, ties stable
    assert [length for _, length in plan] == [32, 16, 8]  # 9 straddles 8/16: the upper bucket
    assert sorted(np.concatenate([r for r, _ in plan]).tolist()) == list(range(9))
    # One bucket: the unbucketed encoder's batches, consecutive rows in input order.
    plan = buckets.plan_batches(lengths, (32,), 4)
    assert [r.tolist() for r, _ in plan] == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    assert {length for _, length in plan} == {32}


def test_trim_batch_cuts_each_group_to_its_bucket_and_counts_tokens():
    def rows(n, lengths, full):
        ids = np.zeros((n, full), np.int32)
        mask = np.zeros((n, full), np.int32)
        for i, ln in enumerate(lengths):
            ids[i, :ln], mask[i, :ln] = 7, 1
        return ids, mask

    b = {"pos_valid": np.ones(2, bool)}
    b["q_ids"], b["q_mask"] = rows(2, [3, 5], 12)
    b["pos_ids"], b["pos_mask"] = rows(2, [9, 4], 24)
    hard_ids, hard_mask = rows(2, [11, 2], 24)
    b["hard_ids"], b["hard_mask"] = hard_ids[:, None], hard_mask[:, None]   # [b, h=1, L]
    out, counts = buckets.trim_batch(b, (("q",), ("pos", "hard", "cf")), (8, 16))
    assert out["q_ids"].shape == (2, 8) and out["q_mask"].shape == (2, 8)
    assert out["pos_ids"].shape == (2, 16) and out["hard_mask"].shape == (2, 1, 16)  # 11 -> 16
    np.testing.assert_array_equal(out["hard_ids"], b["hard_ids"][..., :16])
    assert out["pos_valid"] is b["pos_valid"]
    assert counts == {"tokens": 2 * 8 + 4 * 16, "tokens_at_max": 2 * 12 + 4 * 24}
    # On several hosts the caller passes the longest row over all hosts.
    out, _ = buckets.trim_batch(b, (("q",), ("pos", "hard")), (8, 16), need={"1": 17})
    assert out["pos_ids"].shape == (2, 24) and out["q_ids"].shape == (2, 8)
    assert buckets.padding_removed(80, 120) == pytest.approx(1 / 3)


# ------------------------------------------------------------------------------ encoding

_run = tiny_run


@pytest.fixture(scope="module")
def run():
    return _run()


def _rows(n=40):
    """Passages of 2 to ~40 word pieces, in no length order."""
    r = np.random.default_rng(3)
    out = []
    for i in range(n):
        words = int(r.integers(0, 16))
        text = " ".join(f"w{(i * 7 + j) % 50}" for j in range(words)) or "x"
        out.append((str(i + 1), text, f"Title {i}" if i % 3 else ""))
    return out


BUCKETS = (8, 16, 32)


def test_bucketed_export_equals_unbucketed_in_order_and_resumes(run, tmp_path):
    rows = _rows()
    plain = export.export_passages(run, rows, str(tmp_path / "plain"), shard_size=16,
                                   batch_size=8, dtype="float32",
                                   encoder=export.Encoder(run, 8, length_buckets=()))
    enc = export.Encoder(run, 8, length_buckets=BUCKETS)
    out = tmp_path / "bucketed"
    m = export.export_passages(run, rows, str(out), shard_size=16, batch_size=8, dtype="float32",
                               encoder=enc)
    assert plain["padding_removed"] == 0 and 0.3 < m["padding_removed"] < 1
    a, b = export.load_embeddings(str(tmp_path / "plain")), export.load_embeddings(str(out))
    assert a.shape == b.shape == (40, run.model.config.hidden_size)
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    assert export.load_passage_ids(str(out)) == [r[0] for r in rows]
    # Same files, same records: the shard keys do not depend on bucketing.
    for name in ("shard-00000.json", "shard-00002.json"):
        rec = [json.load(open(d / name)) for d in (tmp_path / "plain", out)]
        assert rec[0] == rec[1]
    # Interrupted mid-export: shard 2 unfinished, no manifest. The resume encodes it alone.
    os.remove(out / "manifest.json")
    os.remove(out / "embeddings-00002.npy")
    before = enc.tokens
    m2 = export.export_passages(run, rows, str(out), shard_size=16, batch_size=8,
                                dtype="float32", encoder=enc)
    assert m2["encoded_this_run"] == 8 and m2["skipped_done"] == 32 and enc.tokens > before
    np.testing.assert_allclose(export.load_embeddings(str(out)), a, rtol=1e-4, atol=1e-5)
    # A bucketed export reuses an unbucketed one's shards (and the other way round).
    m3 = export.export_passages(run, rows, str(tmp_path / "plain"), shard_size=16, batch_size=8,
                                dtype="float32", encoder=enc)
    assert m3["encoded_this_run"] == 0


def test_bucketed_question_encoding_equals_unbucketed(run):
    qs = [f"who {'really ' * (i % 9)}built tower {i}?" for i in range(21)]
    plain = export.encode_questions(run, qs, encoder=export.Encoder(run, 4, length_buckets=()))
    enc = export.Encoder(run, 4, length_buckets=(4, 8))
    got = export.encode_questions(run, qs, encoder=enc)
    np.testing.assert_allclose(got, plain, rtol=1e-4, atol=1e-5)
    assert 0 < enc.padding_removed() < 1
    # Each row alone (batch of one, full padding) gives the same vector: order is kept.
    one = export.encode_questions(run, qs[5:6], encoder=export.Encoder(run, 2, length_buckets=()))
    np.testing.assert_allclose(got[5:6], one, rtol=1e-4, atol=1e-5)


def test_encoders_of_one_architecture_share_their_compiled_functions(run):
    """The evaluation stages each make an Encoder: one jit (one trace and compile per shape)
    for every Encoder of the same model and param shardings, whatever the params' values; a
    model with other fields gets its own."""
    a, b = export.Encoder(run, 4), export.Encoder(run, 8, length_buckets=())
    assert (a._q, a._p, a._s) == (b._q, b._p, b._s)
    other = dataclasses.replace(run, params=jax.tree.map(lambda x: x + 1.0, run.params))
    c = export.Encoder(other, 4)
    assert (c._q, c._p) == (a._q, a._p)
    qs = ["who built tower 3?", "where is the bridge?"]
    assert not np.allclose(export.encode_questions(run, qs, encoder=a),
                           export.encode_questions(other, qs, encoder=c))
    mean = dataclasses.replace(run, model=run.model.clone(pooling="mean"))
    d = export.Encoder(mean, 4)
    assert d._q is not a._q and d._p is not a._p


def test_bucketed_sentence_export_equals_unbucketed(tmp_path):
    run = _run("dcsr")
    rows = [(str(i), ". ".join(f"Fact {j} about item {i}" for j in range(1 + i % 6)) + ".",
             f"T{i}") for i in range(20)]
    kw = dict(shard_size=12, batch_size=4, dtype="float32")
    plain = export.export_sentences(run, rows, str(tmp_path / "plain"),
                                    encoder=export.Encoder(run, 4, length_buckets=()), **kw)
    got = export.export_sentences(run, rows, str(tmp_path / "b"),
                                  encoder=export.Encoder(run, 4, length_buckets=BUCKETS), **kw)
    assert got["count"] == plain["count"] > 20
    np.testing.assert_allclose(export.load_embeddings(str(tmp_path / "b")),
                               export.load_embeddings(str(tmp_path / "plain")), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(export.load_sentence_passages(str(tmp_path / "b")),
                                  export.load_sentence_passages(str(tmp_path / "plain")))


# ------------------------------------------------------------------------------ training

@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    write_tower_data(str(d))
    return d


def _train_config(data_dir, **over):
    """Passages up to ~25 word pieces at max_p_len 48, questions ~9 at 16: buckets 32 and 16."""
    return tiny_tower_config(data_dir, **{
        "data.max_q_len": 16, "data.max_p_len": 48, "data.length_buckets": (8, 16, 32),
        "train.num_steps": 4, "train.log_every": 1, "train.checkpoint_every": 2,
        "train.eval_every": 0, "mesh.data": 2, "mesh.model": 1, **over})


def test_bucketed_training_is_deterministic_and_resumes_exactly(tmp_path, data_dir):
    from dense_cf.train.loop import train
    full, full_run = train(_train_config(data_dir), str(tmp_path / "full"))
    part, _ = train(_train_config(data_dir, **{"train.stop_at_step": 2}), str(tmp_path / "resumed"))
    resumed, resumed_run = train(_train_config(data_dir), str(tmp_path / "resumed"))
    assert part["step"] == 2 and resumed["step"] == full["step"] == 4
    for a, b in zip(jax.tree.leaves(jax.device_get(full_run.params)),
                    jax.tree.leaves(jax.device_get(resumed_run.params))):
        np.testing.assert_array_equal(a, b)
    lines = [json.loads(x) for x in open(tmp_path / "full" / "metrics.jsonl")]
    removed = [x["train/padding_removed"] for x in lines if "train/padding_removed" in x]
    # Questions of ~9 word pieces (bucket 16 of 16) and passages of < 32 (32 of 48).
    assert len(removed) == 4 and all(0.2 < r < 1 for r in removed)



def test_cut_batch_gives_the_same_loss_and_gradients(run):
    """Padding is masked, so the train step's loss and gradients on a cut batch equal the full
    batch's within float tolerance (without dropout: dropout masks are drawn per padded shape,
    so bucketed and unbucketed runs with dropout are each deterministic but not equal)."""
    from dense_cf import methods
    from dense_cf.methods.base import DPR_LENGTH_GROUPS

    method = methods.get("picl")
    b = random_batch(8, 16, 48, 1, 1000, seed=1)
    for key in ("pos", "hard", "cf"):  # rows of at most 20 tokens: bucket 32 of 48
        b[key + "_ids"][..., 20:] = 0
        b[key + "_mask"][..., 20:] = 0
    b["q_mask"][:, 7:], b["q_ids"][:, 7:] = 0, 0
    cut, counts = buckets.trim_batch(b, DPR_LENGTH_GROUPS, (8, 16, 32))
    assert cut["pos_ids"].shape == (8, 32) and cut["q_ids"].shape == (8, 8)
    assert_cut_batch_matches(method, run.model, run.params, method.loss_hparams(run.config.loss),
                             b, cut)
    assert buckets.padding_removed(counts["tokens"], counts["tokens_at_max"]) == pytest.approx(
        1 - (8 * 8 + 24 * 32) / (8 * 16 + 24 * 48))
