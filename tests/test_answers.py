"""Tests for dense_cf.text.answers (docs/method.md §6 has_answer, docs/method.md §5 question types)."""

import random
import unicodedata

import pytest
import regex

from dense_cf.text.answers import dpr_tokenize, find_answer_spans, has_answer, question_type

# A literal transcription of DPR's qa_validation.has_answer + SimpleTokenizer, as the oracle.
_DPR_RE = regex.compile(r"([\p{L}\p{N}\p{M}]+)|([^\p{Z}\p{C}])",
                        flags=regex.IGNORECASE + regex.UNICODE + regex.MULTILINE)


def _dpr_words(text):
    return [m.group().lower() for m in _DPR_RE.finditer(text)]


def dpr_has_answer(answers, text, match_type="string"):
    text = unicodedata.normalize("NFD", text)
    if match_type == "string":
        text = _dpr_words(text)
        for single_answer in answers:
            single_answer = _dpr_words(unicodedata.normalize("NFD", single_answer))
            for i in range(0, len(text) - len(single_answer) + 1):
                if single_answer == text[i: i + len(single_answer)]:
                    return True
    elif match_type == "regex":
        for single_answer in answers:
            single_answer = unicodedata.normalize("NFD", single_answer)
            try:
                pattern = regex.compile(single_answer,
                                        flags=regex.IGNORECASE + regex.UNICODE + regex.MULTILINE)
            except BaseException:
                continue
            if pattern.search(text) is not None:
                return True
    return False


def test_dpr_tokenize_offsets_and_punctuation():
    text = "U.S. 1,000 Beyoncé"
    toks = dpr_tokenize(text)
    assert [t for t, _, _ in toks] == ["U", ".", "S", ".", "1", ",", "000", "Beyoncé"]
    assert all(text[s:e] == t for t, s, e in toks)
    assert dpr_tokenize("") == []
    assert dpr_tokenize(" \t\n") == []


def test_accents_nfc_vs_nfd():
    nfc = "Beyonc\u00e9 sang."
    nfd = "Beyonce\u0301 sang."
    for text in (nfc, nfd):
        for answer in ("Beyonc\u00e9", "beyonce\u0301", "BEYONCÉ"):
            assert has_answer([answer], text)
    # Without the accent it is a different token sequence ("beyonce" vs "beyonce" + mark).
    assert not has_answer(["Beyonce"], nfc)


def test_case_and_punctuation():
    text = "He moved to the U.S. in 1990."
    assert has_answer(["u.s."], text)
    assert has_answer(["U. S."], text)  # whitespace between tokens does not matter
    assert not has_answer(["US"], text)
    assert has_answer(["IN 1990"], text)


def test_token_boundaries():
    assert not has_answer(["New York"], "I love NewYork.")
    assert has_answer(["New York"], "I love New   York.")
    assert not has_answer(["York"], "Yorkshire")
    assert has_answer(["1,000"], "about 1 , 000 people")  # DPR tokens: 1 , 000
    assert not has_answer(["1000"], "about 1,000 people")
    assert has_answer(["1,000"], "about 1,000 people")


def test_multiple_answers_and_misses():
    assert has_answer(["nothing", "paris"], "Paris is nice")
    assert not has_answer(["london", "rome"], "Paris is nice")
    assert not has_answer([], "Paris is nice")


def test_empty_answer_dpr_quirk():
    # DPR: [] is a sub-sequence of every token list.
    assert has_answer([""], "anything")
    assert dpr_has_answer([""], "anything")
    assert find_answer_spans("anything", [""]) == []


def test_regex_mode():
    text = "The Baltimore Orioles won in 1983."
    assert has_answer([r"Baltimore\s+Orioles"], text, mode="regex")
    assert has_answer([r"baltimore orioles"], text, mode="regex")  # case-insensitive
    assert not has_answer([r"^Orioles"], text, mode="regex")
    assert has_answer([r"Beyonc(e|é)"], "Beyoncé", mode="regex")


def test_invalid_regex_is_no_match():
    assert not has_answer(["(unclosed"], "(unclosed", mode="regex")
    assert has_answer(["(unclosed", "clos"], "(unclosed", mode="regex")
    assert find_answer_spans("(unclosed", ["(unclosed"], mode="regex") == []


def test_bad_arguments():
    with pytest.raises(TypeError):
        has_answer("paris", "paris")
    with pytest.raises(ValueError):
        has_answer(["paris"], "paris", mode="fuzzy")


def test_find_spans_ascii():
    text = "New York, new york! NewYork."
    assert find_answer_spans(text, ["new york"]) == [(0, 8), (10, 18)]
    # Overlapping matches of different answers are merged.
    assert find_answer_spans("a b c d", ["a b", "b c"]) == [(0, 5)]


def test_find_spans_map_back_through_nfd():
    # NFC "é" (1 code point) becomes 2 after NFD: later offsets must not shift.
    text = "Caf\u00e9 au lait at Beyonc\u00e9's place"
    spans = find_answer_spans(text, ["beyonce\u0301"])
    assert [text[s:e] for s, e in spans] == ["Beyonc\u00e9"]
    spans = find_answer_spans(text, ["lait"])
    assert [text[s:e] for s, e in spans] == ["lait"]
    # Hangul syllables decompose into 2-3 jamo each.
    text = "\ud55c\uad6d\uc5b4 and Seoul"
    assert [text[s:e] for s, e in find_answer_spans(text, ["seoul"])] == ["Seoul"]
    korean = "\ud55c\uad6d\uc5b4"
    assert [text[s:e] for s, e in find_answer_spans(text, [korean])] == [korean]


def test_find_spans_with_reordered_combining_marks():
    # a + acute (ccc 230) + dot below (ccc 220): NFD swaps the marks.
    text = "x a\u0301\u0323b y"
    assert unicodedata.normalize("NFD", text) != text
    spans = find_answer_spans(text, ["a\u0323\u0301b"])
    assert [text[s:e] for s, e in spans] == ["a\u0301\u0323b"]


def test_find_spans_regex_mode():
    text = "Caf\u00e9 Baltimore  Orioles"
    spans = find_answer_spans(text, [r"baltimore\s+orioles", "caf"], mode="regex")
    assert [text[s:e] for s, e in spans] == ["Caf", "Baltimore  Orioles"]
    assert find_answer_spans(text, ["x*"], mode="regex") == []  # zero-width matches skipped


_ALPHABET = list("ab AB.,'-1é\u00e9\u0301\u0323\u00c5\u212b\u03a3\u03c3\u03c2\u0130\u00df") + [
    "\t", "\n", "\u00a0", "\ud55c", "U.S.", "New York"]


@pytest.mark.parametrize("seed", range(3))
def test_agrees_with_dpr_reference_and_spans(seed):
    rng = random.Random(seed)
    for _ in range(400):
        text = "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 30)))
        answers = ["".join(rng.choice(_ALPHABET) for _ in range(rng.randint(1, 4)))
                   for _ in range(rng.randint(1, 3))]
        answers = [a for a in answers if dpr_tokenize(unicodedata.normalize("NFD", a))]
        expected = dpr_has_answer(answers, text)
        assert has_answer(answers, text) == expected, (answers, text)
        spans = find_answer_spans(text, answers)
        assert bool(spans) == expected, (answers, text, spans)
        for s, e in spans:
            assert 0 <= s < e <= len(text)
            # Each span, re-normalised, contains one of the answers.
            assert has_answer(answers, text[s:e])
        patterns = [regex.escape(a) for a in answers]
        assert has_answer(patterns, text, mode="regex") == dpr_has_answer(patterns, text, "regex")


def test_question_type():
    assert question_type("Who wrote Hamlet?") == "who"
    assert question_type("In which year did who win?") == "which"  # first by position
    assert question_type("WHEN was it built") == "when"
    assert question_type("whose car is this") == "other"  # whole words only
    assert question_type("somehow it worked") == "other"
    assert question_type("the capital of france, what is it") == "what"
    assert question_type("where's the beef") == "where"
    assert question_type("") == "other"


def test_greek_final_sigma_context():
    # str.lower picks "ς"/"σ" from context; DPR lowercases each token on its own.
    text = "\u0391\u03a3'\u0392"  # ΑΣ'Β: whole-text lower gives σ, the token alone gives ς
    for answer in ("\u0391\u03a3", "\u03b1\u03c2", "\u03b1\u03c3"):
        assert has_answer([answer], text) == dpr_has_answer([answer], text)
    assert has_answer(["\u0391\u03a3"], text)
    assert not has_answer(["\u03b1\u03c3"], text)  # token lowercases to final ς
