"""Held-out distractors: near-duplicates of a gold passage unlike any training p* (issue 32).

The training counterfactuals (and the p*-style robustness distractors of
:func:`dense_cf.text.counterfactuals.distractor_variants`) are sentence-, answer- and
window-removed copies of the positive, optionally with the kept sentences reordered. The
held-out family is built differently, from the synthetic world's vocabulary and templates:

* ``value_swap``: the positive with every answer match replaced by another value of the same
  type (a year by another year, a person by another person, a pool value by another value of
  that pool, ...; :func:`value_kind`). The passage keeps every other word.
* ``paraphrase``: the answer sentence dropped, every other sentence that a statement, intro
  template of the world matches rewritten with that template's alternative wording (the
  world writes each fact with one of two or more statements), then the sentences reordered.
  At least one sentence must be rewritten, else it would be a p*-style reorder.
* ``namesake``: a passage about another entity with the same name. The world has namesakes
  (``vocab.NAME_SHARE``: "Marta Lindqvist (chemist)" / "Marta Lindqvist (painter)"): the
  disambiguator of a real namesake in the corpus is used when there is one, else one is
  built from the vocabulary of that disambiguator (another occupation, region, town or year).
  The text is the positive's with the disambiguator replaced and the answer value swapped
  (the namesake has its own value of the fact); the title names the namesake.

Every candidate is checked with DPR's ``has_answer`` against all the answers it must lack;
one that still matches is dropped and counted. All functions are pure given the ``rng``.
"""

from __future__ import annotations

import random
import re
from typing import Iterator, Mapping, Sequence

from dense_cf.synthetic.templates import FACTS_BY_TYPE, INTROS
from dense_cf.synthetic.vocab import (
    ACCESS,
    FINANCE,
    FIRST_NAMES,
    INDUSTRIES,
    INSPIRATIONS,
    KNOWN_FOR,
    LANDMARKS,
    LAST_ROOTS,
    LAST_SUFFIXES,
    MONTHS,
    OCCUPATIONS,
    ORG_KINDS,
    PLACE_ROOTS,
    PLACE_SUFFIXES,
    PRAISE,
    REGIONS,
    SELECTION,
    SUBJECTS,
    THEMES,
    TRAVEL,
)
from dense_cf.synthetic.world import _VALUE_MAKERS, _a, _cap
from dense_cf.text.answers import find_answer_spans, has_answer
from dense_cf.text.sentences import split_sentences

__all__ = ["HELDOUT_KINDS", "heldout_variants", "namesake", "namesake_index", "paraphrase",
           "paraphrase_sentence", "same_type_value", "value_kind", "value_swap"]

HELDOUT_KINDS: tuple[str, ...] = ("value_swap", "paraphrase", "namesake")
_TRIES = 20  # draws per candidate before a kind gives up (values pools are far larger)

# ---------------------------------------------------------------------------------------------
# Value types.
# ---------------------------------------------------------------------------------------------
_POOLS: dict[str, tuple[str, ...]] = {
    "subject": SUBJECTS, "travel": TRAVEL, "finance": FINANCE, "selection": SELECTION,
    "access": ACCESS, "known_for": KNOWN_FOR, "industry": INDUSTRIES, "theme": THEMES,
    "inspiration": INSPIRATIONS, "praise": PRAISE}
_UNITS = ("years", "weeks", "months", "days", "kilometres", "pages", "minutes", "crowns")
_DATE_RE = re.compile(r"(\d{1,2}) (" + "|".join(MONTHS) + r") (\d{3,4})")
_AMOUNT_RE = re.compile(r"(\d{1,3}(?:,\d{3})*|\d+) (" + "|".join(_UNITS) + ")")
_COUNT_RE = re.compile(r"\d{1,3}(?:,\d{3})+|\d+")
_FIRST = frozenset(FIRST_NAMES)
_LAST = frozenset(r + s for r in LAST_ROOTS for s in LAST_SUFFIXES)
_PLACES = frozenset(r + s for r in PLACE_ROOTS for s in PLACE_SUFFIXES)
# (value type, its last words); the order matters where suffixes overlap ("Cloth Hall" is a
# landmark, "Lindqvist Hall" a venue): landmarks and pools are tested before these.
_SUFFIX_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("award", ("Medal", "Prize", "Award", "Cup", "Fellowship")),
    ("publisher", ("Publishing House", "Press", "Film Studio", "Records", "Pictures")),
    ("ensemble", ("Symphony Orchestra", "Brass Band", "Choir", "String Quartet")),
    ("street", ("Street", "Lane", "Road", "Square")),
    ("venue", ("Hall", "Stadium", "Pavilion", "Park", "Arena")),
    ("org", tuple(k[0] for k in ORG_KINDS)),
)


def value_kind(value: str) -> str | None:
    """The synthetic world's type of ``value`` ("year", "date", "amount", "count", a pool name,
    or a name kind of ``world._VALUE_MAKERS``); None for a value the world does not make."""
    v = value.strip()
    if re.fullmatch(r"\d{4}", v):
        return "year"
    if _DATE_RE.fullmatch(v):
        return "date"
    if _AMOUNT_RE.fullmatch(v):
        return "amount"
    if _COUNT_RE.fullmatch(v):
        return "count"
    for name, pool in _POOLS.items():
        if v in pool:
            return name
    if v.startswith("River "):
        return "river"
    if v.startswith("Church of Saint ") or v in LANDMARKS:
        return "landmark"
    if v.startswith("Order of the "):
        return "award"
    for kind, ends in _SUFFIX_KINDS:
        if any(v.endswith(" " + e) for e in ends):
            return kind
    parts = v.split(" ")
    if len(parts) == 2 and parts[0] in _FIRST and parts[1] in _LAST:
        return "person"
    if v in _PLACES:
        return "place"
    return None


def _number_like(n: int, rng: random.Random) -> int:
    """Another number of about the same size (never ``n``)."""
    lo, hi = max(1, n // 2), max(n * 2, n + 5)
    while True:
        m = rng.randint(lo, hi)
        if m != n:
            return m


def same_type_value(value: str, rng: random.Random) -> str | None:
    """A value of ``value``'s type (:func:`value_kind`) that is not ``value``; None if the type
    is unknown. Numbers keep their size and format, dates their year."""
    kind = value_kind(value)
    if kind is None:
        return None
    v = value.strip()
    for _ in range(_TRIES):
        if kind == "year":
            out = str(int(v) + rng.choice((-1, 1)) * rng.randint(1, 30))
        elif kind == "date":
            year = _DATE_RE.fullmatch(v).group(3)
            out = f"{rng.randint(1, 28)} {rng.choice(MONTHS)} {year}"
        elif kind in ("amount", "count"):
            m = _AMOUNT_RE.fullmatch(v) if kind == "amount" else None
            num = m.group(1) if m else v
            new = _number_like(int(num.replace(",", "")), rng)
            # The world writes counts and crowns with thousands separators, other units plain.
            commas = "," in num or (new >= 1000 and (m is None or m.group(2) == "crowns"))
            digits = f"{new:,}" if commas else str(new)
            out = f"{digits} {m.group(2)}" if m else digits
        elif kind in _POOLS:
            out = rng.choice(_POOLS[kind])
        else:  # name kinds: the world's own makers (they read no entity field)
            out = _VALUE_MAKERS[kind](rng, None)  # type: ignore[arg-type]
        if out.lower() != v.lower():
            return out
    return None


# ---------------------------------------------------------------------------------------------
# Value swap.
# ---------------------------------------------------------------------------------------------
def _replace_spans(text: str, repl: Sequence[tuple[int, int, str]]) -> str:
    out, pos = [], 0
    for s, e, new in sorted(repl):
        out.append(text[pos:s])
        out.append(new)
        pos = e
    out.append(text[pos:])
    return "".join(out)


def value_swap(text: str, answers: Sequence[str], rng: random.Random, *,
               mode: str = "string") -> str | None:
    """``text`` with every match of each answer replaced by one same-type value per answer
    (:func:`same_type_value`); None when no answer matches, an answer's type is unknown, or
    the result still contains an answer."""
    repl: list[tuple[int, int, str]] = []
    taken: list[tuple[int, int]] = []
    for a in answers:
        spans = [sp for sp in find_answer_spans(text, [a], mode=mode)
                 if not any(sp[0] < e and s < sp[1] for s, e in taken)]
        if not spans:
            continue
        new = same_type_value(a, rng)
        if new is None:
            return None
        repl.extend((s, e, new) for s, e in spans)
        taken.extend(spans)
    if not repl:
        return None
    out = _replace_spans(text, repl)
    return None if has_answer(answers, out, mode) else out


# ---------------------------------------------------------------------------------------------
# Paraphrase with the world's alternative templates.
# ---------------------------------------------------------------------------------------------
_FIELD_RE = re.compile(r"\{(\w+)\}")


def _template_regex(tmpl: str) -> re.Pattern[str]:
    """A regex matching ``_cap(tmpl.format(**fields))``; a field seen twice must repeat."""
    out, pos, seen = [], 0, set()
    for m in _FIELD_RE.finditer(tmpl):
        lit = tmpl[pos:m.start()]
        if pos == 0 and lit:  # _cap upper-cases the first letter of the sentence
            out.append(f"[{re.escape(lit[0].upper())}{re.escape(lit[0].lower())}]"
                       + re.escape(lit[1:]))
        else:
            out.append(re.escape(lit))
        name = m.group(1)
        out.append(f"(?P={name})" if name in seen else f"(?P<{name}>.+?)")
        seen.add(name)
        pos = m.end()
    out.append(re.escape(tmpl[pos:]))
    return re.compile("".join(out))


def _template_groups() -> list[tuple[str, ...]]:
    """Sets of templates that say the same thing: each fact's statements, each intro list."""
    groups = [f.statements for facts in FACTS_BY_TYPE for f in facts]
    groups += [tuple(g) for pair in INTROS for g in pair]
    return [g for g in groups if len(g) > 1]


_GROUPS = [[(t, _template_regex(t), frozenset(_FIELD_RE.findall(t))) for t in g]
           for g in _template_groups()]


def paraphrase_sentence(sentence: str) -> list[str]:
    """Other wordings of ``sentence`` by the world's templates: when a template renders it,
    every other template of that fact (or intro list) that needs no field it lacks, filled
    with its values. [] for a sentence no template renders (fillers have one wording)."""
    for group in _GROUPS:
        for tmpl, rx, _ in group:
            m = rx.fullmatch(sentence)
            if m is None:
                continue
            fields = m.groupdict()
            out = [_cap(t.format(**fields)) for t, _, need in group
                   if t != tmpl and need <= fields.keys()]
            return [s for s in dict.fromkeys(out) if s != sentence]
    return []


def _kept_sentences(text: str, answers: Sequence[str], mode: str) -> list[str] | None:
    spans = find_answer_spans(text, answers, mode=mode)
    if not spans:
        return None
    return [" ".join(text[s:e].split()) for s, e in split_sentences(text)
            if not any(s < b and a < e for a, b in spans)]


def paraphrase(text: str, answers: Sequence[str], rng: random.Random, *,
               mode: str = "string") -> str | None:
    """The answer sentences dropped, the other sentences paraphrased where a template allows
    (:func:`paraphrase_sentence`) and reordered (not the original order when there are two
    or more); None when no answer matches, no sentence can be reworded, or an answer remains."""
    kept = _kept_sentences(text, answers, mode)
    if not kept:
        return None
    alts = [paraphrase_sentence(s) for s in kept]
    if not any(alts):
        return None
    sents = [rng.choice(a) if a else s for s, a in zip(kept, alts)]
    order = list(range(len(sents)))
    if len(order) > 1:
        while order == sorted(order):
            rng.shuffle(order)
    out = " ".join(sents[i] for i in order)
    return None if has_answer(answers, out, mode) else out


# ---------------------------------------------------------------------------------------------
# Namesakes.
# ---------------------------------------------------------------------------------------------
_WORK_TITLE = re.compile(r"(?P<name>.+) \((?P<dis>\d{4}) (?P<kind>[a-z]+)\)")
_EVENT_TITLE = re.compile(r"(?P<dis>\d{4}) (?P<name>.+)")
_PAREN_TITLE = re.compile(r"(?P<name>.+) \((?P<dis>[^()]+)\)")


def _parse_title(title: str) -> tuple[str, str, str] | None:
    """(name key, disambiguator, template with ``{}`` for the disambiguator), or None.

    "The Silent Harbour (1964 film)" -> ("The Silent Harbour|film", "1964", ...);
    "1987 Eskholm Marathon" -> ("Eskholm Marathon", "1987", ...); "Marta Lindqvist (chemist)"
    -> ("Marta Lindqvist", "chemist", ...).
    """
    m = _WORK_TITLE.fullmatch(title)
    if m:
        return (f"{m['name']}|{m['kind']}", m["dis"], f"{m['name']} ({{}} {m['kind']})")
    m = _EVENT_TITLE.fullmatch(title)
    if m:
        return m["name"], m["dis"], f"{{}} {m['name']}"
    m = _PAREN_TITLE.fullmatch(title)
    if m:
        return m["name"], m["dis"], f"{m['name']} ({{}})"
    return None


def namesake_index(titles: Sequence[str]) -> dict[str, list[str]]:
    """Name key -> the disambiguators of every title with that name (sorted, distinct): the
    world's namesakes, for :func:`namesake`."""
    out: dict[str, set[str]] = {}
    for t in titles:
        p = _parse_title(t)
        if p:
            out.setdefault(p[0], set()).add(p[1])
    return {k: sorted(v) for k, v in out.items()}


def _built_disambiguator(dis: str, rng: random.Random) -> str | None:
    """Another disambiguator from ``dis``'s vocabulary (occupation, region, town, year)."""
    if re.fullmatch(r"\d{4}", dis):
        return str(int(dis) + rng.choice((-1, 1)) * rng.randint(1, 40))
    for pool in (OCCUPATIONS, REGIONS):
        if dis in pool:
            return rng.choice([x for x in pool if x != dis])
    if dis in _PLACES:
        return rng.choice(PLACE_ROOTS) + rng.choice(PLACE_SUFFIXES)
    return None


def _replace_disambiguator(text: str, old: str, new: str) -> str:
    # "a chemist" -> "an engineer": the article follows the new word.
    text = re.sub(rf"\b(?:a|an) {re.escape(old)}\b", _a(new), text)
    return re.sub(rf"\b{re.escape(old)}(?=s?\b)", new, text)


def namesake(title: str, text: str, answers: Sequence[str], rng: random.Random,
             namesakes: Mapping[str, Sequence[str]] | None = None, *,
             mode: str = "string") -> tuple[str, str, str] | None:
    """(title, text, source) of a passage about a same-named, different entity: ``source`` is
    "world" when the disambiguator is a real namesake's in ``namesakes``
    (:func:`namesake_index`), "built" when drawn from the vocabulary. The text is the
    positive's with the disambiguator replaced and the answers swapped (:func:`value_swap`).
    None when the title has no disambiguator, none can be drawn, or an answer remains."""
    parsed = _parse_title(title)
    if parsed is None:
        return None
    key, dis, form = parsed
    real = [d for d in (namesakes or {}).get(key, ()) if d != dis]
    new, source = (rng.choice(real), "world") if real else (_built_disambiguator(dis, rng),
                                                            "built")
    if new is None or new == dis:
        return None
    swapped = value_swap(text, answers, rng, mode=mode)
    if swapped is None:
        return None
    out = _replace_disambiguator(swapped, dis, new)
    return None if has_answer(answers, out, mode) else (form.format(new), out, source)


# ---------------------------------------------------------------------------------------------
# The family.
# ---------------------------------------------------------------------------------------------
def _candidates(kind: str, title: str, text: str, answers: Sequence[str], rng: random.Random,
                namesakes: Mapping[str, Sequence[str]] | None, mode: str
                ) -> Iterator[tuple[str, str, str] | None]:
    """Endless (title, text, note) draws of one kind (None: a failed draw)."""
    while True:
        if kind == "value_swap":
            t = value_swap(text, answers, rng, mode=mode)
            yield None if t is None else (title, t, "")
        elif kind == "paraphrase":
            t = paraphrase(text, answers, rng, mode=mode)
            yield None if t is None else (title, t, "")
        else:
            yield namesake(title, text, answers, rng, namesakes, mode=mode)


def heldout_variants(title: str, text: str, answers: Sequence[str], k: int, seed: int, *,
                     namesakes: Mapping[str, Sequence[str]] | None = None,
                     mode: str = "string", stats: dict[str, int] | None = None
                     ) -> list[tuple[str, str, str]]:
    """Up to ``k`` distinct held-out distractors of a gold passage: (kind, title, text).

    Kinds alternate in :data:`HELDOUT_KINDS` order (K=1: a value swap; K=3: one of each), a
    kind that cannot be built is skipped. ``answers`` are all the answers the distractors
    must lack (every question sharing the passage). ``stats`` counts ``built_<kind>``,
    ``failed_draws_<kind>`` and ``namesake_from_world`` / ``namesake_built``. Deterministic
    in ``seed``. Raises RuntimeError if a distractor would contain an answer (a bug).
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    stats = stats if stats is not None else {}
    rng = random.Random(seed)
    gens = {kind: _candidates(kind, title, text, answers, rng, namesakes, mode)
            for kind in HELDOUT_KINDS}
    alive = list(HELDOUT_KINDS)
    seen = {(title, " ".join(text.split()))}
    out: list[tuple[str, str, str]] = []
    while len(out) < k and alive:
        for kind in list(alive):
            if len(out) >= k:
                break
            got = None
            for _ in range(_TRIES):  # a kind is dead after _TRIES failed or repeated draws
                cand = next(gens[kind])
                if cand is None:
                    stats[f"failed_draws_{kind}"] = stats.get(f"failed_draws_{kind}", 0) + 1
                    continue
                if (cand[0], cand[1]) not in seen:
                    got = cand
                    break
            if got is None:
                alive.remove(kind)
                continue
            t_title, t_text, note = got
            if has_answer(answers, t_text, mode):
                raise RuntimeError(f"held-out {kind} distractor contains an answer {answers}")
            seen.add((t_title, t_text))
            out.append((kind, t_title, t_text))
            stats[f"built_{kind}"] = stats.get(f"built_{kind}", 0) + 1
            if note:
                stats[f"namesake_{note}"] = stats.get(f"namesake_{note}", 0) + 1
    return out
