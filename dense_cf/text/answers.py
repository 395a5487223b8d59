"""Answer matching exactly as DPR's evaluation does it (docs/method.md §6), plus question types (docs/method.md §5).

DPR (``dpr/data/qa_validation.py``, ``dpr/utils/tokenizers.py``) decides whether a passage is
"answer-bearing" as follows, and so do we:

* string mode: NFD-normalise the passage text (the title is not part of it) and every answer,
  tokenise both with ``SimpleTokenizer``'s regex ``([\\p{L}\\p{N}\\p{M}]+)|([^\\p{Z}\\p{C}])``
  (``regex`` package, IGNORECASE|UNICODE|MULTILINE), lowercase the tokens (``str.lower`` per
  token) and look for the answer's tokens as a contiguous sub-sequence of the text's tokens;
* regex mode (CuratedTREC): NFD-normalise text and answer, compile the answer with
  IGNORECASE|UNICODE|MULTILINE and ``search`` it in the text; an answer that does not compile
  matches nothing.

DPR quirk kept on purpose: an answer with no tokens at all (``""``, ``"  "``) matches every text
in string mode, because the empty list is a sub-sequence of any list. :func:`find_answer_spans`
has nothing to locate for such an answer (and skips zero-width regex matches), so it returns no
span for it; that is the only case where ``bool(find_answer_spans(t, a)) != has_answer(a, t)``.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Sequence

import regex

__all__ = ["dpr_tokenize", "has_answer", "find_answer_spans", "question_type"]

_FLAGS = regex.IGNORECASE | regex.UNICODE | regex.MULTILINE
# DPR's SimpleTokenizer pattern (docs/method.md §6). The capturing groups do not change what matches;
# the non-capturing twin lets ``findall`` return plain strings on the hot path.
_TOKEN_RE = regex.compile(r"([\p{L}\p{N}\p{M}]+)|([^\p{Z}\p{C}])", flags=_FLAGS)
_TOKEN_RE_FAST = regex.compile(r"[\p{L}\p{N}\p{M}]+|[^\p{Z}\p{C}]", flags=_FLAGS)
# Tokens never contain a control character (\p{C} is excluded by both alternatives), so NUL is
# a safe separator: "\0a\0b\0" occurs in "\0x\0a\0b\0y\0" exactly when [a, b] is a contiguous
# sub-sequence of [x, a, b, y]. This turns the sub-sequence test into one C-level substring search.
_SEP = "\0"
_QUESTION_WORD_RE = re.compile(r"\b(how|what|when|where|which|who)\b", re.IGNORECASE)
MODES = ("string", "regex")  # has_answer matching: DPR string rules, or a regex (CuratedTREC)


def dpr_tokenize(text: str) -> list[tuple[str, int, int]]:
    """DPR ``SimpleTokenizer`` tokens of ``text`` as (token, start, end), offsets into ``text``.

    No normalisation or lowercasing is applied here (docs/method.md §6 applies NFD before tokenising).
    """
    return [(m.group(), m.start(), m.end()) for m in _TOKEN_RE.finditer(text)]


def _nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


def _joined_lower_tokens(nfd_text: str) -> str:
    # Lowercasing the NUL-joined string equals lowercasing each token: the only context-sensitive
    # rule of str.lower (Greek final sigma) treats NUL like a string boundary (neither cased nor
    # case-ignorable).
    return (_SEP + _SEP.join(_TOKEN_RE_FAST.findall(nfd_text)) + _SEP).lower()


def _sigma_blind_lower(s: str) -> str:
    # str.lower is a per-character mapping except for Greek final sigma, which depends on
    # context; folding "ς" into "σ" makes lower(token) a substring of lower(whole text).
    return s.lower().replace("\u03c2", "\u03c3")


@functools.lru_cache(maxsize=65536)
def _answer_key(answer: str) -> tuple[str, str] | None:
    """(NUL-framed lowercase NFD tokens, probe) of an answer; None when it has no tokens.

    The probe (longest token, sigma-blind lowercase) is a cheap necessary condition: if it is
    not a substring of the sigma-blind lowercase passage, no tokenisation is needed.
    """
    tokens = _TOKEN_RE_FAST.findall(_nfd(answer))
    if not tokens:
        return None
    return (_SEP + _SEP.join(tokens) + _SEP).lower(), _sigma_blind_lower(max(tokens, key=len))


@functools.lru_cache(maxsize=65536)
def _compile_answer_regex(answer: str) -> "regex.Pattern[str] | None":
    """DPR ``regex_match``'s compile step; None for a pattern that does not compile."""
    try:
        return regex.compile(_nfd(answer), flags=_FLAGS)
    except Exception:  # DPR catches everything here and reports "no match"
        return None


def _check_args(answers: Sequence[str], mode: str) -> None:
    if isinstance(answers, str):
        # Iterating a str would silently test single characters as answers.
        raise TypeError("answers must be a sequence of strings, not a single str")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def has_answer(answers: Sequence[str], text: str, mode: str = "string") -> bool:
    """True iff any answer occurs in ``text`` by DPR's rules (docs/method.md §6).

    ``mode`` is "string" (token sub-sequence, default) or "regex" (CuratedTREC). ``text`` is
    the passage text without its title.
    """
    _check_args(answers, mode)
    nfd_text = _nfd(text)
    if mode == "string":
        # Tokenise the passage lazily: most passages fail every answer's substring probe.
        lowered = joined = None
        for answer in answers:
            entry = _answer_key(answer)
            if entry is None:
                return True  # DPR: the empty token list is a sub-sequence of anything
            key, probe = entry
            if lowered is None:
                lowered = _sigma_blind_lower(nfd_text)
            if probe not in lowered:
                continue
            if joined is None:
                joined = _joined_lower_tokens(nfd_text)
            if key in joined:
                return True
        return False
    for answer in answers:
        pattern = _compile_answer_regex(answer)
        if pattern is not None and pattern.search(nfd_text) is not None:
            return True
    return False


def _nfd_with_index(text: str) -> tuple[str, list[int] | None]:
    """NFD of ``text`` and, per NFD code point, the index of the original char it came from.

    Returns ``None`` as the map when NFD leaves the text unchanged (identity map). Built as NFD
    itself is defined: full decomposition of every char, then canonical ordering (stable sort
    by combining class within each run of non-starters), carrying the source index along.
    """
    if text.isascii() or unicodedata.is_normalized("NFD", text):
        return text, None
    chars: list[str] = []
    index: list[int] = []
    for i, ch in enumerate(text):
        decomposed = unicodedata.normalize("NFD", ch) if not ch.isascii() else ch
        chars.extend(decomposed)
        index.extend([i] * len(decomposed))
    n = len(chars)
    ccc = [unicodedata.combining(c) for c in chars]
    j = 0
    while j < n:
        if ccc[j] == 0:
            j += 1
            continue
        k = j
        while k < n and ccc[k] != 0:
            k += 1
        if k - j > 1:
            order = sorted(range(j, k), key=ccc.__getitem__)  # sorted() is stable
            chars[j:k] = [chars[o] for o in order]
            index[j:k] = [index[o] for o in order]
        j = k
    nfd_text = "".join(chars)
    if nfd_text != _nfd(text):  # would mean a Unicode-data inconsistency; never expected
        raise RuntimeError("char-wise NFD disagrees with unicodedata.normalize('NFD')")
    return nfd_text, index


def _to_original(start: int, end: int, index: list[int] | None) -> tuple[int, int]:
    if index is None:
        return start, end
    # Canonical reordering may permute source indices inside a run of combining marks, so take
    # min/max rather than the endpoints; the result always covers whole original characters.
    sources = index[start:end]
    return min(sources), max(sources) + 1


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def find_answer_spans(text: str, answers: Sequence[str],
                      mode: str = "string") -> list[tuple[int, int]]:
    """Char spans (start, end) in the ORIGINAL ``text`` of every match of every answer.

    Same normalisation and matching as :func:`has_answer` (docs/method.md §6). Matches are mapped back
    through NFD (which can change the length, e.g. "é" -> "e" + U+0301), expanded to whole
    original characters, sorted, and merged where they overlap or touch. Answers without
    tokens and zero-width regex matches yield no span (see the module docstring).
    """
    _check_args(answers, mode)
    nfd_text, index = _nfd_with_index(text)
    spans: list[tuple[int, int]] = []
    if mode == "string":
        keys = [e[0] for e in map(_answer_key, answers) if e is not None]
        if not keys:
            return []
        matches = list(_TOKEN_RE_FAST.finditer(nfd_text))
        joined = _SEP.join(m.group() for m in matches).lower()
        tokens = joined.split(_SEP) if matches else []
        first_positions: dict[str, list[int]] = {}
        for i, tok in enumerate(tokens):
            first_positions.setdefault(tok, []).append(i)
        for key in keys:
            answer_tokens = key[1:-1].split(_SEP)
            m = len(answer_tokens)
            for i in first_positions.get(answer_tokens[0], ()):
                if tokens[i:i + m] == answer_tokens:
                    spans.append(_to_original(matches[i].start(), matches[i + m - 1].end(), index))
    else:
        for answer in answers:
            pattern = _compile_answer_regex(answer)
            if pattern is None:
                continue
            for match in pattern.finditer(nfd_text):
                if match.end() > match.start():
                    spans.append(_to_original(match.start(), match.end(), index))
    return _merge(spans)


def question_type(question: str) -> str:
    """First of how/what/when/where/which/who (by position, whole word, any case), else "other".

    The PiCL Table 6 break-down used for AAR by question type (docs/method.md §5).
    """
    match = _QUESTION_WORD_RE.search(question)
    return match.group(1).lower() if match else "other"
