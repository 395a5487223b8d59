"""Counterfactual strategies (docs/method.md §2): per-token features and the on-the-fly drop masks."""

import numpy as np
import pytest

from dense_cf.inputs import cf_masks as cf


def _mask(sent, ans, strategy, **kw):
    drop, valid = cf.drop_mask(np.asarray(sent, np.int32), np.asarray(ans, np.int8), strategy, **kw)
    return drop.astype(int).tolist(), bool(valid)


# tokens:    CLS  t   SEP | s0 s0 s0 | s1  s1(ans) s1(ans) s1 | s2 s2
SENT = [-1, -1, -1, 0, 0, 0, 1, 1, 1, 1, 2, 2]
ANS = [0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0]


def test_sentence_strategy_drops_whole_answer_sentence():
    drop, valid = _mask(SENT, ANS, "sentence")
    assert drop == [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0]
    assert valid


def test_answer_strategy_drops_only_answer_tokens():
    drop, valid = _mask(SENT, ANS, "answer")
    assert drop == [0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0]
    assert valid


def test_window_strategy_drops_answer_plus_window_within_text():
    drop, _ = _mask(SENT, ANS, "window", window=2)
    assert drop == [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0]
    # The window never reaches the title/special tokens.
    drop, _ = _mask(SENT, ANS, "window", window=6)
    assert drop[:3] == [0, 0, 0] and all(drop[3:])


def test_multiple_answer_sentences_all_dropped():
    ans = [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1]
    drop, valid = _mask(SENT, ans, "sentence")
    assert drop == [0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 1, 1] and valid


def test_no_answer_match_means_no_counterfactual():
    drop, valid = _mask(SENT, [0] * len(SENT), "sentence")
    assert not any(drop) and not valid


def test_everything_dropped_is_not_a_counterfactual():
    sent = [-1, -1, 0, 0]
    drop, valid = _mask(sent, [0, 0, 1, 0], "sentence")
    assert drop == [0, 0, 1, 1] and not valid


def test_evidence_strategy_uses_annotation():
    drop, valid = _mask(SENT, [0] * len(SENT), "evidence", evidence_sent=2)
    assert drop == [0] * 10 + [1, 1] and valid
    drop, valid = _mask(SENT, ANS, "evidence", evidence_sent=-1)
    assert not any(drop) and not valid


def test_unknown_strategy_rejected():
    with pytest.raises(ValueError, match="unknown counterfactual strategy"):
        cf.drop_mask(np.zeros(3, np.int32), np.zeros(3, np.int8), "bogus")


def test_token_features_from_char_offsets():
    text = "Paris is big. The tower was built in 1889. It is tall."
    # Whitespace "tokens" with their char offsets.
    offsets, start = [], 0
    for word in text.split(" "):
        offsets.append((start, start + len(word)))
        start += len(word) + 1
    offsets = np.asarray(offsets)
    sents = [(0, 13), (14, 42), (43, 54)]
    sid = cf.token_sentence_ids(offsets, sents)
    assert sid.tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2]
    flags = cf.token_answer_flags(text, offsets, ["1889"])
    assert flags.tolist() == [0] * 8 + [1] + [0] * 3
    # DPR normalisation: case-insensitive token match; "the tower" spans two tokens.
    flags = cf.token_answer_flags(text, offsets, ["THE TOWER"])
    assert flags.tolist() == [0, 0, 0, 1, 1] + [0] * 7
    assert not cf.token_answer_flags(text, offsets, ["Lyon"]).any()
