"""Retrieval metrics computed exactly as DPR's own evaluation does (docs/method.md §6).

DPR (``dense_retriever.py`` -> ``validate`` -> ``qa_validation.calculate_matches``) marks each
retrieved passage with ``has_answer(answers, passage_text)`` -- the passage TEXT only, never the
title -- and counts a question as a top-k hit when its first answer-bearing passage has rank
<= k. Lists shorter than k count with what they have. We add MRR (first-hit reciprocal rank, 0
when no retrieved passage bears an answer) and keep the per-question hit lists.
"""

from __future__ import annotations

import math
import multiprocessing
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

from dense_cf.text.answers import has_answer

__all__ = [
    "DEFAULT_KS",
    "RetrievalReport",
    "evaluate_retrieval",
    "hits_for_question",
    "hits_matrix",
    "mrr",
    "per_question",
    "top_k_accuracy",
    "top_k_curve",
]

DEFAULT_KS: tuple[int, ...] = (1, 5, 20, 100)

# A retrieved passage as produced by the retriever: (passage id, title, text, score).
Retrieved = tuple[Any, str, str, float]


def hits_for_question(answers: Sequence[str], passages_texts: Iterable[str | None],
                      mode: str = "string") -> list[bool]:
    """``has_answer`` on each passage's text, in rank order (docs/method.md §6, DPR ``check_answer``).

    A missing text (``None``) counts as no hit, as DPR does for ids absent from its passage db.
    """
    return [text is not None and has_answer(answers, text, mode) for text in passages_texts]


def _hits_job(job: tuple[Sequence[str], Sequence[str | None], str]) -> list[bool]:
    # Module-level so that it pickles for the worker processes.
    answers, texts, mode = job
    return hits_for_question(answers, texts, mode)


def hits_matrix(answers_list: Sequence[Sequence[str]],
                texts_list: Sequence[Sequence[str | None]],
                mode: str = "string", workers: int = 1, chunksize: int | None = None,
                mp_context: str = "spawn") -> list[list[bool]]:
    """Per-question hit lists for many questions (docs/method.md §6), optionally on a process pool.

    ``workers=1`` runs inline. With more workers a ``multiprocessing`` pool maps questions in
    order, as DPR's ``calculate_matches`` does; the result is identical either way. ``spawn``
    is the default start method because forking a process that has JAX/TF threads running can
    deadlock; like any spawn pool it needs the calling script's ``if __name__ == "__main__"``
    guard.
    """
    if len(answers_list) != len(texts_list):
        raise ValueError(f"{len(answers_list)} answer lists but {len(texts_list)} text lists")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if mode not in ("string", "regex"):
        raise ValueError(f"mode must be 'string' or 'regex', got {mode!r}")  # fail before forking
    # Answers pass through as given: list("Paris") would silently test single letters, while
    # has_answer rejects a bare str with a TypeError.
    jobs = [(a, list(t), mode) for a, t in zip(answers_list, texts_list)]
    if workers == 1 or len(jobs) <= 1:
        return [_hits_job(job) for job in jobs]
    if chunksize is None:
        # A few chunks per worker: amortises pickling without leaving workers idle at the end.
        chunksize = max(1, math.ceil(len(jobs) / (4 * workers)))
    ctx = multiprocessing.get_context(mp_context)
    with ctx.Pool(processes=workers) as pool:
        return pool.map(_hits_job, jobs, chunksize=chunksize)


def _check_hits(hits: Sequence[Sequence[bool]]) -> None:
    if len(hits) == 0:
        # A metric over zero questions has no value; silently returning 0 or NaN hides bugs.
        raise ValueError("no questions: cannot compute a retrieval metric over an empty set")


def per_question(hits: Sequence[Sequence[bool]]) -> list[int | None]:
    """1-based rank of each question's first answer-bearing passage, None if there is none."""
    return [next((i + 1 for i, h in enumerate(row) if h), None) for row in hits]


def top_k_accuracy(hits: Sequence[Sequence[bool]],
                   ks: Iterable[int] = DEFAULT_KS) -> dict[int, float]:
    """Fraction of questions with at least one hit in the top k, per k (docs/method.md §6, DPR top_k_hits).

    A list shorter than k counts with the passages it has.
    """
    _check_hits(hits)
    ks = [int(k) for k in ks]
    if any(k < 1 for k in ks):
        raise ValueError(f"every k must be >= 1, got {ks}")
    firsts = per_question(hits)
    n = len(hits)
    return {k: sum(1 for r in firsts if r is not None and r <= k) / n for k in ks}


def top_k_curve(hits: Sequence[Sequence[bool]]) -> list[float]:
    """DPR's full ``top_k_hits`` list as fractions: entry i is top-(i+1) accuracy.

    Its length is the longest hit list (DPR uses the first question's list length; the two
    agree when every question has the same number of retrieved passages).
    """
    _check_hits(hits)
    n_docs = max(len(row) for row in hits)
    counts = [0] * n_docs
    for rank in per_question(hits):
        if rank is not None:
            for i in range(rank - 1, n_docs):
                counts[i] += 1
    return [c / len(hits) for c in counts]


def mrr(hits: Sequence[Sequence[bool]], cutoff: int | None = None) -> float:
    """Mean of 1/rank of the first hit, 0 when none (docs/method.md §6); ``cutoff`` gives MRR@cutoff."""
    _check_hits(hits)
    if cutoff is not None and cutoff < 1:
        raise ValueError(f"cutoff must be >= 1, got {cutoff}")
    total = 0.0
    for rank in per_question(hits):
        if rank is not None and (cutoff is None or rank <= cutoff):
            total += 1.0 / rank
    return total / len(hits)


@dataclass
class RetrievalReport:
    """Retrieval metrics of one run (docs/method.md §6). ``top_k`` in percent (DPR papers' style),
    ``top_k_fraction`` in [0, 1]; per-question lists are in question order."""

    n_questions: int
    mode: str
    top_k: dict[int, float]
    top_k_fraction: dict[int, float]
    mrr: float
    first_hit_rank: list[int | None]
    hits: list[list[bool]]
    questions: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def per_question_records(self) -> list[dict[str, Any]]:
        """One record per question: question text, first-hit rank and the hit list."""
        return [{"question": q, "first_hit_rank": r, "hits": h}
                for q, r, h in zip(self.questions, self.first_hit_rank, self.hits)]


def evaluate_retrieval(questions: Sequence[str], answers_list: Sequence[Sequence[str]],
                       retrieved: Sequence[Sequence[Retrieved]], mode: str = "string",
                       ks: Iterable[int] = DEFAULT_KS, workers: int = 1) -> dict[str, Any]:
    """Top-k (percent and fraction), MRR and per-question hits of a run (docs/method.md §6).

    ``retrieved[i]`` is question i's ranked list of ``(pid, title, text, score)``; only ``text``
    enters ``has_answer``. Returns :meth:`RetrievalReport.as_dict`.
    """
    if not (len(questions) == len(answers_list) == len(retrieved)):
        raise ValueError(f"length mismatch: {len(questions)} questions, "
                         f"{len(answers_list)} answer lists, {len(retrieved)} result lists")
    texts = [[passage[2] for passage in row] for row in retrieved]
    hits = hits_matrix(answers_list, texts, mode=mode, workers=workers)
    fractions = top_k_accuracy(hits, ks)
    report = RetrievalReport(
        n_questions=len(questions),
        mode=mode,
        top_k={k: 100.0 * v for k, v in fractions.items()},
        top_k_fraction=fractions,
        mrr=mrr(hits),
        first_hit_rank=per_question(hits),
        hits=hits,
        questions=list(questions),
    )
    return report.as_dict()
