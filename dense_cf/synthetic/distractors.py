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

* ``rule_paraphrase`` (issue 50; opt-in, not in :data:`HELDOUT_KINDS`): the answer sentence
  KEPT with its value withheld (each answer match replaced by an indefinite phrase of the
  value's type, "an unrecorded year", "an unnamed town", "an unrecorded number of works"), the
  passage reworded by a fixed rule set of this module that shares nothing with the world's
  templates (:data:`_LEXICON` word and phrase substitutions, a leading adverbial such as "In
  1923," moved to the end of its sentence), and the withheld evidence sentence moved to
  another position. It is not a template swap: no statement of ``templates.py`` is used, and
  the evidence wording that the question overlaps stays (the training p* drops it), so it is
  EADPR's "mimic the context of the evidence passage but leave out the key evidence" with the
  highest surface overlap with the question of any kind. A passage where it cannot apply (no
  answer match, an answer of no known type, no rule matches) is counted as skipped
  (``skipped_rule_paraphrase`` and ``skipped_rule_paraphrase_<reason>``), never dropped silently.

Kinds are a registry (:data:`KINDS`); :data:`HELDOUT_KINDS` is the default selection and its
order, unchanged since issue 32 so that a K keeps its mix (K=5: value swap, paraphrase,
namesake, value swap, paraphrase). A caller selects others with ``kinds=`` (config
``eval.robustness_heldout_kinds``).

Every candidate is checked with DPR's ``has_answer`` against all the answers it must lack;
one that still matches is dropped and counted. All functions are pure given the ``rng``.
"""

from __future__ import annotations

import dataclasses
import random
import re
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

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
from dense_cf.text.answers import dpr_tokenize, find_answer_spans, has_answer
from dense_cf.text.sentences import split_sentences

__all__ = ["HELDOUT_KINDS", "KINDS", "Kind", "check_kinds", "heldout_variants", "name_key",
           "namesake", "namesake_index", "namesake_negative_counts", "paraphrase",
           "paraphrase_sentence", "rule_paraphrase", "rule_paraphrase_skip", "same_type_value",
           "token_recall", "value_kind", "value_swap"]

# The default selection and round-robin order (stored results use it; do not reorder or append:
# that changes what a K holds). Every registered kind is in KINDS.
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


def name_key(title: str) -> str | None:
    """The part of ``title`` that namesakes share ("Marta Lindqvist (chemist)" -> "Marta
    Lindqvist"; a work's kind is kept: "The Silent Harbour|film"), None for a title without a
    disambiguator."""
    parsed = _parse_title(title)
    return parsed[0] if parsed else None


def namesake_negative_counts(examples: Iterable[tuple[str, Sequence[str]]],
                             world_titles: Sequence[str]) -> dict[str, Any]:
    """How many training hard negatives are namesake passages (issue 50: the held-out
    ``namesake`` kind is then not fully held out). ``examples``: (positive title, hard-negative
    titles) per training example; ``world_titles``: the corpus titles. A title is its entity (the
    world's entity keys are unique), so a negative is the positive's ``same_entity`` (a sibling
    passage) when the titles are equal and a ``namesake`` when the titles differ but share
    :func:`name_key` (what :func:`namesake` imitates); anything else is ``other``. Also counted:
    the examples with at least one namesake negative, the positives whose entity has a
    namesake in the world (the most there could be), and titles not in the world (a file that
    does not belong to it: ValueError)."""
    world = set(world_titles)
    in_world = namesake_index(world_titles)
    out = {"examples": 0, "hard_negatives": 0, "namesake": 0, "same_entity": 0, "other": 0,
           "examples_with_namesake_negative": 0, "positives_with_world_namesake": 0}
    for i, (pos, negs) in enumerate(examples):
        missing = [t for t in (pos, *negs) if t not in world]
        if missing:
            raise ValueError(f"training example {i}: titles {missing[:3]} are not in the world's "
                             f"corpus")
        key = name_key(pos)
        out["examples"] += 1
        out["positives_with_world_namesake"] += int(key is not None
                                                     and len(in_world.get(key, ())) > 1)
        found = 0
        for t in negs:
            kind = ("same_entity" if t == pos else
                    "namesake" if key is not None and name_key(t) == key else "other")
            out[kind] += 1
            found += kind == "namesake"
        out["hard_negatives"] += len(negs)
        out["examples_with_namesake_negative"] += int(found > 0)
    out["namesake_share"] = (out["namesake"] / out["hard_negatives"]
                             if out["hard_negatives"] else None)
    return out


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
# Paraphrase by this module's own rules, the evidence kept with its value withheld and moved.
# ---------------------------------------------------------------------------------------------
# Value type (value_kind) -> an indefinite phrase that names the type, not the value. "amount"
# keeps its unit ("an unrecorded number of years"), so the sentence keeps its wording.
_WITHHELD: dict[str, str] = {
    "year": "an unrecorded year", "date": "an unrecorded date",
    "amount": "an unrecorded number of {unit}", "count": "an unrecorded number of",
    "subject": "an unrecorded subject", "travel": "by some unrecorded means",
    "finance": "by some unrecorded means", "selection": "by some unrecorded procedure",
    "access": "by an unrecorded route", "known_for": "something the records do not name",
    "industry": "an unrecorded trade", "theme": "an unrecorded theme",
    "inspiration": "an unrecorded source", "praise": "qualities the records do not name",
    "person": "a person whose name is not recorded", "place": "an unnamed town",
    "river": "an unnamed river", "landmark": "an unnamed landmark", "award": "an unnamed award",
    "publisher": "an unnamed publisher", "ensemble": "an unnamed ensemble",
    "street": "an unnamed street", "venue": "an unnamed venue", "org": "an unnamed organisation",
}
# Lower-case words and phrases -> rewordings (whole words; capitalised names are never touched).
# Chosen by hand from the world's frequent function words, none of them a template's slot.
_LEXICON: dict[str, tuple[str, ...]] = {
    "several": ("various", "a number of"), "many": ("numerous",), "often": ("frequently",),
    "appeared later": ("appeared afterwards",), "small": ("little",), "short": ("brief",),
    "mostly": ("mainly",), "mainly": ("chiefly",), "remained": ("stayed",),
    "stayed": ("remained",), "received": ("got",), "died": ("passed away",),
    "founded": ("established",), "moved": ("relocated",), "married": ("wed",),
    "lived": ("resided",), "restored": ("renovated",), "complete": ("full",),
    "detailed": ("thorough",), "difficult": ("hard",), "close to": ("near",),
    "went through": ("underwent",), "quiet": ("peaceful",), "travelled": ("journeyed",),
    "translated into": ("rendered into",), "reissued": ("re-released",),
    "remembered": ("recalled",), "usually": ("typically",), "dominates": ("towers over",),
    "warmly": ("fondly",), "rare": ("scarce",), "every week": ("each week",),
    "went to school": ("attended school",), "largest": ("biggest",), "old": ("former",),
    "began": ("started",), "worked": ("was employed",), "published": ("issued",),
    "sometimes": ("at times",), "best known": ("most famous",),
    "known for": ("famous for",),
}
_LEXICON_RE = re.compile(r"\b(" + "|".join(sorted(map(re.escape, _LEXICON), key=len,
                                                   reverse=True)) + r")\b")
# A leading adverbial ("In 1923, ", "After a short illness, ") moved to the end of the sentence.
_FRONT_RE = re.compile(r"(?P<prep>In|By|After|Within|During|Before|Since|At) "
                       r"(?P<adv>[^,]{1,60}), (?P<rest>.+)\.")
_THE_RE = re.compile(r"\b[Tt]he (?:town of )?$")  # "the town of X" -> "an unnamed town"


def _withheld_phrase(value: str) -> str | None:
    """The :data:`_WITHHELD` phrase of ``value``'s type; None for a type the world does not make."""
    kind = value_kind(value)
    if kind is None:
        return None
    m = _AMOUNT_RE.fullmatch(value.strip()) if kind == "amount" else None
    return _WITHHELD[kind].format(unit=m.group(2) if m else "")


def _withhold(sentence: str, answers: Sequence[str], mode: str) -> str | None:
    """``sentence`` with every answer match replaced by its :func:`_withheld_phrase` (a "the"
    before it dropped: "joined the X" -> "joined an unnamed organisation"); None if a match's
    type is unknown. Unchanged when nothing matches."""
    repl: list[tuple[int, int, str]] = []
    for s, e in find_answer_spans(sentence, answers, mode=mode):
        phrase = _withheld_phrase(sentence[s:e])
        if phrase is None:
            return None
        the = _THE_RE.search(sentence[:s])
        repl.append((the.start() if the else s, e, phrase))
    return _cap(_replace_spans(sentence, repl)) if repl else sentence


def _reword(sentence: str, rng: random.Random) -> str:
    """:data:`_LEXICON` substitutions and a leading adverbial moved to the end."""
    out = _LEXICON_RE.sub(lambda m: rng.choice(_LEXICON[m.group(1)]), sentence)
    m = _FRONT_RE.fullmatch(out)
    if m:
        out = f"{_cap(m['rest'])} {m['prep'].lower()} {m['adv']}."
    return out


def _rule_applies(sentence: str) -> bool:
    return bool(_LEXICON_RE.search(sentence) or _FRONT_RE.fullmatch(sentence))


def rule_paraphrase_skip(text: str, answers: Sequence[str], mode: str = "string") -> str | None:
    """Why :func:`rule_paraphrase` cannot apply to ``text`` ("no_answer_match",
    "unknown_value_type", "no_rule"), or None when it can. Pure: no draw is needed to know."""
    spans = find_answer_spans(text, answers, mode=mode)
    if not spans:
        return "no_answer_match"
    if any(_withheld_phrase(text[s:e]) is None for s, e in spans):
        return "unknown_value_type"
    sents = [" ".join(text[s:e].split()) for s, e in split_sentences(text)]
    return None if any(_rule_applies(x) for x in sents) else "no_rule"


def rule_paraphrase(text: str, answers: Sequence[str], rng: random.Random, *,
                    mode: str = "string") -> str | None:
    """``text`` reworded by this module's rules (:func:`_reword`), every answer match
    withheld (:func:`_withhold`), and the first withheld (evidence) sentence moved to another
    position drawn from ``rng``; None when :func:`rule_paraphrase_skip` gives a reason or an
    answer remains (a new match formed by the rewording)."""
    if rule_paraphrase_skip(text, answers, mode) is not None:
        return None
    sents = [" ".join(text[s:e].split()) for s, e in split_sentences(text)]
    held = [_withhold(x, answers, mode) for x in sents]
    if any(h is None for h in held):  # a match that only the sentence split exposes
        return None
    evidence = [i for i, (x, h) in enumerate(zip(sents, held)) if h != x]
    out = [_reword(h, rng) for h in held]  # type: ignore[arg-type]
    if evidence and len(out) > 1:
        i = evidence[0]
        j = rng.choice([p for p in range(len(out)) if p != i])
        out.insert(j, out.pop(i))
    joined = " ".join(out)
    return None if has_answer(answers, joined, mode) else joined


def token_recall(reference: str, text: str) -> float:
    """Share of ``reference``'s distinct lower-cased DPR tokens (``dpr_tokenize``, punctuation
    left out) that occur in ``text``: the surface overlap a lexical matcher sees; 0 for a
    reference without tokens."""
    def words(x: str) -> set[str]:
        return {t.lower() for t, _, _ in dpr_tokenize(x) if t[0].isalnum()}
    ref = words(reference)
    return len(ref & words(text)) / len(ref) if ref else 0.0


# ---------------------------------------------------------------------------------------------
# The family.
# ---------------------------------------------------------------------------------------------
Builder = Callable[[str, str, Sequence[str], random.Random,
                    "Mapping[str, Sequence[str]] | None", str], "tuple[str, str, str] | None"]


@dataclasses.dataclass(frozen=True)
class Kind:
    """A held-out kind: ``build(title, text, answers, rng, namesakes, mode)`` draws one
    (title, text, note) or None (a failed draw); ``skip(text, answers, mode)`` (optional) says
    without drawing why the kind cannot apply to a passage (counted as ``skipped_<kind>``)."""

    build: Builder
    description: str
    skip: Callable[[str, Sequence[str], str], str | None] | None = None


def _text_kind(fn: Callable[..., str | None]) -> Builder:
    def build(title, text, answers, rng, namesakes, mode):
        t = fn(text, answers, rng, mode=mode)
        return None if t is None else (title, t, "")
    return build


def _namesake_build(title, text, answers, rng, namesakes, mode):
    return namesake(title, text, answers, rng, namesakes, mode=mode)


# The registry. Descriptions are the robustness report's words (eval.robustness).
KINDS: dict[str, Kind] = {
    "value_swap": Kind(_text_kind(value_swap), "the answer value swapped for another of its type"),
    "paraphrase": Kind(_text_kind(paraphrase),
                       "the other sentences paraphrased with the world's alternative templates "
                       "and reordered (answer sentence dropped)"),
    "namesake": Kind(_namesake_build, "a same-named entity's passage"),
    "rule_paraphrase": Kind(_text_kind(rule_paraphrase),
                            "the passage reworded by a fixed rule set (not the world's templates) "
                            "with the answer sentence kept, its value withheld, and moved",
                            skip=rule_paraphrase_skip),
}


def check_kinds(kinds: Sequence[str]) -> tuple[str, ...]:
    """``kinds`` as a tuple; ValueError naming the problem when one is unknown, repeated, or
    none is given."""
    kinds = tuple(kinds)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds or len(set(kinds)) != len(kinds):
        raise ValueError(f"held-out kinds must be distinct names of {tuple(KINDS)}, got "
                         f"{kinds}" + (f" (unknown: {unknown})" if unknown else ""))
    return kinds


def _candidates(kind: str, title: str, text: str, answers: Sequence[str], rng: random.Random,
                namesakes: Mapping[str, Sequence[str]] | None, mode: str
                ) -> Iterator[tuple[str, str, str] | None]:
    """Endless (title, text, note) draws of one kind (None: a failed draw)."""
    build = KINDS[kind].build
    while True:
        yield build(title, text, answers, rng, namesakes, mode)


def heldout_variants(title: str, text: str, answers: Sequence[str], k: int, seed: int, *,
                     namesakes: Mapping[str, Sequence[str]] | None = None,
                     mode: str = "string", stats: dict[str, int] | None = None,
                     kinds: Sequence[str] = HELDOUT_KINDS) -> list[tuple[str, str, str]]:
    """Up to ``k`` distinct held-out distractors of a gold passage: (kind, title, text).

    Kinds alternate in ``kinds`` order (default :data:`HELDOUT_KINDS`: K=1 a value swap, K=3
    one of each), a kind that cannot be built is skipped. ``answers`` are all the answers the
    distractors must lack (every question sharing the passage). ``stats`` counts
    ``built_<kind>``, ``failed_draws_<kind>``, ``namesake_from_world`` / ``namesake_built``,
    and for a kind with a ``skip`` rule (:class:`Kind`) ``skipped_<kind>`` and
    ``skipped_<kind>_<reason>`` (passages it cannot apply to). Deterministic in ``seed``.
    Raises RuntimeError if a distractor would contain an answer (a bug).
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    kinds = check_kinds(kinds)
    stats = stats if stats is not None else {}
    rng = random.Random(seed)
    gens = {kind: _candidates(kind, title, text, answers, rng, namesakes, mode)
            for kind in kinds}
    alive = []
    for kind in kinds:
        skip = KINDS[kind].skip
        reason = skip(text, answers, mode) if skip is not None and k > 0 else None
        if reason is None:
            alive.append(kind)
            continue
        for key in (f"skipped_{kind}", f"skipped_{kind}_{reason}"):
            stats[key] = stats.get(key, 0) + 1
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
