"""Fusion-in-Decoder reader (dense_cf/models/fid.py) on the tiny T5 fixtures of tests/test_t5.py.

HF greedy references: tests/fixtures/t5_tiny/{v1_0,v1_1}/greedy.npz from
tools/make_golden_t5_greedy.py (HF ``generate(do_sample=False, num_beams=1)``).
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dense_cf.models import fid, hf_t5, t5

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "t5_tiny")
VARIANTS = ("v1_0", "v1_1")


def _load(variant):
    params, cfg = hf_t5.load_hf_t5_params(os.path.join(FIXTURES, variant))
    return params, cfg


def _npz(variant, name):
    return dict(np.load(os.path.join(FIXTURES, variant, name)))


def _passages(rng, b, n, length, lengths=None):
    """ids/mask [b, n, length]: random tokens ending in </s>, each row with its own length."""
    ids = np.zeros((b, n, length), np.int32)
    mask = np.zeros_like(ids)
    for i in range(b):
        for j in range(n):
            k = int(rng.integers(3, length + 1)) if lengths is None else lengths[j]
            ids[i, j, :k - 1] = rng.integers(2, 96, k - 1)
            ids[i, j, k - 1] = 1
            mask[i, j, :k] = 1
    return ids, mask


def _logits(model, params, ids, mask, dec_in):
    return np.asarray(jax.jit(model.apply)({"params": params}, ids, mask, dec_in))


def test_param_tree_is_the_t5_tree():
    cfg = t5.T5Config(vocab_size=40, d_model=16, d_kv=4, d_ff=24, num_layers=2, num_heads=2)
    ids = jnp.ones((1, 2, 4), jnp.int32)
    shapes = lambda tree: jax.tree.map(lambda x: x.shape, tree)  # noqa: E731
    ours = jax.eval_shape(lambda: fid.FiD(cfg).init(jax.random.key(0), ids, ids, ids[:, 0])["params"])
    # the same names and shapes as T5, which is what hf_t5 maps to and from HF checkpoints
    assert shapes(ours) == shapes(jax.eval_shape(lambda: t5.init_params(cfg, jax.random.key(0))))
    assert set(hf_t5.expected_param_shapes(cfg)) == {
        "/".join(k.key for k in path) for path, _ in jax.tree_util.tree_leaves_with_path(ours)}


@pytest.mark.parametrize("variant", VARIANTS)
def test_one_passage_is_plain_t5(variant):
    params, cfg = _load(variant)
    g = _npz(variant, "golden.npz")
    ours = _logits(fid.FiD(cfg), params, g["input_ids"][:, None], g["attention_mask"][:, None],
                   g["decoder_input_ids"])
    plain = _logits(t5.T5ForConditionalGeneration(cfg), params, g["input_ids"], g["attention_mask"],
                    g["decoder_input_ids"])
    np.testing.assert_allclose(ours, plain, atol=1e-6)
    np.testing.assert_allclose(ours, g["logits"], atol=2e-5)  # and so HF's


def test_decoder_reads_the_concatenation_of_separately_encoded_passages():
    params, cfg = _load("v1_1")
    model, plain = fid.FiD(cfg), t5.T5ForConditionalGeneration(cfg)
    rng = np.random.default_rng(0)
    ids, mask = _passages(rng, 2, 3, 12)
    dec_in = rng.integers(2, 96, (2, 5)).astype(np.int32)
    got = _logits(model, params, ids, mask, dec_in)

    @jax.jit
    def by_hand(ids, mask, dec_in):
        v = {"params": params}
        enc = [plain.apply(v, ids[:, j], mask[:, j], method=plain.encode) for j in range(3)]
        return plain.apply(v, jnp.concatenate(enc, axis=1), mask.reshape(2, -1), dec_in, method=plain.decode)

    np.testing.assert_allclose(got, by_hand(ids, mask, dec_in), atol=5e-5)
    # every passage is read, not just the first ...
    changed = ids.copy()
    changed[:, 2, 0] = (changed[:, 2, 0] + 7) % 94 + 2
    assert np.abs(_logits(model, params, changed, mask, dec_in) - got).max() > 1e-3
    # ... and their order carries nothing (no position bias in cross-attention)
    perm = [2, 0, 1]
    np.testing.assert_allclose(_logits(model, params, ids[:, perm], mask[:, perm], dec_in), got, atol=5e-5)


def test_masked_passages_change_nothing():
    params, cfg = _load("v1_0")
    model = fid.FiD(cfg)
    rng = np.random.default_rng(1)
    ids, mask = _passages(rng, 2, 2, 10)
    junk = rng.integers(2, 96, (2, 4, 10)).astype(np.int32)  # ids of masked rows must not matter
    wide_ids, wide_mask = junk.copy(), np.zeros_like(junk)
    wide_ids[:, [1, 3]], wide_mask[:, [1, 3]] = ids, mask
    dec_in = np.array([[0, 5, 9], [0, 7, 1]], np.int32)
    np.testing.assert_allclose(_logits(model, params, wide_ids, wide_mask, dec_in),
                               _logits(model, params, ids, mask, dec_in), atol=1e-6)
    np.testing.assert_array_equal(fid.greedy_decode(model, params, wide_ids, wide_mask, max_length=6),
                                  fid.greedy_decode(model, params, ids, mask, max_length=6))


@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_decode_matches_hf_generate(variant):
    params, cfg = _load(variant)
    g = _npz(variant, "greedy.npz")
    want = g["sequences"][:, 1:]  # HF's output starts with the decoder start token
    eos = int(g["eos_token_id"])
    # the reference exercises the per-row stop: some rows end early, one runs to the limit
    ended = (want == eos).any(1)
    assert ended.any() and not ended.all()
    kw = dict(max_length=int(g["max_new_tokens"]), eos_id=eos)
    got = fid.greedy_decode(fid.FiD(cfg), params, g["input_ids"][:, None], g["attention_mask"][:, None], **kw)
    np.testing.assert_array_equal(got, want)
    got = fid.greedy_decode(t5.T5ForConditionalGeneration(cfg), params, g["input_ids"], g["attention_mask"], **kw)
    np.testing.assert_array_equal(got, want)


def test_cached_decoder_steps_equal_the_full_decoder():
    params, cfg = _load("v1_0")
    model = fid.FiD(cfg)
    rng = np.random.default_rng(2)
    ids, mask = _passages(rng, 2, 3, 9)
    dec_in = rng.integers(2, 96, (2, 6)).astype(np.int32)
    want = _logits(model, params, ids, mask, dec_in)
    v = {"params": params}
    enc = model.apply(v, ids, mask, method=model.encode)
    cache = model.apply(v, enc, fid.fused_mask(mask), 8, method=model.init_cache)  # 2 slots spare
    step = jax.jit(lambda c, tok, i: model.apply(v, c, tok, i, method=model.decode_step))
    for i in range(dec_in.shape[1]):
        logits, cache = step(cache, dec_in[:, i], i)
        np.testing.assert_allclose(logits, want[:, i], atol=1e-5)


def test_fid_loss_matches_hf_and_ignores_padded_labels():
    params, cfg = _load("v1_0")
    model = fid.FiD(cfg)
    g = _npz("v1_0", "golden.npz")
    batch = {"input_ids": g["input_ids"][:, None], "attention_mask": g["attention_mask"][:, None],
             "labels": g["labels"]}
    loss_fn = jax.jit(lambda b: fid.fid_loss(model, params, b))
    loss, m = loss_fn(batch)
    np.testing.assert_allclose(loss, g["loss"], rtol=1e-5)  # HF: mean CE over labels != -100
    valid = g["labels"] >= 0
    pred = g["logits"].argmax(-1)
    assert int(m["tokens"]) == valid.sum()
    np.testing.assert_allclose(m["token_accuracy"], ((pred == g["labels"]) & valid).sum() / valid.sum())
    # wider padding, filled with junk and marked by labels_mask instead of -100: same numbers
    wide = np.pad(np.where(valid, g["labels"], 0), ((0, 0), (0, 4)))
    wide[:, -4:] = 17
    wide_mask = np.pad(valid, ((0, 0), (0, 4))).astype(np.int32)
    loss2, m2 = loss_fn({**batch, "labels": wide, "labels_mask": wide_mask})
    np.testing.assert_allclose(loss2, loss, rtol=1e-6)
    for k in m:
        np.testing.assert_allclose(m2[k], m[k], rtol=1e-6)


# ------------------------------------------------------------------ a tiny FiD learns

V, N, L, ANSWERS_FROM = 32, 3, 8, 20


def _copy_task(rng, b):
    """Passages of filler ids [4, 20); one passage of each example holds one answer id [20, 32)
    at a random place; the answer is that id. Reading every passage is needed."""
    ids = rng.integers(4, ANSWERS_FROM, (b, N, L)).astype(np.int32)
    ids[:, :, 0] = 3   # a constant "question"
    ids[:, :, -1] = 1  # </s>
    ans = rng.integers(ANSWERS_FROM, V, b).astype(np.int32)
    ids[np.arange(b), rng.integers(0, N, b), rng.integers(1, L - 1, b)] = ans
    return {"input_ids": ids, "attention_mask": np.ones_like(ids),
            "labels": np.stack([ans, np.ones_like(ans)], axis=1)}


@pytest.mark.optimized  # learns over hundreds of steps: compute-bound
def test_tiny_fid_learns_to_copy_the_answer_from_one_of_its_passages():
    cfg = t5.T5Config(vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4,
                      relative_attention_num_buckets=8, relative_attention_max_distance=16)
    model = fid.FiD(cfg)
    params = t5.init_params(cfg, jax.random.key(0))
    # Clipping: without it some seeds settle with two answer ids merged (measured over 20 seeds:
    # with it, all reach exact match 1.0 in 600 steps).
    opt = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(1e-2))
    state = opt.init(params)

    @jax.jit
    def train_step(params, state, batch):
        (_, metrics), grads = jax.value_and_grad(
            lambda p: fid.fid_loss(model, p, batch, deterministic=False), has_aux=True)(params)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, metrics

    rng = np.random.default_rng(0)
    first = None
    for _ in range(600):
        params, state, metrics = train_step(params, state, _copy_task(rng, 32))
        first = first if first is not None else float(metrics["loss"])
    test = _copy_task(np.random.default_rng(1), 256)
    out = np.asarray(fid.greedy_decode(model, params, test["input_ids"], test["attention_mask"], max_length=3))
    exact = np.mean((out[:, :2] == test["labels"]).all(axis=1) & (out[:, 2] == 0))
    assert exact >= 0.95, (exact, first, float(metrics["loss"]))
    assert float(metrics["loss"]) < 0.1 * first


# ------------------------------------------------------------------ text side

def _fid_tokenizer(path):
    """A T5-style tokenizer.json (Unigram + Metaspace + "$A </s>") with FiD's prefixes, ids < 96."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    words = "question: title: context: who built the tower it was by ada in".split()
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    vocab += [(c, -4.0) for c in "abcdefghijklmnopqrstuvwxyz0123456789.,?:"]
    vocab += [("\u2581" + w, -1.0) for w in words]
    tok = Tokenizer(models.Unigram(vocab, unk_id=2))
    tok.add_special_tokens(["<pad>", "</s>", "<unk>"])  # as in T5's own tokenizer.json
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tok.save(str(path))


def test_format_and_batch(tmp_path):
    _fid_tokenizer(tmp_path / "tokenizer.json")
    tok = hf_t5.load_t5_tokenizer(str(tmp_path))
    assert fid.format_fid_inputs("who built it?", [("Tower", "It was built by Ada.")]) == [
        "question: who built it? title: Tower context: It was built by Ada."]
    questions = ["who built the tower?", "who built it?"]
    passages = [[("tower", "it was built by ada in 1850."), ("tower", "the tower"), ("x", "y")],
                [("tower", "it was built by ada.")]]
    b = fid.fid_batch(tok, questions, passages, ["ada", "ada in 1850"], n_passages=2, max_length=16,
                      max_answer_length=4)
    assert b["input_ids"].shape == (2, 2, 16) and b["labels"].shape == (2, 4)
    np.testing.assert_array_equal(b["passage_mask"], [[True, True], [True, False]])
    assert not b["attention_mask"][1, 1].any() and not b["input_ids"][1, 1].any()  # missing passage
    row = b["input_ids"][1, 0][b["attention_mask"][1, 0] > 0].tolist()
    assert tok.decode(row) == "question: who built it? title: tower context: it was built by ada."
    assert row[-1] == 1
    cut = b["input_ids"][0, 0]  # 18 tokens cut to 16, </s> kept
    assert b["attention_mask"][0, 0].all() and cut[-1] == 1
    assert tok.decode(cut.tolist()).startswith("question: who built the tower? title: tower context:")
    # labels: "ada" + </s>, then -100; the long answer is cut keeping </s>
    assert b["labels"][0, -1] == -100 and b["labels"][1, -1] == 1
    # ("▁ada ▁in ▁1 8 5 0" keeps its first 3 pieces, the last a bare "▁")
    assert fid.decode_answers(tok, np.where(b["labels"] < 0, 0, b["labels"])) == ["ada", "ada in "]
    # the batch runs through the model and greedy decoding as is
    params, cfg = _load("v1_0")
    out = fid.greedy_decode(fid.FiD(cfg), params, b["input_ids"], b["attention_mask"], max_length=5)
    assert out.shape == (2, 5) and all(isinstance(s, str) for s in fid.decode_answers(tok, out))
