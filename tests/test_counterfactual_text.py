"""Host-side counterfactual text and near-duplicate distractors (docs/method.md §2, §5 robustness)."""

import unicodedata

import pytest

from dense_cf.text.answers import has_answer
from dense_cf.text.counterfactuals import counterfactual_text, distractor_variants

TEXT = ("Marta Olsen was born in Kaldera. She studied law in Pelgate for four years. "
        "Her first book appeared in 1887. She later moved to Torstead.")


def test_sentence_strategy_drops_the_answer_sentence():
    assert counterfactual_text(TEXT, ["Pelgate"]) == (
        "Marta Olsen was born in Kaldera. Her first book appeared in 1887. She later moved to Torstead.")


def test_sentence_strategy_drops_every_answer_sentence():
    text = "Pelgate is old. Nothing here. Pelgate again."
    assert counterfactual_text(text, ["pelgate"], "sentence") == "Nothing here."


def test_answer_strategy_drops_only_the_match_and_tidies():
    assert counterfactual_text(TEXT, ["Pelgate"], "answer") == (
        "Marta Olsen was born in Kaldera. She studied law in for four years. "
        "Her first book appeared in 1887. She later moved to Torstead.")
    # No space is left before closing punctuation; runs of whitespace collapse.
    assert counterfactual_text("Born in  Pelgate ,  1887.\nLater  more.", ["Pelgate"], "answer") == \
        "Born in, 1887. Later more."


def test_window_strategy_counts_dpr_tokens():
    # DPR tokens: words and single punctuation marks. 2 tokens each side of "Pelgate".
    assert counterfactual_text(TEXT, ["Pelgate"], "window", window_words=2) == (
        "Marta Olsen was born in Kaldera. She studied years. "
        "Her first book appeared in 1887. She later moved to Torstead.")
    # window 0 = answer strategy; a window may cross a sentence boundary ("." is a token).
    assert counterfactual_text(TEXT, ["Pelgate"], "window", window_words=0) == \
        counterfactual_text(TEXT, ["Pelgate"], "answer")
    assert counterfactual_text("One two. Pelgate x y.", ["Pelgate"], "window", window_words=2) == "One."


def test_multi_token_answer_and_case_follow_dpr_matching():
    text = "The club was financed by mortgaging its first building. It grew."
    assert counterfactual_text(text, ["BY MORTGAGING its first building"], "answer") == \
        "The club was financed. It grew."
    # A partial token is not a match (DPR token sub-sequence), so there is no p*.
    assert counterfactual_text("Pelgates are birds.", ["Pelgate"]) is None


def test_unicode_nfd_matches_map_back_to_original_characters():
    text = "Born in Zoë. She lived in Malmö for years."
    nfd_answer = unicodedata.normalize("NFD", "Malmö")
    assert counterfactual_text(text, [nfd_answer], "answer") == "Born in Zoë. She lived in for years."
    assert counterfactual_text(text, ["zoë"], "sentence") == "She lived in Malmö for years."
    assert counterfactual_text("Ἀθῆναι is old. Rome too.", ["ἀθῆναι"], "sentence") == "Rome too."


def test_regex_mode():
    assert counterfactual_text("Born in 1887. Died later.", [r"18\d\d"], "sentence", mode="regex") == \
        "Died later."


def test_no_match_or_nothing_left_gives_none():
    assert counterfactual_text(TEXT, ["Stockholm"]) is None
    assert counterfactual_text(TEXT, []) is None
    assert counterfactual_text("Pelgate.", ["Pelgate"], "sentence") is None
    assert counterfactual_text("Pelgate!", ["Pelgate"], "answer") is None  # only "!" left
    with pytest.raises(ValueError):
        counterfactual_text(TEXT, ["Pelgate"], "evidence")
    with pytest.raises(TypeError):
        counterfactual_text(TEXT, "Pelgate")


LONG = ("Isak Dalmann kept close ties to Kaldera. Dalmann is credited with 717 works. "
        "In 1887 Dalmann helped to found a rowing club. Dalmann moved to Pelgate to study. "
        "His letters are kept in the town archive. Few photographs of him survive.")


def test_variants_order_distinct_answer_free_and_deterministic():
    stats = {}
    v = distractor_variants(LONG, ["Pelgate"], 20, seed=3, stats=stats)
    assert len(v) == 20 and len(set(v)) == 20
    assert v[0] == counterfactual_text(LONG, ["Pelgate"], "sentence")
    assert v[1] == counterfactual_text(LONG, ["Pelgate"], "answer")
    assert v[2] == counterfactual_text(LONG, ["Pelgate"], "window")
    assert not any(has_answer(["Pelgate"], x) for x in v)
    assert LONG not in v and stats["no_answer_match"] == 0
    # The rest are made of p*'s sentences: reordered, at most one more sentence dropped.
    kept = _sents(v[0])
    for x in v[3:]:
        parts = _sents(x)
        assert len(set(parts)) == len(parts) and set(parts) <= set(kept)
        assert len(parts) >= len(kept) - 1
    assert distractor_variants(LONG, ["Pelgate"], 20, seed=3) == v
    other = distractor_variants(LONG, ["Pelgate"], 20, seed=4)
    assert other[:3] == v[:3] and other != v
    # k caps the list and is a prefix of the longer list.
    assert distractor_variants(LONG, ["Pelgate"], 5, seed=3) == v[:5]
    assert distractor_variants(LONG, ["Pelgate"], 0, seed=3) == []


def test_variants_exhaust_small_passages():
    # 2 kept sentences: orders (2) + one dropped (2) = 4 sentence texts incl. p*; + answer, window.
    text = "Alpha is here. Beta moved to Pelgate. Gamma stays."
    v = distractor_variants(text, ["Pelgate"], 20, seed=0)
    assert len(v) == len(set(v)) == 6
    assert set(v[3:]) | {v[0]} == {"Alpha is here. Gamma stays.", "Gamma stays. Alpha is here.",
                                   "Alpha is here.", "Gamma stays."}


def test_variants_that_still_contain_the_answer_are_dropped_and_counted():
    # Removing "Boston" joins "New" and "York" into a match of the second answer: the answer
    # strategy's text is rejected by has_answer and counted; the others are kept.
    text = "Alpha went to New Boston York. Beta stays here. Gamma is fine."
    answers = ["Boston", "New York"]
    assert has_answer(answers, counterfactual_text(text, answers, "answer"))
    stats = {}
    v = distractor_variants(text, answers, 10, seed=1, stats=stats)
    assert stats["dropped_with_answer"] == 1
    assert v and not any(has_answer(answers, x) for x in v)
    assert v[0] == "Beta stays here. Gamma is fine."


def test_variants_of_a_passage_without_a_match():
    stats = {}
    assert distractor_variants(LONG, ["Stockholm"], 5, seed=0, stats=stats) == []
    assert stats["no_answer_match"] == 1


def _sents(x):
    return [p.rstrip(".") for p in x.split(". ")]


def test_many_sentences_are_sampled_deterministically():
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight"]
    text = " ".join(f"Sentence number {w} is here." for w in words) + " Pelgate it is."
    v = distractor_variants(text, ["Pelgate"], 20, seed=7)
    assert len(v) == len(set(v)) == 20 and v == distractor_variants(text, ["Pelgate"], 20, seed=7)
    assert not any("Pelgate" in x for x in v)
    kept = _sents(v[0])
    assert len(kept) == 8
    for x in v[3:]:  # p*'s sentences, reordered, at most one of them dropped, none repeated
        parts = _sents(x)
        assert len(set(parts)) == len(parts) and set(parts) <= set(kept) and len(parts) >= 7
