"""Counterfactual passages as TEXT (docs/method.md §2, §5): p* built on characters.

The token-level masks that training and AAR use live in ``dense_cf.inputs.cf_masks``; these
build p* as a string, for passages that are added to a corpus (EADPR Fig. 5 near-duplicate
distractors).
"""

from __future__ import annotations

import itertools
import random
from typing import Iterator, Sequence

from dense_cf.text.answers import dpr_tokenize, find_answer_spans, has_answer
from dense_cf.text.sentences import split_sentences

TEXT_STRATEGIES = ("sentence", "window", "answer")
# A piece starting with one of these is glued to the previous piece without a space.
_CLOSING = frozenset(",.;:!?)]}\u201d\u2019\u00bb\u2026%")
# Up to this many kept sentences, every (drop, order) variant is enumerated, then shuffled.
_ENUMERATE_MAX_SENTENCES = 6


def _tidy(text: str) -> str:
    return " ".join(text.split())


def _join_pieces(pieces: Sequence[str]) -> str:
    """Tidied pieces joined with one space, none before closing punctuation."""
    out = ""
    for piece in pieces:
        piece = _tidy(piece)
        if not piece:
            continue
        if out and piece[0] not in _CLOSING:
            out += " "
        out += piece
    return out


def _remove_spans(text: str, spans: Sequence[tuple[int, int]]) -> str:
    pieces, pos = [], 0
    for start, end in sorted(spans):
        if start > pos:
            pieces.append(text[pos:start])
        pos = max(pos, end)
    pieces.append(text[pos:])
    return _join_pieces(pieces)


def _overlaps(span: tuple[int, int], spans: Sequence[tuple[int, int]]) -> bool:
    return any(span[0] < e and s < span[1] for s, e in spans)


def _kept_sentences(text: str, answer_spans: Sequence[tuple[int, int]]) -> list[str]:
    """Tidied sentences of ``text`` that overlap no answer span, in order."""
    return [_tidy(text[s:e]) for s, e in split_sentences(text) if not _overlaps((s, e), answer_spans)]


def _non_empty(text: str) -> str | None:
    return text if any(ch.isalnum() for ch in text) else None


def counterfactual_text(text: str, answers: Sequence[str], strategy: str = "sentence", *,
                        window_words: int = 5, mode: str = "string") -> str | None:
    """p* of ``text`` as a string: the evidence removed at character level (docs/method.md §2).

    ``sentence`` drops every sentence (``split_sentences``) overlapping an answer match and
    joins the rest with single spaces; ``answer`` drops the answer matches only; ``window``
    drops each match plus ``window_words`` DPR tokens (``dpr_tokenize``: words and single
    punctuation marks) on each side. Matches come from ``find_answer_spans`` (DPR
    normalisation, docs/method.md §6). Whitespace is collapsed and no space is left before closing
    punctuation. Returns None when no answer matches or no letter/digit is left. The result
    is NOT guaranteed answer-free (removal can join tokens into a new match); callers that need
    that check ``has_answer`` (as :func:`distractor_variants` does).
    """
    if strategy not in TEXT_STRATEGIES:
        raise ValueError(f"unknown text strategy {strategy!r}; expected one of {TEXT_STRATEGIES} "
                         "(evidence needs a QA model and is precomputed per example)")
    if window_words < 0:
        raise ValueError(f"window_words must be >= 0, got {window_words}")
    spans = find_answer_spans(text, answers, mode=mode)
    if not spans:
        return None
    if strategy == "sentence":
        return _non_empty(" ".join(_kept_sentences(text, spans)))
    if strategy == "answer":
        return _non_empty(_remove_spans(text, spans))
    tokens = dpr_tokenize(text)
    drop = []
    for start, end in spans:
        inside = [i for i, (_, ts, te) in enumerate(tokens) if ts < end and te > start]
        if not inside:  # cannot happen for string matches; a regex match may cut no token
            drop.append((start, end))
            continue
        lo = max(0, inside[0] - window_words)
        hi = min(len(tokens) - 1, inside[-1] + window_words)
        drop.append((min(start, tokens[lo][1]), max(end, tokens[hi][2])))
    return _non_empty(_remove_spans(text, drop))


def _sentence_variants(sentences: Sequence[str], rng: random.Random) -> Iterator[str]:
    """p* sentences reordered and/or with one sentence dropped, in a seeded order."""
    m = len(sentences)
    drops: list[int | None] = [None] + (list(range(m)) if m >= 2 else [])
    if m <= _ENUMERATE_MAX_SENTENCES:
        shapes = [(d, order) for d in drops
                  for order in itertools.permutations(range(m - (d is not None)))]
        rng.shuffle(shapes)
    else:  # too many to enumerate: sample (duplicates are removed by the caller)
        shapes = []
        for _ in range(2000):
            d = rng.choice(drops)
            n = m - (d is not None)
            shapes.append((d, tuple(rng.sample(range(n), n))))
    for d, order in shapes:
        rest = [s for i, s in enumerate(sentences) if i != d]
        yield " ".join(rest[i] for i in order)


def distractor_variants(text: str, answers: Sequence[str], k: int, seed: int, *,
                        mode: str = "string", window_words: int = 5,
                        stats: dict[str, int] | None = None) -> list[str]:
    """Up to ``k`` distinct answer-free near-duplicates of ``text`` (docs/method.md §5, EADPR Fig. 5).

    EADPR asked ChatGPT for up to 20 passages that "mimic the context of the evidence passage
    but leave out the key evidence". No LLM runs offline and generations are not reproducible,
    so we derive them deterministically from the passage instead, in this order:

    0. the ``sentence`` p* (:func:`counterfactual_text`), when it exists;
    1. the ``answer`` p* (answer matches removed, evidence sentence otherwise kept);
    2. the ``window`` p* (``window_words`` DPR tokens on each side removed);
    3. then the p* sentences reordered and/or with one more (non-evidence) sentence dropped,
       in an order fixed by ``seed`` (all variants are enumerated for up to 6 sentences).

    Every candidate is checked with ``has_answer`` (DPR rules, ``mode``); those that still
    contain an answer are dropped and counted in ``stats["dropped_with_answer"]``, repeated
    strategy texts (e.g. window text = answer text) in ``stats["duplicates"]``, a passage
    without any answer match in ``stats["no_answer_match"]``.
    Fewer than ``k`` come back when the passage has too few sentences; callers report that.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    stats = stats if stats is not None else {}
    for key in ("dropped_with_answer", "duplicates", "no_answer_match"):
        stats.setdefault(key, 0)
    spans = find_answer_spans(text, answers, mode=mode)
    if not spans:
        stats["no_answer_match"] += 1
        return []
    out: list[str] = []
    seen = {_tidy(text)}

    def add(candidate: str | None) -> None:
        if candidate is None or len(out) >= k:
            return
        if candidate in seen:
            stats["duplicates"] += 1
            return
        seen.add(candidate)
        if has_answer(answers, candidate, mode):
            stats["dropped_with_answer"] += 1
            return
        out.append(candidate)

    kept = _kept_sentences(text, spans)
    add(_non_empty(" ".join(kept)))
    add(counterfactual_text(text, answers, "answer", mode=mode))
    add(counterfactual_text(text, answers, "window", window_words=window_words, mode=mode))
    if len(out) < k and kept:
        for candidate in _sentence_variants(kept, random.Random(seed)):
            if len(out) >= k:
                break
            if candidate in seen:  # identity order, or an already found text: not a "duplicate"
                continue
            add(candidate)
    return out
