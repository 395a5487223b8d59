"""DCSR input pipeline (docs/method.md §4): marker insertion, truncation, sampler and its fallbacks."""

import numpy as np
import pytest

from dense_cf.datasets.formats import BiencoderExample, Passage
from dense_cf.inputs import dcsr, tokens
from dense_cf.inputs import dpr as pipeline
from dense_cf.inputs.dpr import Ragged
from dense_cf.models.hf import resolve_model_dir
from dense_cf.models.tokenizer import SENT_TOKEN, add_tokens, load_tokenizer


@pytest.fixture(scope="module")
def tok():
    t = load_tokenizer(resolve_model_dir("minilm"))
    add_tokens(t, (SENT_TOKEN,))
    return t


def test_insert_markers_by_hand():
    # Two passages: [CLS] T [SEP] a b | c  and  [CLS] T [SEP] x (one sentence).
    body = Ragged.from_rows([[101, 7, 102, 10, 11, 12], [101, 8, 102, 20]])
    sent = Ragged.from_rows([[-1, -1, -1, 0, 0, 1], [-1, -1, -1, 0]])
    marked, pos, sid = dcsr.insert_markers(body, sent, 999)
    assert marked.row(0).tolist() == [101, 7, 102, 999, 10, 11, 999, 12]
    assert marked.row(1).tolist() == [101, 8, 102, 999, 20]
    assert pos.row(0).tolist() == [3, 6] and pos.row(1).tolist() == [3]
    assert sid.row(0).tolist() == [0, 1] and sid.row(1).tolist() == [0]
    # Without the title: [CLS] <sent> a b <sent> c.
    marked, pos, _ = dcsr.insert_markers(body, sent, 999, title=False)
    assert marked.row(0).tolist() == [101, 999, 10, 11, 999, 12]
    assert pos.row(0).tolist() == [1, 4] and marked.row(1).tolist() == [101, 999, 20]


def test_markers_under_truncation(tok):
    sid = tok.token_to_id(SENT_TOKEN)
    text = "Alpha beta gamma. Delta epsilon zeta eta. Theta iota kappa lambda mu nu."
    full = tokens.tokenize_marked_passages(tok, ["Title"], [text], sent_token=SENT_TOKEN, max_len=64, max_sents=8)
    pos_full = full["positions"][0][full["valid"][0]]
    assert len(pos_full) == 3
    assert (full["ids"][0][pos_full] == sid).all()
    assert (full["ids"][0] == sid).sum() == 3
    for max_len in range(6, 24):
        out = tokens.tokenize_marked_passages(tok, ["Title"], [text], sent_token=SENT_TOKEN,
                                            max_len=max_len, max_sents=8)
        ids, valid, p = out["ids"][0], out["valid"][0], out["positions"][0]
        got = p[valid]
        # Valid markers are exactly the full-length markers with their first word piece kept
        # before the final [SEP] (which sits at index max_len - 1).
        assert got.tolist() == [x for x in pos_full if x <= max_len - 3]
        assert (ids[got] == sid).all() and (ids[got + 1] != tok.token_to_id("[SEP]")).all()
        assert ids[max_len - 1] == tok.token_to_id("[SEP]")
    # max_sents caps the exported sentences and counts the rest.
    capped = tokens.tokenize_marked_passages(tok, ["Title"], [text], sent_token=SENT_TOKEN, max_len=64, max_sents=2)
    assert capped["valid"].sum() == 2 and capped["dropped"] == 1


def _examples():
    hard = Passage("Hard", "Omega one. Omega two. Omega three.")
    return [
        # 0: answer in the 2nd of three sentences.
        BiencoderExample("q0", ["beta"], [Passage("P0", "Alpha is here. Beta was there. Gamma came later.")], [],
                         [hard]),
        # 1: a single (answer) sentence: in-passage negative falls back to the BM25 passage.
        BiencoderExample("q1", ["delta"], [Passage("P1", "Delta stands alone here.")], [], [hard]),
        # 2: no hard negative at all.
        BiencoderExample("q2", ["eps"], [Passage("P2", "One thing happened. Then eps arrived.")], [], []),
        # 3: no answer match in p+.
        BiencoderExample("q3", ["nowhere"], [Passage("P3", "Kappa is first. Lambda is second. Mu is third.")], [],
                         [hard]),
    ]


def _data(tok, max_p_len=32):
    pre = pipeline.preprocess(_examples(), tok, max_q_len=16, max_p_len=max_p_len, max_hard=2)
    return dcsr.from_preprocessed(pre, tok.token_to_id(SENT_TOKEN), max_p_len=max_p_len)


def _batch(tok, negatives="in_passage", seed=0, max_p_len=32):
    data = _data(tok, max_p_len)
    spec = dcsr.DcsrSpec(global_batch=4, max_q_len=16, max_p_len=max_p_len,
                         sent_id=tok.token_to_id(SENT_TOKEN), negatives=negatives,
                         sep_id=tok.token_to_id("[SEP]"), seed=seed, shuffle=False)
    return data, next(iter(dcsr.BatchIterator(data, spec)))


def _sentence_at(tok, ids, pos):
    """Decoded sentence following the marker at ``pos``."""
    sep, sid = tok.token_to_id("[SEP]"), tok.token_to_id(SENT_TOKEN)
    out = []
    for t in ids[pos + 1:]:
        if t in (sep, sid):
            break
        out.append(int(t))
    return tok.decode(out)


def test_sampler_and_fallbacks(tok):
    data, b = _batch(tok)
    sid = tok.token_to_id(SENT_TOKEN)
    assert data.stats["no_answer_sentence"] == 1          # example 3
    assert data.stats["no_in_passage_negative"] == 2      # examples 1 and 3
    assert data.stats["no_hard_negatives"] == 1           # example 2
    # Order is unshuffled: row i = example i. Every chosen position is a marker.
    for i in range(4):
        assert b["pos_ids"][i][b["pos_pos"][i]] == sid
    assert _sentence_at(tok, b["pos_ids"][0], b["pos_pos"][0]) == "beta was there."
    assert _sentence_at(tok, b["pos_ids"][1], b["pos_pos"][1]) == "delta stands alone here."
    # Example 0: in-passage negative from p+ (a non-answer sentence), then a BM25 sentence.
    assert b["neg_src"][0].tolist() == [0, 1] and b["neg_valid"][0].all()
    assert _sentence_at(tok, b["pos_ids"][0], b["neg_pos"][0][0]) in ("alpha is here.", "gamma came later.")
    assert _sentence_at(tok, b["hard_ids"][0][0], b["neg_pos"][0][1]).startswith("omega")
    # Example 1: no non-answer sentence in p+ -> both negatives from the BM25 passage, distinct.
    assert b["neg_src"][1].tolist() == [1, 1] and b["neg_valid"][1].all()
    assert b["neg_pos"][1][0] != b["neg_pos"][1][1]
    for p in b["neg_pos"][1]:
        assert b["hard_ids"][1][0][p] == sid
    # Example 2: no BM25 passage -> in-passage negative only, BM25 slot masked.
    assert b["neg_src"][2][0] == 0 and b["neg_valid"][2].tolist() == [True, False]
    assert _sentence_at(tok, b["pos_ids"][2], b["neg_pos"][2][0]) == "one thing happened."
    # Example 3: no answer match -> first sentence is the positive (counted above) and the
    # in-passage slot is a BM25 sentence (non-answer sentences of p+ are unknown).
    assert _sentence_at(tok, b["pos_ids"][3], b["pos_pos"][3]) == "kappa is first."
    assert b["neg_src"][3].tolist() == [1, 1] and b["neg_valid"][3].all()
    # Question prefix: [CLS] <sent> q ... [SEP], identical at evaluation time.
    assert b["q_ids"][0][:2].tolist() == [tok.token_to_id("[CLS]"), sid]
    from dense_cf.inputs.tokens import tokenize_questions
    ids, mask = tokenize_questions(tok, ["q0", "q3"], 16, prefix_id=sid)
    np.testing.assert_array_equal(ids, b["q_ids"][[0, 3]])
    np.testing.assert_array_equal(mask, b["q_mask"][[0, 3]])


def test_sampler_truncated_answer_sentence(tok):
    data = _data(tok, max_p_len=64)
    pid = int(data.base.pos_pid[0])
    m = int(data.marker_pos.row(pid)[1])  # marker of the answer sentence "beta was there."
    # Window m + 3: the marker and the first word piece ("beta") survive -> still the positive.
    data, b = _batch(tok, max_p_len=m + 3)
    before = data.stats["no_answer_sentence"]
    assert b["pos_pos"][0] == m
    assert _sentence_at(tok, b["pos_ids"][0], b["pos_pos"][0]) == "beta"
    # Window m + 2: the answer sentence is cut off -> fallback to the first sentence, counted.
    data, b = _batch(tok, max_p_len=m + 2)
    assert _sentence_at(tok, b["pos_ids"][0], b["pos_pos"][0]) == "alpha is here."
    assert data.stats["no_answer_sentence"] >= before + 1
    # The cut marker stays in the input (right before [SEP]) but is never sampled.
    assert b["pos_ids"][0][m] == tok.token_to_id(SENT_TOKEN) and m not in b["neg_pos"][0]


@pytest.mark.parametrize("negatives,shape", [("bm25", (1, 1)), ("bm25x2", (2, 2)),
                                              ("in_batch", (0, 0))])
def test_table4_variants(tok, negatives, shape):
    _, b = _batch(tok, negatives)
    assert b["hard_ids"].shape[1] == shape[0] and b["neg_src"].shape[1] == shape[1]
    if negatives == "bm25x2":
        # Only one BM25 passage exists: its slot is used, the second masked.
        assert b["neg_valid"][0].tolist() == [True, False]
        assert b["neg_src"][0].tolist()[0] == 1
    if negatives == "bm25":
        assert b["neg_valid"][:, 0].tolist() == [True, True, False, True]


def test_sampling_is_a_function_of_seed_and_step(tok):
    _, a = _batch(tok, seed=3)
    _, b = _batch(tok, seed=3)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    data = _data(tok)
    spec = dcsr.DcsrSpec(global_batch=2, max_q_len=16, max_p_len=32,
                         sent_id=tok.token_to_id(SENT_TOKEN), seed=5)
    run = dcsr.BatchIterator(data, spec)
    batches = [next(run) for _ in range(5)]
    resumed = dcsr.BatchIterator(data, spec)
    resumed.set_state(dict(run.get_state(), step=3))
    again = next(resumed)
    for k in batches[3]:
        np.testing.assert_array_equal(again[k], batches[3][k])


def test_export_tokenisation_matches_training(tok):
    data = _data(tok, max_p_len=32)
    ex = _examples()[0].positive_ctxs[0]
    out = tokens.tokenize_marked_passages(tok, [ex.title], [ex.text], sent_token=SENT_TOKEN, max_len=32, max_sents=8)
    row = data.body.row(int(data.base.pos_pid[0]))
    n = int(out["mask"][0].sum())
    assert out["ids"][0][:n - 1].tolist() == row[:n - 1].tolist()
    assert out["positions"][0][out["valid"][0]].tolist() == \
        data.marker_pos.row(int(data.base.pos_pid[0])).tolist()
