"""MDR pieces (docs/multihop.md): hop-2 queries, counterfactuals of supporting passages, the
two-hop beam search against brute force, the flattened two-hop loss against a per-element
reference, and the tf.data pipeline (hop-2 rows, exact resume)."""

from __future__ import annotations

import itertools
import math

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import hotpot_world

from dense_cf import methods
from dense_cf.inputs import multihop as mh
from dense_cf.inputs.tokens import encode_texts, hop2_query_row, passage_rows, question_row, tokenize_hop2_queries
from dense_cf.losses import contrastive_loss
from dense_cf.methods.multihop import HopEmbeddings, flatten_hops, multihop_loss
from dense_cf.models.hf import resolve_model_dir
from dense_cf.models.tokenizer import load_tokenizer
from dense_cf.retrieval.multihop import best_chains, drop_first_hop, two_hop_search


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(resolve_model_dir("minilm"))


# ----------------------------------------------------------------------------- hop-2 queries


def test_hop2_query_row_layout_and_truncation():
    cls, sep = 101, 102
    q = [cls, 7, 8, sep]
    p = [cls, 20, 21, sep, 30, 31, 32, 33]  # [CLS] title [SEP] text, no final [SEP]
    assert hop2_query_row(q, p, 32, sep) == [cls, 7, 8, sep, 20, 21, sep, 30, 31, 32, 33, sep]
    # Truncated to max_len, keeping the final [SEP]; the question is never cut first.
    assert hop2_query_row(q, p, 9, sep) == [cls, 7, 8, sep, 20, 21, sep, 30, sep]
    assert hop2_query_row(q, [cls, 30, 31], 8, sep) == [cls, 7, 8, sep, 30, 31, sep]  # no title
    with pytest.raises(ValueError, match="no room"):
        hop2_query_row(q, p, 4, sep)


def test_tokenize_hop2_queries_matches_text_form(tok):
    ids, mask = tokenize_hop2_queries(tok, ["Where was he born?"], ["Ed Wood"],
                                      ["Ed Wood was a filmmaker. He was born in Poughkeepsie."],
                                      max_q_len=16, max_len=64)
    n = int(mask[0].sum())
    text = tok.decode(ids[0, :n].tolist(), skip_special_tokens=False)
    assert text == ("[CLS] where was he born? [SEP] ed wood [SEP] ed wood was a filmmaker. "
                    "he was born in poughkeepsie. [SEP]")
    short, smask = tokenize_hop2_queries(tok, ["Where was he born?"], ["Ed Wood"],
                                         ["Ed Wood was a filmmaker."], max_q_len=16, max_len=12)
    assert int(smask[0].sum()) == 12 and short[0, 11] == tok.token_to_id("[SEP]")
    # A question longer than max_q_len is cut to max_q_len before the passage.
    long_q = " ".join(["word"] * 40)
    lids, lmask = tokenize_hop2_queries(tok, [long_q], ["T"], ["x y"], max_q_len=10, max_len=20)
    row = lids[0, :int(lmask[0].sum())].tolist()
    assert row[9] == tok.token_to_id("[SEP]") and row[:9].count(tok.token_to_id("word")) == 8


# ----------------------------------------------------------------------------- counterfactuals


def test_counterfactual_drops_exactly_the_supporting_sentences(tok):
    examples, _ = hotpot_world(n_people=3, n_comparison=0)
    ex = examples[0]
    title = ex.supporting_titles[1]  # the person (listed second)
    sents = ex.sentences(title)
    body, sid = mh.passage_table_rows(tok, [title], [sents], keep=200)
    # Rows equal the corpus format (passage_rows on the joined text).
    ref, _, _, _ = passage_rows(tok, [title], ["".join(sents)], keep=200)
    assert body[0] == ref[0]
    support = ex.supporting_sentences(title)
    assert support == (1,)
    cf, cf_sid, valid = mh.drop_sentences(body[0], sid[0], support)
    assert valid
    # The counterfactual is the passage of the remaining sentences, token for token.
    rest = [s for i, s in enumerate(sents) if i not in support]
    expect, _ = mh.passage_table_rows(tok, [title], [rest], keep=200)
    assert cf == expect[0]
    assert tok.decode(cf) == tok.decode(tok.encode(title + " " + ex.counterfactual(title)).ids)
    assert set(cf_sid) == {-1, 0, 2, 3} and 1 not in cf_sid
    # Several supporting sentences; nothing left; nothing dropped.
    cf2, _, ok2 = mh.drop_sentences(body[0], sid[0], (0, 3))
    assert ok2 and tok.decode(cf2) == tok.decode(
        mh.passage_table_rows(tok, [title], [sents[1:3]], keep=200)[0][0])
    assert not mh.drop_sentences(body[0], sid[0], range(4))[2]
    assert not mh.drop_sentences(body[0], sid[0], (9,))[2]


# ----------------------------------------------------------------------------- beam search


def _brute_force(q, vecs, hop2_vec, k1, k2, n):
    """Every ordered pair (a, b): a in the top-k1 for q, b in the top-k2 of the other passages
    for hop2_vec(q, a); the best n by s1 + s2 (ties: hop-1 rank, then hop-2 rank)."""
    s = vecs @ q
    top1 = sorted(range(len(vecs)), key=lambda i: (-s[i], i))[:k1]
    cands = []
    for ra, a in enumerate(top1):
        v = hop2_vec(a)
        s2 = vecs @ v
        others = sorted((i for i in range(len(vecs)) if i != a), key=lambda i: (-s2[i], i))[:k2]
        cands += [(-(s[a] + s2[b]), ra, rb, a, b) for rb, b in enumerate(others)]
    cands.sort()
    return [(a, b) for _, _, _, a, b in cands[:n]], [-c[0] for c in cands[:n]]


def _search(vecs):
    def search(qs, k):
        s = qs.astype(np.float64) @ vecs.T.astype(np.float64)
        order = np.argsort(-s, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(s, order, axis=1), order
    return search


@pytest.mark.parametrize("k1,k2,n", [(7, 6, 42), (3, 2, 5), (2, 4, 20)])
def test_beam_search_equals_brute_force(k1, k2, n):
    r = np.random.default_rng(0)
    vecs = r.integers(-3, 4, size=(7, 4)).astype(np.float64)  # small integers: exact sums, ties
    qs = r.integers(-3, 4, size=(5, 4)).astype(np.float64)
    mix = r.integers(-2, 3, size=(4, 4)).astype(np.float64)

    def hop2_vec(qi, a):
        return qs[qi] + vecs[a] @ mix

    chains = two_hop_search(_search(vecs), qs,
                            lambda qi, rows: np.stack([hop2_vec(q, a) for q, a in zip(qi, rows)]),
                            beam_size=k1, hop2_k=k2, top_chains=n, block=2, progress=False)
    for qi in range(len(qs)):
        want, want_scores = _brute_force(qs[qi], vecs, lambda a: hop2_vec(qi, a), k1, k2, n)
        got = [(a, b) for a, b in zip(chains.rows1[qi], chains.rows2[qi]) if a >= 0]
        assert got == want
        np.testing.assert_allclose(chains.scores[qi][:len(want)], want_scores)
        assert all(a != b for a, b in got)
        assert (chains.rows1[qi][len(want):] == -1).all()
    if k1 == 7 and k2 == 6:  # exhaustive: every ordered pair of distinct passages, once
        assert len(got) == 42 and len(set(got)) == 42


def test_best_chains_excludes_repeats_and_empty_rows():
    s1 = np.array([[2.0, 1.0]])
    r1 = np.array([[5, -1]])
    s2 = np.array([[[9.0, 1.0, 0.5], [9.0, 9.0, 9.0]]])
    r2 = np.array([[[5, 3, -1], [1, 2, 3]]])
    rows1, rows2, scores = best_chains(s1, r1, s2, r2, 3)
    assert rows1.tolist() == [[5, -1, -1]] and rows2.tolist() == [[3, -1, -1]]
    assert scores[0, 0] == 3.0 and np.isinf(scores[0, 1:]).all()
    s, r = drop_first_hop(np.array([[4]]), np.array([[[3.0, 2.0, 1.0]]]),
                          np.array([[[4, 8, 9]]]), 2)
    assert r.tolist() == [[[8, 9]]] and s.tolist() == [[[2.0, 1.0]]]


# ----------------------------------------------------------------------------- the loss


def _dot(a, b):
    return float(np.dot(np.asarray(a, np.float64), np.asarray(b, np.float64)))


def _ref_mdr(q1, q2, p1, p2, hard, hv, cf1, cf2, c1v, c2v, lam, tau1, tau2):
    """Per element: row i < B is (q1_i, p1_i, cf1_i), row B + i is (q2_i, p2_i, cf2_i);
    negatives of a row: every other row's positive except a hop-1 row's own p2, every valid hard
    negative; L_cpp adds the other rows' valid counterfactuals, the same exception."""
    b = len(q1)
    qs, ps = list(q1) + list(q2), list(p1) + list(p2)
    cfs, cv = list(cf1) + list(cf2), list(c1v) + list(c2v)
    hards = [hard[j, k] for j in range(b) for k in range(hard.shape[1]) if hv[j, k]]

    def lse(xs):
        m = max(xs)
        return m + math.log(sum(math.exp(x - m) for x in xs))

    per = []
    for i in range(2 * b):
        others = [j for j in range(2 * b) if j != i and not (i < b and j == i + b)]
        sp = _dot(qs[i], ps[i])
        neg = [_dot(qs[i], ps[j]) for j in others] + [_dot(qs[i], h) for h in hards]
        logits = [sp] + neg
        sc = _dot(qs[i], cfs[i])
        if cv[i] and lam:
            logits.append(sc + math.log(lam))
        total = lse(logits) - sp
        if cv[i]:
            total += tau1 * (lse([sp, sc]) - sp)
            cpp = [sc] + neg + [_dot(qs[i], cfs[j]) for j in others if cv[j]]
            total += tau2 * (lse(cpp) - sc)
        per.append(total)
    return float(np.mean(per[:b]) + np.mean(per[b:]))


def test_multihop_loss_matches_per_element_reference():
    r = np.random.default_rng(1)
    b, h, d = 4, 1, 6

    def v(*s):
        return r.normal(size=s).astype(np.float32)

    emb = HopEmbeddings(q1=v(b, d), q2=v(b, d), p1=v(b, d), p2=v(b, d), neg=v(b, h, d),
                        neg_valid=np.array([[True], [False], [True], [True]]),
                        cf1=v(b, d), cf2=v(b, d), cf1_valid=np.array([True, False, True, True]),
                        cf2_valid=np.array([True, True, False, True]))
    w = dict(lam=1.0, tau1=1.0, tau2=1.0, use_dpr=True)
    loss, m = multihop_loss(jax_tree(emb), **w)
    ref = _ref_mdr(emb.q1, emb.q2, emb.p1, emb.p2, emb.neg, emb.neg_valid, emb.cf1, emb.cf2,
                   emb.cf1_valid, emb.cf2_valid, 1.0, 1.0, 1.0)
    np.testing.assert_allclose(float(loss), ref, rtol=1e-5)
    np.testing.assert_allclose(float(m["hop1_loss"]) + float(m["hop2_loss"]), ref, rtol=1e-5)
    for key in ("hop1_rank_acc", "hop2_rank_acc", "hop1_cf_margin", "rank_acc"):
        assert key in m
    # The hop-1 rows must not count their own p2 as a negative: without the mask the loss
    # (plain contrastive_loss over the flattened batch) differs.
    f = flatten_hops(jax_tree(emb))
    unmasked, _ = contrastive_loss(f["q"], f["pos"], f["hard"], f["hard_valid"], f["cf"],
                                   f["cf_valid"], **w)
    assert abs(2 * float(unmasked) - ref) > 1e-3
    # Plain MDR (no counterfactuals) equals the reference with zero weights.
    plain = HopEmbeddings(q1=emb.q1, q2=emb.q2, p1=emb.p1, p2=emb.p2, neg=emb.neg,
                          neg_valid=emb.neg_valid)
    loss0, _ = multihop_loss(jax_tree(plain), lam=0.0, tau1=0.0, tau2=0.0, use_dpr=True)
    ref0 = _ref_mdr(emb.q1, emb.q2, emb.p1, emb.p2, emb.neg, emb.neg_valid, emb.cf1, emb.cf2,
                    [False] * b, [False] * b, 0.0, 0.0, 0.0)
    np.testing.assert_allclose(float(loss0), ref0, rtol=1e-5)


def jax_tree(emb):
    return type(emb)(**{k: None if getattr(emb, k) is None else jnp.asarray(getattr(emb, k))
                        for k in emb.__dataclass_fields__})


# ----------------------------------------------------------------------------- pipeline


def _spec(tok, **kw):
    base = dict(global_batch=4, max_q_len=16, max_p_len=32, max_hop2_len=40, num_hard=1,
                counterfactual=True, comparison_order="random",
                pad_id=tok.token_to_id("[PAD]"), sep_id=tok.token_to_id("[SEP]"), seed=3)
    base.update(kw)
    return mh.MultihopSpec(**base)


def test_pipeline_rows_resume_and_orders(tok):
    examples, _ = hotpot_world(n_people=6, n_comparison=2)
    data = mh.preprocess(examples, tok, max_q_len=16, max_p_len=32, max_hard=2)
    assert data.num_examples == 8 and data.stats["bridge"] == 6
    assert data.stats["cf1_valid"] == 8 and data.stats["cf2_valid"] == 8
    both = mh.preprocess(examples, tok, max_q_len=16, max_p_len=32, max_hard=2,
                         comparison_order="both")
    assert both.num_examples == 10
    spec = _spec(tok)
    it = mh.BatchIterator(data, spec)
    batches = [next(it) for _ in range(5)]
    state = it.get_state()
    after = [next(it) for _ in range(3)]
    it2 = mh.BatchIterator(data, spec)
    it2.set_state(state)
    for a, b in zip(after, (next(it2) for _ in range(3))):
        assert all(np.array_equal(a[k], b[k]) for k in a)
    sep = tok.token_to_id("[SEP]")
    cls = tok.token_to_id("[CLS]")
    by_p1 = {}
    for ex in examples:  # the hop-2 row the host builds for every (question, first hop)
        q_row = question_row(encode_texts(tok, [ex.question])[0].ids, 16, cls, sep)
        for t1 in ex.supporting_titles:
            body, _ = mh.passage_table_rows(tok, [t1], [ex.sentences(t1)], keep=64)
            by_p1[(ex.question, t1)] = hop2_query_row(q_row, body[0], 40, sep)
    titles_seen = set()
    for batch in batches:
        for i in range(4):
            q = tok.decode(batch["q_ids"][i][batch["q_mask"][i] > 0].tolist())
            ex = next(e for e in examples if tok.decode(tok.encode(e.question).ids) == q)
            row = batch["q2_ids"][i][batch["q2_mask"][i] > 0].tolist()
            matches = [t for t in ex.supporting_titles if by_p1[(ex.question, t)] == row]
            assert len(matches) == 1
            if ex.type == "bridge":  # bridge_order: the person (naming the land) first
                assert matches[0] == ex.supporting_titles[1]
            else:
                titles_seen.add((ex.id, matches[0]))
            assert batch["cf1_valid"][i] and batch["cf2_valid"][i]
            p1 = tok.decode(batch["p1_ids"][i][batch["p1_mask"][i] > 0].tolist())
            assert p1.startswith(tok.decode(tok.encode(matches[0]).ids))
    # "random": a comparison question is seen in both orders over 5 batches (20 draws).
    assert {t for _, t in titles_seen} and len(titles_seen) > len({i for i, _ in titles_seen})
    dataset_order = mh.BatchIterator(data, _spec(tok, comparison_order="dataset"))
    for batch in itertools.islice(dataset_order, 4):
        assert batch["q2_ids"].shape == (4, 40) and batch["hard_ids"].shape == (4, 1, 32)


# ----------------------------------------------------------------------------- configs


def test_configs_validate_and_the_demo_world_is_generated_once(tmp_path):
    import runpy

    from dense_cf.experiment import maybe_generate_synthetic
    from dense_cf.train.validate import problems

    for name, method in (("mdr_hotpot", "mdr"), ("mdr_eadpr_hotpot", "mdr-eadpr"),
                         ("mdr_demo", "mdr-eadpr")):
        c = runpy.run_path(f"configs/{name}.py")["get_config"]()
        assert c.method == method and c.model.shared and problems(c, check_files=False) == []
    c = runpy.run_path("configs/mdr_demo.py")["get_config"]("mdr")
    assert c.method == "mdr" and methods.get("mdr").loss_hparams(c.loss)["lam"] == 0.0
    c.data.data_dir = str(tmp_path)
    c.multihop.synthetic_questions = 40
    maybe_generate_synthetic(c)
    assert (tmp_path / "hotpot_train.json").exists() and (tmp_path / "corpus.tsv").exists()
    maybe_generate_synthetic(c)  # reused
    c.multihop.synthetic_questions = 50
    with pytest.raises(ValueError, match="other settings"):
        maybe_generate_synthetic(c)
    c.multihop.comparison_order = "sometimes"
    c.multihop.max_hop2_len = 16
    found = " ".join(problems(c, check_files=False))
    assert "comparison_order='sometimes'" in found and "max_hop2_len=16 must exceed" in found
