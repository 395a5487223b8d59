"""DCSR HasAns aggregation (docs/method.md §4, DCSR eq. 2), checked against hand-computed values."""

import math

import numpy as np
import pytest

from dense_cf.retrieval.sentence_ranking import has_ans, num_sentences_to_retrieve, rank_passages, softmax


def test_has_ans_by_hand():
    assert has_ans([0.5, 0.5]) == pytest.approx(0.75)          # 1 - 0.5 * 0.5
    assert has_ans([0.2, 0.1, 0.3]) == pytest.approx(1 - 0.8 * 0.9 * 0.7)  # 0.496
    assert has_ans([0.4]) == pytest.approx(0.4)
    assert has_ans([1.0, 0.3]) == 1.0
    assert has_ans([]) == 0.0
    assert has_ans([1e-12, 1e-12]) == pytest.approx(2e-12, rel=1e-6)  # no cancellation


def test_softmax_is_shift_invariant_and_safe():
    p = softmax(np.array([1000.0, 999.0]))
    assert p.sum() == pytest.approx(1.0)
    assert p[0] == pytest.approx(1 / (1 + math.exp(-1)))


def test_rank_passages_by_hand():
    # Sentences 0,1 -> passage 0; 2 -> passage 1; 3,4 -> passage 2.
    sentence_passage = np.array([0, 0, 1, 2, 2])
    # Retrieved (best first): s2 (log 4), s0 (log 2), s3 (log 2), s1 (log 1), s4 (log 1)
    # -> softmax probs 4/10, 2/10, 2/10, 1/10, 1/10.
    scores = np.log(np.array([[4.0, 2.0, 2.0, 1.0, 1.0]]))
    rows = np.array([[2, 0, 3, 1, 4]])
    p_rows, vals = rank_passages(scores, rows, sentence_passage, k=3)
    # passage 0: 1 - (1-.2)(1-.1) = 0.28; passage 2: the same 0.28; passage 1: 0.4.
    assert p_rows[0].tolist() == [1, 0, 2]       # tie 0/2 broken by best sentence rank (s0 < s3)
    np.testing.assert_allclose(vals[0], [0.4, 0.28, 0.28])
    # Two sentences of one passage can beat a single better sentence: 1-(.7)(.7)=.51 > .4
    sp = np.array([0, 0, 1])
    s = np.log(np.array([[0.4, 0.3, 0.3]]))
    r = np.array([[2, 0, 1]])
    p_rows, vals = rank_passages(s, r, sp, k=2)
    assert p_rows[0].tolist() == [0, 1]
    np.testing.assert_allclose(vals[0], [0.51, 0.4])


def test_rank_passages_skips_empty_slots_and_truncates():
    sp = np.array([0, 1, 2])
    scores = np.array([[3.0, 2.0, -np.inf], [0.0, 0.0, 0.0]])
    rows = np.array([[1, 0, -1], [-1, -1, -1]])
    p_rows, vals = rank_passages(scores, rows, sp, k=1)
    assert p_rows[0].tolist() == [1] and len(p_rows[1]) == 0
    assert vals[0][0] == pytest.approx(math.exp(3) / (math.exp(3) + math.exp(2)))


def test_num_sentences_to_retrieve():
    assert num_sentences_to_retrieve(100, 4.415) == 442   # ceil(100 * k̄)
    assert num_sentences_to_retrieve(100, 0.5) == 100     # never fewer than k
    assert num_sentences_to_retrieve(100, 4.4, override=50) == 50
