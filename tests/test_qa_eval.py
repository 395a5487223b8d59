"""EM / F1 normalisation (dense_cf.text.qa_eval) on hand-written cases: SQuAD's rules, Unicode,
punctuation, several gold answers, regex answers (CuratedTREC)."""

import pytest

from dense_cf.text.qa_eval import exact_match, f1_score, normalize_answer, qa_scores, regex_match, token_f1


@pytest.mark.parametrize("text, want", [
    ("The  Quick, brown fox!", "quick brown fox"),
    ("an apple a day", "apple day"),
    ("Theatre and anthem", "theatre and anthem"),       # articles only as whole words
    ("A.B.C.", "abc"),                                 # punctuation goes, letters join
    ("  New\tYork \n City ", "new york city"),
    ("5,303 crowns", "5303 crowns"),
    ("«Paris»", "«paris»"),                            # only ASCII punctuation (SQuAD)
    ("", ""),
])
def test_normalize_answer(text, want):
    assert normalize_answer(text) == want


def test_unicode_composed_and_decomposed_forms_match():
    composed, decomposed = "Café Müller", "Cafe\u0301 Mu\u0308ller"
    assert composed != decomposed
    assert exact_match(composed, [decomposed]) and exact_match(decomposed, [composed])
    assert token_f1(composed, decomposed) == 1.0
    assert not exact_match("Cafe Muller", [composed])  # accents are not stripped
    assert exact_match("ΣΊΣΥΦΟΣ", ["σίσυφος"])  # case folding beyond ASCII


def test_exact_match_is_the_max_over_gold_answers():
    assert exact_match("1990", ["May 1990", "the year 1990", "1990"])
    assert exact_match("the Beatles", ["Beatles"])
    assert not exact_match("May 1990", ["1990"])
    assert not exact_match("anything", [])
    assert not exact_match("", ["x"])
    assert exact_match("", ["the"])  # both normalise to ""


def test_f1():
    assert token_f1("the cat sat", "cat sat down") == pytest.approx(0.8)  # p = 1, r = 2/3
    assert token_f1("cat cat", "cat") == pytest.approx(2 / 3)           # counts, not sets
    assert token_f1("dog", "cat") == 0.0
    assert token_f1("", "") == 1.0 and token_f1("the", "a") == 1.0
    assert token_f1("", "cat") == 0.0 and token_f1("cat", "") == 0.0
    assert f1_score("cat sat", ["dog", "the cat sat down"]) == pytest.approx(0.8)
    assert f1_score("x", []) == 0.0


def test_regex_answers_as_drqa():
    assert regex_match("Thomas Edison", r"(Thomas )?Edison")
    assert regex_match("edison's lab", "Edison")        # ignore case; match at the start
    assert not regex_match("by Edison", "Edison")        # re.match, not search
    assert not regex_match("anything", "(")              # does not compile: no match
    assert regex_match("Cafe\u0301", "Café")             # NFD on both sides
    assert exact_match("1969", [r"19[56]\d", "x"], mode="regex")
    assert f1_score("1969", [r"19[56]\d"], mode="regex") == 1.0
    assert f1_score("1979", [r"19[56]\d"], mode="regex") == 0.0


def test_qa_scores_and_argument_checks():
    em, f1 = qa_scores(["Paris", "a dog"], [["paris"], ["the cat"]])
    assert em == [True, False] and f1 == [1.0, 0.0]
    with pytest.raises(ValueError, match="2 predictions for 1"):
        qa_scores(["a", "b"], [["a"]])
    with pytest.raises(TypeError, match="not a single str"):
        exact_match("x", "x")
    with pytest.raises(ValueError, match="mode must be one of"):
        f1_score("x", ["x"], mode="fuzzy")
