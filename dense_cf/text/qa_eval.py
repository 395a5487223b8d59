"""Answer-level QA scores: exact match (EM) and token F1 (docs/readers.md, "EM and F1").

The string rules of SQuAD's evaluation script, as DPR's reader (``dpr/data/qa_validation.py``
``exact_match_score``) and FiD use them:

* :func:`normalize_answer`: lowercase, drop ASCII punctuation (``string.punctuation``), drop
  the articles a / an / the (whole words), collapse whitespace. Before that the text is
  NFD-normalised, as DPR does with passages and answers for ``has_answer``
  (``dense_cf.text.answers``): a precomposed "é" and "e" + U+0301 then score the same. DPR's EM
  itself compares without NFD, so the two differ only on such pairs.
* :func:`exact_match` / :func:`f1_score`: the maximum over the gold answers; an empty gold list
  scores 0.
* regex mode (CuratedTREC's answers are regular expressions): DrQA's ``regex_match_score``, the
  pattern compiled with IGNORECASE | UNICODE | MULTILINE and ``match``-ed at the start of the
  (NFD) prediction; a pattern that does not compile matches nothing. F1 has no meaning against
  a pattern, so regex-mode F1 equals EM.
* F1 of two token lists where either is empty is 1 if both are empty, else 0 (SQuAD v2's rule;
  v1.1 would give 0 where EM gives 1).

Pure functions of strings.
"""

from __future__ import annotations

import collections
import functools
import re
import string
import unicodedata
from typing import Sequence

__all__ = ["exact_match", "f1_score", "normalize_answer", "qa_scores", "regex_match", "token_f1"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
_REGEX_FLAGS = re.IGNORECASE | re.UNICODE | re.MULTILINE
MODES = ("string", "regex")


def normalize_answer(text: str) -> str:
    """NFD, lowercase, no punctuation, no articles, single spaces (SQuAD's normalisation)."""
    text = unicodedata.normalize("NFD", text).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


@functools.lru_cache(maxsize=65536)
def _compile(pattern: str) -> "re.Pattern[str] | None":
    try:
        return re.compile(unicodedata.normalize("NFD", pattern), flags=_REGEX_FLAGS)
    except (re.error, RecursionError, OverflowError):
        return None


def regex_match(prediction: str, pattern: str) -> bool:
    """DrQA's ``regex_match_score``: ``pattern`` matches at the start of the prediction."""
    compiled = _compile(pattern)
    return compiled is not None and compiled.match(unicodedata.normalize("NFD", prediction)) is not None


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD's token F1 of one prediction against one gold answer (normalised tokens)."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    same = sum((collections.Counter(pred) & collections.Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def _check(golds: Sequence[str], mode: str) -> None:
    if isinstance(golds, str):
        raise TypeError("gold answers must be a sequence of strings, not a single str")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def exact_match(prediction: str, golds: Sequence[str], mode: str = "string") -> bool:
    """Whether the prediction equals any gold answer after :func:`normalize_answer` (string
    mode) or matches any gold pattern (regex mode)."""
    _check(golds, mode)
    if mode == "regex":
        return any(regex_match(prediction, g) for g in golds)
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(g) for g in golds)


def f1_score(prediction: str, golds: Sequence[str], mode: str = "string") -> float:
    """The best :func:`token_f1` over the gold answers (regex mode: EM as 0/1)."""
    _check(golds, mode)
    if mode == "regex":
        return float(exact_match(prediction, golds, mode))
    return max((token_f1(prediction, g) for g in golds), default=0.0)


def qa_scores(predictions: Sequence[str], golds: Sequence[Sequence[str]],
              mode: str = "string") -> tuple[list[bool], list[float]]:
    """Per-question EM and F1 of aligned predictions and gold lists."""
    if len(predictions) != len(golds):
        raise ValueError(f"{len(predictions)} predictions for {len(golds)} gold answer lists")
    em = [exact_match(p, g, mode) for p, g in zip(predictions, golds)]
    f1 = [f1_score(p, g, mode) for p, g in zip(predictions, golds)]
    return em, f1
