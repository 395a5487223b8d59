"""Tests for dense_cf.eval.metrics: DPR retrieval metrics (docs/method.md §6)."""

import random

import pytest

from dense_cf.eval.metrics import (
    evaluate_retrieval,
    hits_for_question,
    hits_matrix,
    mrr,
    per_question,
    top_k_accuracy,
    top_k_curve,
)

T, F = True, False


def dpr_top_k_hits(scores):
    """Literal transcription of DPR's calculate_matches counting (the oracle)."""
    n_docs = len(scores[0])
    top_k_hits = [0] * n_docs
    for question_hits in scores:
        best_hit = next((i for i, x in enumerate(question_hits) if x), None)
        if best_hit is not None:
            top_k_hits[best_hit:] = [v + 1 for v in top_k_hits[best_hit:]]
    return [v / len(scores) for v in top_k_hits]


# Hand-made rankings: first hit at rank 1, rank 3, none, and a short list (2 passages, hit at 2).
HITS = [
    [T, F, F, T, F],
    [F, F, T, F, F],
    [F, F, F, F, F],
    [F, T],
]


def test_per_question_first_hit_ranks():
    assert per_question(HITS) == [1, 3, None, 2]
    assert per_question([[], [F], [F, F, F, T]]) == [None, None, 4]


def test_top_k_hand_made():
    acc = top_k_accuracy(HITS, ks=(1, 2, 3, 5, 100))
    assert acc == {1: 0.25, 2: 0.5, 3: 0.75, 5: 0.75, 100: 0.75}
    # k larger than every list: counts with what the lists have; an empty list is a miss.
    assert top_k_accuracy([[T], [], [F]], ks=(20,)) == {20: pytest.approx(1 / 3)}
    assert top_k_accuracy(HITS) == {1: 0.25, 5: 0.75, 20: 0.75, 100: 0.75}


def test_mrr_hand_made():
    assert mrr(HITS) == pytest.approx((1 + 1 / 3 + 0 + 1 / 2) / 4)
    assert mrr(HITS, cutoff=2) == pytest.approx((1 + 0 + 0 + 1 / 2) / 4)
    assert mrr([[F, F, F]]) == 0.0
    assert mrr([[T]]) == 1.0


def test_empty_and_bad_inputs_raise():
    with pytest.raises(ValueError):
        top_k_accuracy([])
    with pytest.raises(ValueError):
        mrr([])
    with pytest.raises(ValueError):
        top_k_accuracy(HITS, ks=(0,))
    with pytest.raises(ValueError):
        hits_matrix([["a"]], [["a"], ["b"]])
    with pytest.raises(ValueError):
        hits_matrix([["a"]], [["a"]], mode="fuzzy", workers=2)
    with pytest.raises(TypeError):  # a bare string is not a list of answers
        hits_matrix(["Paris"], [["P"]])


def test_top_k_matches_dpr_counting_on_random_rankings():
    rng = random.Random(0)
    hits = [[rng.random() < 0.08 for _ in range(30)] for _ in range(200)]
    curve = top_k_curve(hits)
    assert curve == pytest.approx(dpr_top_k_hits(hits))
    acc = top_k_accuracy(hits, ks=range(1, 31))
    assert [acc[k] for k in range(1, 31)] == pytest.approx(curve)


def test_hits_unicode_nfc_vs_nfd():
    nfc, nfd = "Beyonc\u00e9", "Beyonce\u0301"
    texts = [f"{nfc} sang it.", f"{nfd} sang it.", "Beyonce sang it."]
    # NFC and NFD spellings are the same after NFD; the unaccented one is a different token.
    assert hits_for_question([nfc], texts) == [T, T, F]
    assert hits_for_question([nfd], texts) == [T, T, F]


def test_hits_punctuation_and_split_tokens():
    texts = ["He moved to the U.S. in 1990.", "About 1,000 people came.",
             "I love New\nYork in June.", "I love NewYork."]
    # "U. S." tokenises to U . S . like "U.S.", whitespace between tokens is irrelevant.
    assert hits_for_question(["U. S."], texts) == [T, F, F, F]
    assert hits_for_question(["1 , 000"], texts) == [F, T, F, F]
    assert hits_for_question(["1000"], texts) == [F, F, F, F]
    # An answer split across tokens (and a line break) still matches; a glued one does not.
    assert hits_for_question(["new york"], texts) == [F, F, T, F]
    # No article/punctuation stripping in retrieval matching (that is reader EM).
    assert hits_for_question(["the US"], texts) == [F, F, F, F]


def test_hits_regex_mode_curated_trec():
    texts = ["The Eiffel tower is 324 metres tall.", "It is 330 m high.",
             "Height: three hundred metres"]
    pattern = r"3[0-9]{2}\s*(m|metres|meters)\b"
    assert hits_for_question([pattern], texts, mode="regex") == [T, T, F]
    # The same pattern in string mode is just literal tokens: no hit anywhere.
    assert hits_for_question([pattern], texts, mode="string") == [F, F, F]
    # Case-insensitive, and an invalid pattern matches nothing instead of raising.
    assert hits_for_question(["EIFFEL", "(unclosed"], texts, mode="regex") == [T, F, F]


def test_title_is_not_used_and_missing_text_is_a_miss():
    retrieved = [[("1", "Paris", "The capital of France.", 9.0),
                  ("2", "Lyon", "Paris is the capital of France.", 8.0),
                  ("3", "Nowhere", None, 7.0)]]
    rep = evaluate_retrieval(["capital of france?"], [["Paris"]], retrieved, ks=(1, 2))
    assert rep["hits"] == [[F, T, F]]
    assert rep["first_hit_rank"] == [2]
    assert rep["top_k_fraction"] == {1: 0.0, 2: 1.0}


def test_evaluate_retrieval_report():
    questions = ["who wrote hamlet", "capital of peru", "tallest mountain"]
    answers = [["Shakespeare", "William Shakespeare"], ["Lima"], ["Everest"]]
    retrieved = [
        [("a", "", "Hamlet was written by William Shakespeare.", 3.0),
         ("b", "", "Nothing here.", 2.0)],
        [("c", "", "Peru's economy.", 5.0), ("d", "", "Lima is the capital.", 4.5),
         ("e", "", "Lima again.", 1.0)],
        [("f", "", "K2 is high.", 1.0)],
    ]
    rep = evaluate_retrieval(questions, answers, retrieved, ks=(1, 2, 100))
    assert rep["n_questions"] == 3
    assert rep["mode"] == "string"
    assert rep["top_k_fraction"] == pytest.approx({1: 1 / 3, 2: 2 / 3, 100: 2 / 3})
    assert rep["top_k"] == pytest.approx({1: 100 / 3, 2: 200 / 3, 100: 200 / 3})
    assert rep["mrr"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert rep["hits"] == [[T, F], [F, T, T], [F]]
    assert rep["first_hit_rank"] == [1, 2, None]
    assert rep["questions"] == questions
    with pytest.raises(ValueError):
        evaluate_retrieval(questions[:2], answers, retrieved)


def test_workers_two_matches_inline():
    rng = random.Random(1)
    words = ["paris", "lima", "U.S.", "Beyonc\u00e9", "1,000", "new", "york", "the", "a"]
    texts = [[" ".join(rng.choices(words, k=12)) for _ in range(8)] for _ in range(40)]
    answers = [[rng.choice(words), " ".join(rng.choices(words, k=2))] for _ in range(40)]
    inline = hits_matrix(answers, texts, workers=1)
    pooled = hits_matrix(answers, texts, workers=2, chunksize=3)
    assert pooled == inline
    assert inline == [hits_for_question(a, t) for a, t in zip(answers, texts)]
    assert any(any(row) for row in inline) and not all(all(row) for row in inline)
