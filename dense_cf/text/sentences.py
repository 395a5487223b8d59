"""Sentence splitting as char spans, for the ``sentence`` counterfactual strategy (docs/method.md §2, §4).

Two back-ends:

* ``"pysbd"`` (default): pysbd's rule-based English segmenter, fully offline. Only the sentence
  *boundaries* are taken from pysbd: each segment is located in the original text by a forward
  search (instead of trusting pysbd's ``char_span`` offsets, which have had bugs), and every
  span runs from one located start to the next. The spans therefore cover every non-whitespace
  character of the text even if pysbd alters or drops characters. ~600 100-word passages/s.
  If pysbd raises on a text, that text is split with ``"rules"`` (logged).
* ``"rules"``: a small regex splitter (terminal punctuation + closing quotes/brackets + space +
  a sentence-opening character, with an abbreviation list and initials), ~100x faster
  (~60k 100-word passages/s), for bulk preprocessing where pysbd is the bottleneck. It splits
  less cleverly than pysbd (e.g. it never splits after "U.S." or an initial).

Spans are (start, end) char offsets, sorted, non-overlapping, non-empty, with surrounding
whitespace stripped.
"""

from __future__ import annotations

import contextlib
import functools
import re
from typing import Iterator

import pysbd
import regex
from absl import logging

__all__ = ["split_sentences", "large_re_cache", "BACKENDS"]

BACKENDS = ("pysbd", "rules")

# How far past the expected position a re-anchored segment head may be found (chars).
_REANCHOR_SLACK = 64

# Lowercase, without the trailing dot. Titles, common Latin/English abbreviations, months.
_ABBREVIATIONS = frozenset("""
mr mrs ms dr prof sr jr st mt ft gen col lt sgt capt cmdr adm gov sen rep rev hon pres
vs etc al approx ca cf ed eds fig figs no nos vol vols pp p op inc ltd co corp bros dept est
univ assn jan feb mar apr jun jul aug sep sept oct nov dec
""".split())
# Terminal punctuation, then closing quotes/brackets, then whitespace, then something that can
# open a sentence (upper-case letter, digit, opening quote or bracket).
_BOUNDARY_RE = regex.compile(
    r"""([.!?\u2026]+)["'\u201d\u2019\u00bb)\]]*\s+"""
    r"""(?=["'\u201c\u2018\u00ab(\[]*[\p{Lu}\p{Lt}\p{N}])""")
_DOTTED_ACRONYM_RE = re.compile(r"^(?:[^\W\d_]\.)+[^\W\d_]?$")


@contextlib.contextmanager
def large_re_cache(size: int = 20000) -> Iterator[None]:
    """Temporarily enlarge the ``re`` module's pattern cache (speed only, results unchanged).

    Wrap bulk splitting in it. pysbd compiles a few hundred abbreviation regexes per text plus
    one per sentence; the per-sentence ones never repeat and evict the rest from the default
    512-entry cache, so every passage recompiled ~10 patterns (3x slower splitting).
    """
    old = getattr(re, "_MAXCACHE", None)
    if not isinstance(old, int):
        yield
        return
    re._MAXCACHE = max(old, size)
    try:
        yield
    finally:
        re._MAXCACHE = old
        re.purge()  # drop the oversize cache; only costs recompilation


@functools.lru_cache(maxsize=None)
def _segmenter(language: str = "en") -> pysbd.Segmenter:
    return pysbd.Segmenter(language=language, clean=False, char_span=False)


def _pysbd_starts(text: str) -> list[int]:
    starts: list[int] = []
    cursor = 0
    for segment in _segmenter().segment(text):
        sentence = segment.strip()
        if not sentence:
            continue
        pos = text.find(sentence, cursor)
        if pos >= 0:
            cursor = pos + len(sentence)
        else:
            # pysbd changed this segment's text; anchor on its first word near the cursor. If
            # that fails too, the segment's text simply stays inside the previous sentence.
            head = sentence.split(None, 1)[0]
            pos = text.find(head, cursor, cursor + len(sentence) + _REANCHOR_SLACK)
            if pos < 0:
                continue
            cursor = pos + len(head)
        starts.append(pos)
    return starts


def _rule_starts(text: str) -> list[int]:
    starts = [0]
    for match in _BOUNDARY_RE.finditer(text):
        if match.group(1) == ".":
            end = match.start(1)
            begin = end
            while begin > 0 and not text[begin - 1].isspace():
                begin -= 1
            word = text[begin:end].lstrip("\"'(\u201c\u2018[")
            if (len(word) == 1 and word.isalpha()) or word.lower() in _ABBREVIATIONS \
                    or _DOTTED_ACRONYM_RE.match(word):
                continue  # "J. Smith", "Dr. No", "U.S. Army": not a sentence end
        starts.append(match.end())
    return starts


def split_sentences(text: str, backend: str = "pysbd") -> list[tuple[int, int]]:
    """Sentence spans of ``text`` as (start, end) char offsets; ``[]`` for blank text.

    Every non-whitespace character lies in exactly one span; spans carry no surrounding
    whitespace. ``backend`` is "pysbd" (default) or "rules" (fast fallback; see module doc).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if not text or text.isspace():
        return []
    return list(_spans(text, backend))


# Runs in one process split the same passages again (each run of a study preprocesses its
# training file and exports its corpus; evaluators re-read the same texts); pysbd costs ~2 ms a
# passage. Bounded: a corpus pass over millions of passages just cycles through it.
@functools.lru_cache(maxsize=1 << 16)
def _spans(text: str, backend: str) -> tuple[tuple[int, int], ...]:
    if backend == "pysbd":
        try:
            starts = _pysbd_starts(text)
        except Exception as e:  # a crash on one odd passage must not stop preprocessing
            logging.log_first_n(logging.WARNING, "pysbd failed (%r); using the rules splitter",
                                10, e)
            starts = _rule_starts(text)
    else:
        starts = _rule_starts(text)
    # The first span always starts at 0 so that nothing before the first boundary is lost.
    bounds = sorted({0, *starts, len(text)})
    spans: list[tuple[int, int]] = []
    for start, end in zip(bounds, bounds[1:]):
        chunk = text[start:end]
        stripped = chunk.strip()
        if stripped:
            lead = len(chunk) - len(chunk.lstrip())
            spans.append((start + lead, start + lead + len(stripped)))
    return tuple(spans)
