"""Leave-one-span-out distractor candidates and the lowest-confidence choice (EADPR §3.1, docs/method.md §2).

For a question q with answers A and positive passage p+ split into n sentences s_1..s_n
(``split_sentences``, exactly the ids the training pipeline assigns to tokens), candidate
p_i* = p+ without s_i. A QA model scores each candidate; the chosen span is the one whose
removal gives the LOWEST confidence (EADPR: "highest perplexity"). Everything here is pure; the
scorer and the file handling live in ``scorer.py`` and ``dense_cf.mining.evidence.annotate``.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from dense_cf.text.answers import find_answer_spans
from dense_cf.text.sentences import split_sentences

# Why an example gets no pseudo-evidence (counted and written to the output, never dropped).
SKIP_NO_ANSWERS = "no_answers"
SKIP_EMPTY_TEXT = "empty_text"
SKIP_SINGLE_SENTENCE = "single_sentence"
SKIP_REASONS = (SKIP_NO_ANSWERS, SKIP_EMPTY_TEXT, SKIP_SINGLE_SENTENCE)


@dataclasses.dataclass(frozen=True)
class ExamplePlan:
    """What to score for one example: every (candidate, answer) pair."""

    question: str
    answers: tuple[str, ...]        # the answers scored (see :func:`answers_to_score`)
    candidates: tuple[str, ...]     # candidates[i] = passage text without sentence i
    answer_in_passage: bool         # some answer string-matches p+ (DPR normalisation)
    answer_sentences: tuple[int, ...] = ()  # sentences holding a match (the `sentence` strategy's)

    @property
    def num_sentences(self) -> int:
        return len(self.candidates)


def leave_one_out(text: str, spans: Sequence[tuple[int, int]] | None = None) -> list[str]:
    """p_i* for every sentence i of ``text``: the other sentences joined by single spaces.

    Sentence i here is sentence id i of the pipeline (``split_sentences(text)``, pysbd).
    """
    spans = split_sentences(text) if spans is None else spans
    pieces = [" ".join(text[s:e].split()) for s, e in spans]
    return [" ".join(p for j, p in enumerate(pieces) if j != i) for i in range(len(pieces))]


def answers_to_score(text: str, answers: Sequence[str], max_answers: int,
                     mode: str = "string") -> tuple[tuple[str, ...], bool]:
    """(answers to score, whether any matched ``text``).

    Answers found in the passage come first (their evidence is what we look for), then the
    others in dataset order; duplicates and blanks are dropped; at most ``max_answers``.
    """
    if max_answers < 1:
        raise ValueError(f"max_answers must be >= 1, got {max_answers}")
    uniq = list(dict.fromkeys(a.strip() for a in answers if a and a.strip()))
    found = [a for a in uniq if find_answer_spans(text, [a], mode=mode)]
    rest = [a for a in uniq if a not in found]
    return tuple((found + rest)[:max_answers]), bool(found)


def plan_example(question: str, answers: Sequence[str], text: str, *, max_answers: int = 1,
                 answer_mode: str = "string") -> ExamplePlan | str:
    """The candidates to score for one example, or a skip reason from :data:`SKIP_REASONS`."""
    chosen, matched = answers_to_score(text, answers, max_answers, answer_mode) if any(
        a and a.strip() for a in answers) else ((), False)
    if not chosen:
        return SKIP_NO_ANSWERS
    if not text or text.isspace():
        return SKIP_EMPTY_TEXT
    spans = split_sentences(text)
    if len(spans) < 2:  # removing the only sentence leaves no passage: no pivot
        return SKIP_SINGLE_SENTENCE
    matches = find_answer_spans(text, list(chosen), mode=answer_mode) if matched else []
    holding = tuple(i for i, (s, e) in enumerate(spans) if any(a < e and s < b for a, b in matches))
    return ExamplePlan(question=question, answers=chosen, candidates=tuple(leave_one_out(text, spans)),
                       answer_in_passage=matched, answer_sentences=holding)


def candidate_confidence(scores: np.ndarray) -> np.ndarray:
    """[n_candidates, n_answers] answer scores -> [n_candidates]: the best-scored answer.

    With several gold aliases the model is confident if it can produce any of them, so a
    candidate's confidence is its maximum over answers.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2 or scores.shape[0] == 0 or scores.shape[1] == 0:
        raise ValueError(f"expected a non-empty [candidates, answers] array, got shape {scores.shape}")
    return scores.max(axis=1)


def select_lowest(confidence: Sequence[float]) -> int:
    """Index of the lowest-confidence candidate (EADPR §3.1); ties go to the earliest sentence.

    NaN scores (a broken scorer) raise instead of being silently ranked.
    """
    c = np.asarray(confidence, dtype=np.float64)
    if c.size == 0:
        raise ValueError("no candidates to select from")
    if np.isnan(c).any():
        raise ValueError(f"NaN confidence among candidates: {c.tolist()}")
    return int(np.argmin(c))  # argmin returns the first minimum
