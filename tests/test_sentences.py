"""Tests for dense_cf.text.sentences.split_sentences."""

import random

import pytest

from dense_cf.text.sentences import BACKENDS, split_sentences

PASSAGE = (
    'Aaron ( or ; "Ahärôn") is a prophet, high priest, and the brother of Moses. '
    "Knowledge of Aaron comes exclusively from religious texts, such as the Bible and Quran.  "
    "Dr. Smith went to the U.S. in 1999 with Mr. Jones! Did he return?\n"
    "He did."
)


def _check_invariants(text, spans):
    prev_end = 0
    covered = set()
    for start, end in spans:
        assert prev_end <= start < end <= len(text)
        piece = text[start:end]
        assert piece == piece.strip() and piece
        covered.update(range(start, end))
        prev_end = end
    assert all(i in covered for i, c in enumerate(text) if not c.isspace())


@pytest.mark.parametrize("backend", BACKENDS)
def test_splits_passage(backend):
    spans = split_sentences(PASSAGE, backend=backend)
    sentences = [PASSAGE[s:e] for s, e in spans]
    assert sentences == [
        'Aaron ( or ; "Ahärôn") is a prophet, high priest, and the brother of Moses.',
        "Knowledge of Aaron comes exclusively from religious texts, such as the Bible and Quran.",
        "Dr. Smith went to the U.S. in 1999 with Mr. Jones!",
        "Did he return?",
        "He did.",
    ]
    _check_invariants(PASSAGE, spans)


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_and_blank(backend):
    assert split_sentences("", backend=backend) == []
    assert split_sentences("  \n\t ", backend=backend) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_single_sentence_strips_whitespace(backend):
    text = "   no terminal punctuation here  "
    assert split_sentences(text, backend=backend) == [(3, 31)]
    assert text[3:31] == "no terminal punctuation here"


def test_rules_abbreviations_and_initials():
    text = "J. R. R. Tolkien wrote it. See e.g. Fig. 3 for details. It was approx. 5 km."
    sentences = [text[s:e] for s, e in split_sentences(text, backend="rules")]
    assert sentences == ["J. R. R. Tolkien wrote it.", "See e.g. Fig. 3 for details.",
                         "It was approx. 5 km."]


def test_unknown_backend():
    with pytest.raises(ValueError):
        split_sentences("A. B.", backend="nltk")


_WORDS = ["The", "cat", "sat.", "Dr.", "U.S.", "1.", "(a)", "e.g.", "...", "?!", '"Hi."',
          "\n\n", "\t", "3.14", "No.", "5", "Smith", "“Yes.”", "é", "\u00a0", "A.", "!", ";"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_invariants_on_random_text(backend):
    rng = random.Random(0)
    for _ in range(150):
        text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 30)))
        if rng.random() < 0.3:
            text = text.replace(" ", "")
        _check_invariants(text, split_sentences(text, backend=backend))


def test_repeated_sentences_get_distinct_spans():
    text = "Yes. Yes. Yes."
    assert split_sentences(text) == [(0, 4), (5, 9), (10, 14)]


def test_rules_sentence_openers():
    text = 'He left. \u00e9lan is lowercase. "Quoted." (Aside.) 1999 was a year.'
    sentences = [text[s:e] for s, e in split_sentences(text, backend="rules")]
    assert sentences == ["He left. \u00e9lan is lowercase.", '"Quoted."', "(Aside.)",
                         "1999 was a year."]


def test_pysbd_failure_falls_back_to_rules(monkeypatch):
    import dense_cf.text.sentences as sentences

    class Broken:
        def segment(self, text):
            raise RuntimeError("boom")

    monkeypatch.setattr(sentences, "_segmenter", lambda language="en": Broken())
    # Spans are memoised: one from an earlier test would skip pysbd, and this test's fallback
    # spans must not outlive it.
    sentences._spans.cache_clear()
    try:
        text = "First one. Second one."
        assert split_sentences(text) == split_sentences(text, backend="rules") == [(0, 10), (11, 22)]
    finally:
        sentences._spans.cache_clear()
