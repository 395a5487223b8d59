"""A synthetic two-hop world in HotpotQA's format (docs/multihop.md).

``python -m dense_cf.cli.synthetic_multihop --out DIR --num_questions N --seed S`` (or
:func:`generate_multihop`) writes into DIR:

* ``hotpot_{train,dev,test}.json``  HotpotQA records (:mod:`dense_cf.datasets.hotpotqa`), all
  labelled (unlike HotpotQA's test set); context = the 2 gold paragraphs + ``num_distractors``
  others (namesakes of the gold entities first, then passages linked to them, then random);
* ``corpus.tsv``                    every passage in DPR's TSV (id, text, title), one passage per
  entity, title = the entity's title (the full-wiki corpus);
* ``meta.json``                     seed, parameters, counts, drop reasons (written last).

The world reuses the single-hop generator's machinery (:mod:`.world`, :mod:`.vocab`,
:mod:`.templates`): people, organisations and works with Feistel-keyed unique titles whose
names collide on purpose (``NAME_SHARE``: "Marta Lindqvist (chemist)" and "Marta Lindqvist
(painter)"), token-distinct values per entity, the same intros, fillers and fact sentences.
One passage per entity: an intro, its facts (a person: birth date, birthplace; people link to
a spouse, a doctoral advisor and an employer; a work to its creator; an organisation has a
founding year) and fillers, at least 4 sentences. A link sentence names the other entity by
its disambiguated reference ("the painter Hugo Bergqvist"). Links between people point from
lower to higher entity index, so a linked passage never names the passage linking to it.

Questions (``type`` split by ``bridge_frac``):

* bridge: spouse -> birthplace ("Where was the spouse of the chemist Marta Lindqvist born?"),
  advisor -> birth date, employer -> founding year, creator -> birthplace; supporting facts are
  the link sentence of the first hop and the attribute sentence of the second, in hop order;
* comparison: born first / founded first (answer: the earlier entity's name) and born in the
  same town (yes / no, half each where shared towns allow); supporting facts are the compared
  sentences, in question order.

Every question names its entities by their disambiguated reference and is validated with the
project's DPR matching (:func:`dense_cf.text.answers.has_answer`); a failing candidate is
dropped and counted in meta.json (``dropped``). Bridge: the link sentence (and no other sentence
of the first hop) names the bridge entity; the answer lies in exactly the attribute sentence of
the second hop and nowhere in the first; the second hop does not name the first (so
:func:`dense_cf.datasets.hotpotqa.bridge_order` recovers the hop order); no namesake of the
first hop names the bridge entity and no namesake of the bridge entity holds the answer.
Comparison: different names, values in their sentences, no namesake with the same value.
Question texts are unique. So the two supporting passages are the only ones that answer a
question, and removing a supporting sentence removes what it contributes (EADPR's
counterfactual) and leaves text.

Deterministic: one RNG stream from ``seed``; the same seed and parameters give byte-identical
files. Sizes: ``num_questions`` in total (test ``test_frac``, dev ``dev_frac``, the rest train),
``entities_per_question * num_questions`` passages (at least 20).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from absl import logging

from dense_cf import files
from dense_cf.datasets import hotpotqa
from dense_cf.datasets.hotpotqa import HotpotExample
from dense_cf.progress import Progress, timed
from dense_cf.synthetic import world
from dense_cf.synthetic.templates import FILLERS, INTROS, ORG_FACTS, PERSON_FACTS, WORK_FACTS
from dense_cf.synthetic.vocab import NAME_SHARE, TYPE_NAMES
from dense_cf.text.answers import has_answer

__all__ = ["GENERATOR_VERSION", "FILES", "SPLITS", "BRIDGE_RELATIONS", "COMPARISON_KINDS",
           "MultihopWorld", "Question", "build_world", "generate_multihop", "check_params",
           "generate_or_check"]

GENERATOR_VERSION = "multihop-1.0"
SPLITS = ("train", "dev", "test")
FILES = {"train": "hotpot_train.json", "dev": "hotpot_dev.json", "test": "hotpot_test.json",
         "corpus": "corpus.tsv", "meta": "meta.json"}
PERSON, ORG, WORK = 0, 1, 4  # world.py's entity type codes
_TYPE_PROBS = {PERSON: 0.6, ORG: 0.2, WORK: 0.2}
_LINK_PROB = {"spouse": 0.5, "advisor": 0.5, "employer": 0.5}
_SHARED_BIRTHPLACE = 0.25  # a person born where an earlier one was: "same town" yes-questions
_MIN_ENTITIES = 20


def _statements(facts: Sequence[Any], question: str) -> tuple[str, ...]:
    """The statements of the single-hop fact asked by ``question`` (reused sentences)."""
    for f in facts:
        if any(q[1] == question for q in f.questions):
            return f.statements
    raise LookupError(f"no fact asked by {question!r}")


_BIRTHDATE = _statements(PERSON_FACTS, "When was {R} born?")
_BIRTHPLACE = _statements(PERSON_FACTS, "Where was {R} born?")
_ADVISOR = _statements(PERSON_FACTS, "Who supervised the doctorate of {R}?")
_EMPLOYER = _statements(PERSON_FACTS, "Which organisation did {R} join in {y}?")
_FOUNDED = _statements(ORG_FACTS, "When was {R} founded?")
_CREATOR = _statements(WORK_FACTS, "Who {created_q} {R}?")
# The single-hop marriage fact calls the spouse "a teacher", which would contradict the
# spouse's own occupation here; its second statement is kept.
_SPOUSE = ("In {y}, {S} married {v}.", "{S} and {v} were married in {y} in a small chapel.")

# relation -> (link sentences in the first hop, attribute of the second hop, question)
BRIDGE_RELATIONS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "spouse": (_SPOUSE, "birthplace", "Where was the spouse of {R} born?"),
    "advisor": (_ADVISOR, "birthdate", "When was the doctoral advisor of {R} born?"),
    "employer": (_EMPLOYER, "founded", "When was the organisation that employed {R} founded?"),
    "creator": (_CREATOR, "birthplace", "Where was the person who {created_q} {R} born?"),
}
COMPARISON_KINDS: dict[str, str] = {
    "born_first": "Who was born first, {Ra} or {Rb}?",
    "founded_first": "Which was founded first, {Ra} or {Rb}?",
    "same_birthplace": "Were {Ra} and {Rb} born in the same town?",
}
_COMPARED = {"born_first": "birthdate", "founded_first": "founded",
             "same_birthplace": "birthplace"}


@dataclass
class _Entity:
    etype: int
    title: str
    name: str           # the part namesakes share: "Marta Lindqvist", "Meridian Savings Bank"
    ref: str            # disambiguated reference used in questions and link sentences
    fields: dict[str, Any]
    draws: world._Entity
    values: dict[str, str] = field(default_factory=dict)   # birthdate, birthplace, founded
    year: int = 0       # birth or founding year (comparisons)
    links: list[tuple[str, int]] = field(default_factory=list)  # (relation, target entity)
    sentences: list[str] = field(default_factory=list)     # HotpotQA form: leading spaces
    fact_sentence: dict[str, int] = field(default_factory=dict)  # fact or link -> sentence

    @property
    def text(self) -> str:
        return "".join(self.sentences)


@dataclass(frozen=True)
class Question:
    """A generated question: ``entities`` are (first hop, second hop) for bridge questions and
    (a, b) in question order for comparisons; ``kind`` a relation or comparison kind."""

    type: str
    kind: str
    question: str
    answer: str
    entities: tuple[int, int]
    support: tuple[tuple[int, int], ...]  # (entity, sentence index)


@dataclass
class MultihopWorld:
    """Entities (passage i = entity i), selected questions and what validation dropped."""

    entities: list[_Entity]
    questions: list[Question]
    dropped: Counter
    validated: int
    shortfall: int
    namesakes: dict[str, list[int]]

    def passage_title(self, i: int) -> str:
        return self.entities[i].title


# ---------------------------------------------------------------------------------------------
# Entities, links and passages


def _rng_seed(seed: int, stream: int) -> int:
    return int(np.random.SeedSequence([seed, 14, stream]).generate_state(1, dtype=np.uint64)[0])


def _plan(num_entities: int, seed: int) -> list[tuple[int, int]]:
    """(type, unique key) per entity; names within a type collide at NAME_SHARE."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 14, 0]))
    kinds = list(_TYPE_PROBS)
    types = rng.choice(kinds, size=num_entities, p=list(_TYPE_PROBS.values()))
    keys = np.zeros(num_entities, dtype=np.int64)
    for t in kinds:
        sel = np.flatnonzero(types == t)
        keys[sel] = world._type_keys(len(sel), t, seed)
    return [(int(t), int(k)) for t, k in zip(types, keys)]


def _distinct(e: world._Entity, value: str) -> bool:
    key = world._token_key(value)
    return not any(key in u or u in key for u in e.used)


def _make_entity(rng: random.Random, etype: int, key: int, persons: list[_Entity]) -> _Entity:
    draws = world._Entity(rng, etype)
    title, ref = world._entity_fields(etype, key, draws)
    f = draws.fields
    name = {PERSON: "N", ORG: "title0", WORK: "name"}[etype]
    ent = _Entity(etype, title, f[name], ref, f, draws, year=int(f["y0"]))
    if etype == PERSON:
        ent.values["birthdate"] = draws.draw("birthdate")
        town = None
        if persons and rng.random() < _SHARED_BIRTHPLACE:
            town = rng.choice(persons).values["birthplace"]
            if not _distinct(draws, town):
                town = None
            else:
                draws.reserve(town)
        ent.values["birthplace"] = town or draws.draw("place")
    elif etype == ORG:
        ent.values["founded"] = draws.draw("foundyear")
        ent.values["founder"] = draws.draw("person")
    return ent


def _link(rng: random.Random, ents: list[_Entity]) -> None:
    """Spouse (exclusive pairs), advisor and employer for people, a creator for every work.

    Person-to-person links point to a higher index, so a linked passage never names the one
    linking to it; a passage links to different entities, with names other than its own."""
    persons = [i for i, e in enumerate(ents) if e.etype == PERSON]
    orgs = [i for i, e in enumerate(ents) if e.etype == ORG]
    married: set[int] = set()

    def pick(i: int, pool: list[int], lo: int, hi: int, fits: Callable[[int], bool]) -> int | None:
        """A random entry of pool[lo:hi] that ``i`` does not link yet, whose name differs and
        whose dates ``fits``; None after a few misses."""
        if hi <= lo:
            return None
        taken = {j for _, j in ents[i].links}
        for _ in range(16):
            j = pool[rng.randrange(lo, hi)]
            if j not in taken and ents[j].name != ents[i].name and fits(j):
                return j
        return None

    for n, i in enumerate(persons):
        y = ents[i].year
        if i not in married and rng.random() < _LINK_PROB["spouse"]:
            # a nearby later person: unmarried ones are plentiful there
            j = pick(i, persons, n + 1, min(n + 65, len(persons)),
                     lambda j: j not in married and abs(ents[j].year - y) <= 15)
            if j is not None:
                married.update((i, j))
                ents[i].links.append(("spouse", j))
        if rng.random() < _LINK_PROB["advisor"]:
            j = pick(i, persons, n + 1, len(persons), lambda j: ents[j].year <= y - 15)
            if j is not None:
                ents[i].links.append(("advisor", j))
        if rng.random() < _LINK_PROB["employer"]:
            j = pick(i, orgs, 0, len(orgs), lambda j: ents[j].year <= y + 50)
            if j is not None:
                ents[i].links.append(("employer", j))
    for i, e in enumerate(ents):
        if e.etype == WORK:
            j = pick(i, persons, 0, len(persons),
                     lambda j: ents[j].year + 15 <= e.year <= ents[j].year + 80)
            if j is not None:
                e.links.append(("creator", j))


def _draw_year(e: _Entity, lo: int, hi: int) -> str:
    """A year in [lo, hi] token-distinct from the entity's values (if one is found)."""
    rng = e.draws.rng
    year = str(rng.randint(lo, hi))
    for _ in range(50):
        if _distinct(e.draws, year):
            break
        year = str(rng.randint(lo, hi))
    e.draws.reserve(year)
    return year


def _write_passage(rng: random.Random, ents: list[_Entity], i: int) -> None:
    """Intro, facts, link sentences and fillers: 40-70 words, at least 4 sentences."""
    e = ents[i]
    f = e.fields
    facts: list[tuple[str, str]] = []  # (fact or link name, sentence)
    if e.etype == PERSON:
        facts.append(("birthdate", rng.choice(_BIRTHDATE).format(**f, v=e.values["birthdate"])))
        facts.append(("birthplace", rng.choice(_BIRTHPLACE).format(**f, v=e.values["birthplace"])))
    elif e.etype == ORG:
        facts.append(("founded", rng.choice(_FOUNDED).format(**f, v=e.values["founded"],
                                                             f=e.values["founder"])))
    for rel, j in e.links:
        target = ents[j].ref
        if rel == "employer":  # "joined the {v}": the reference without its article
            target = target[4:] if target.startswith("the ") else target
        year = ""
        if rel == "spouse":  # both adults
            ya, yb = sorted((e.year, ents[j].year))
            year = _draw_year(e, yb + 18, ya + 70)
        elif rel == "employer":  # after the founding
            year = _draw_year(e, max(e.year + 18, ents[j].year + 1), e.year + 70)
        tmpl = rng.choice(BRIDGE_RELATIONS[rel][0])
        facts.append((f"link:{j}", tmpl.format(**f, v=target, y=year)))
    rng.shuffle(facts)
    body = [(k, world._cap(s)) for k, s in facts]
    intro = world._cap(rng.choice(INTROS[e.etype][0]).format(**f))
    fillers = [world._cap(s.format(**f)) for s in FILLERS[e.etype]]
    rng.shuffle(fillers)
    words = world._words(intro) + sum(world._words(s) for _, s in body)
    target = rng.randint(42, 58)
    while fillers and (len(body) + 1 < 4 or words < target):
        s = fillers.pop()
        body.insert(rng.randint(0, len(body)), ("", s))
        words += world._words(s)
    sents = [intro] + [s for _, s in body]
    e.sentences = [s if k == 0 else " " + s for k, s in enumerate(sents)]
    e.fact_sentence = {k: n + 1 for n, (k, _) in enumerate(body) if k}


def _build_entities(rng: random.Random, num_entities: int, seed: int) -> list[_Entity]:
    plan = _plan(num_entities, seed)
    ents: list[_Entity] = []
    persons: list[_Entity] = []
    progress = Progress("multihop: entities", num_entities, unit="entities")
    for etype, key in plan:
        ent = _make_entity(rng, etype, key, persons)
        ents.append(ent)
        if etype == PERSON:
            persons.append(ent)
        progress.update()
    progress.done()
    _link(rng, ents)
    progress = Progress("multihop: passages", num_entities, unit="passages")
    for i in range(len(ents)):
        _write_passage(rng, ents, i)
        progress.update()
    progress.done()
    titles = Counter(e.title for e in ents)
    if max(titles.values()) > 1:  # keys are unique, so titles are: a repeat is a bug
        raise RuntimeError(f"repeated titles: {[t for t, n in titles.items() if n > 1][:5]}")
    return ents


# ---------------------------------------------------------------------------------------------
# Questions and their validation


class _Validator:
    def __init__(self, ents: list[_Entity], namesakes: dict[str, list[int]]) -> None:
        self.ents, self.namesakes = ents, namesakes

    def others(self, i: int) -> list[int]:
        return [j for j in self.namesakes[self.ents[i].name] if j != i]

    def in_sentences(self, value: str, i: int) -> list[int]:
        return [k for k, s in enumerate(self.ents[i].sentences) if has_answer([value], s)]

    def bridge(self, x: int, y: int, rel: str, answer: str) -> str | None:
        """None if the bridge question (x -> y) is valid, else the drop reason."""
        ex, ey = self.ents[x], self.ents[y]
        attr = BRIDGE_RELATIONS[rel][1]
        if self.in_sentences(ey.name, x) != [ex.fact_sentence[f"link:{y}"]]:
            return "bridge_not_only_in_link_sentence"
        if self.in_sentences(answer, y) != [ey.fact_sentence[attr]]:
            return "answer_not_only_in_attribute_sentence"
        if has_answer([answer], ex.text):
            return "answer_in_first_hop"
        if has_answer([ex.name], ey.text):  # e.g. through a link to a namesake of x
            return "second_hop_names_first"
        if any(has_answer([ey.name], self.ents[j].text) for j in self.others(x)):
            return "namesake_of_first_hop_names_bridge"
        if any(has_answer([answer], self.ents[j].text) for j in self.others(y)):
            return "namesake_of_bridge_has_answer"
        return None

    def comparison(self, a: int, b: int, kind: str) -> str | None:
        ea, eb = self.ents[a], self.ents[b]
        attr = _COMPARED[kind]
        if ea.name == eb.name:
            return "same_name"
        if kind != "same_birthplace" and ea.year == eb.year:
            return "same_year"
        for i in (a, b):
            value = self.ents[i].values[attr]
            if self.ents[i].fact_sentence[attr] not in self.in_sentences(value, i):
                return "value_not_in_sentence"
            if any(has_answer([value], self.ents[j].text) for j in self.others(i)):
                return "namesake_shares_value"
        return None


def _bridge_candidates(ents: list[_Entity]) -> dict[str, list[Question]]:
    out: dict[str, list[Question]] = {rel: [] for rel in BRIDGE_RELATIONS}
    for x, ex in enumerate(ents):
        for rel, y in ex.links:
            _, attr, tmpl = BRIDGE_RELATIONS[rel]
            ey = ents[y]
            q = world._cap(tmpl.format(**ex.fields))
            support = ((x, ex.fact_sentence[f"link:{y}"]), (y, ey.fact_sentence[attr]))
            out[rel].append(Question("bridge", rel, q, ey.values[attr], (x, y), support))
    return out


def _comparison(ents: list[_Entity], kind: str, a: int, b: int) -> Question:
    ea, eb = ents[a], ents[b]
    q = COMPARISON_KINDS[kind].format(Ra=ea.ref, Rb=eb.ref)
    if kind == "same_birthplace":
        answer = "yes" if ea.values["birthplace"] == eb.values["birthplace"] else "no"
    else:
        answer = (ea if ea.year < eb.year else eb).name
    attr = _COMPARED[kind]
    support = ((a, ea.fact_sentence[attr]), (b, eb.fact_sentence[attr]))
    return Question("comparison", kind, world._cap(q), answer, (a, b), support)


def _draw_comparison(rng: random.Random, ents: list[_Entity], kind: str, persons: list[int],
                     orgs: list[int], towns: list[list[int]], want_yes: bool
                     ) -> Question | None:
    pool = orgs if kind == "founded_first" else persons
    if len(pool) < 2:
        return None
    if kind == "same_birthplace" and want_yes and towns:
        group = rng.choice(towns)
        a, b = rng.sample(group, 2)
    else:
        a, b = rng.sample(pool, 2)
    return _comparison(ents, kind, a, b)


def _select(rng: random.Random, ents: list[_Entity], namesakes: dict[str, list[int]],
            n_bridge: int, n_comp: int) -> tuple[list[Question], Counter, int, int]:
    """Type-balanced, validated questions: bridge relations and comparison kinds round-robin."""
    val = _Validator(ents, namesakes)
    dropped: Counter = Counter()
    seen: set[str] = set()
    chosen: list[Question] = []
    validated = 0
    progress = Progress("multihop: questions", n_bridge + n_comp, unit="questions")

    def accept(q: Question, reason: str | None) -> bool:
        nonlocal validated
        validated += 1
        if reason is None and q.question in seen:
            reason = "duplicate_question"
        if reason is not None:
            dropped[reason] += 1
            return False
        seen.add(q.question)
        chosen.append(q)
        progress.update()
        return True

    buckets = _bridge_candidates(ents)
    for rel in BRIDGE_RELATIONS:
        rng.shuffle(buckets[rel])
    got = 0
    while got < n_bridge and any(buckets.values()):
        for rel in BRIDGE_RELATIONS:
            if got >= n_bridge:
                break
            if buckets[rel]:
                q = buckets[rel].pop()
                got += accept(q, val.bridge(*q.entities, q.kind, q.answer))

    persons = [i for i, e in enumerate(ents) if e.etype == PERSON]
    orgs = [i for i, e in enumerate(ents) if e.etype == ORG]
    by_town: dict[str, list[int]] = {}
    for i in persons:
        by_town.setdefault(ents[i].values["birthplace"], []).append(i)
    towns = [g for g in by_town.values() if len(g) > 1]
    got = attempts = 0
    yes_no = 0
    kinds = list(COMPARISON_KINDS)
    while got < n_comp and attempts < 30 * n_comp + 100:
        for kind in kinds:
            if got >= n_comp:
                break
            attempts += 1
            want_yes = kind == "same_birthplace" and yes_no % 2 == 0
            q = _draw_comparison(rng, ents, kind, persons, orgs, towns, want_yes)
            if q is None:
                continue
            ok = accept(q, val.comparison(*q.entities, kind))
            got += ok
            yes_no += ok and kind == "same_birthplace"
    progress.done()
    return chosen, dropped, validated, n_bridge + n_comp - len(chosen)


def build_world(num_questions: int, seed: int = 0, *, bridge_frac: float = 0.5,
                entities_per_question: float = 2.0) -> MultihopWorld:
    """The entities, passages and validated questions (in selection order), without files."""
    if num_questions < 3:
        raise ValueError(f"num_questions must be at least 3, got {num_questions}")
    if not 0.0 <= bridge_frac <= 1.0:
        raise ValueError(f"bridge_frac must be in [0, 1], got {bridge_frac}")
    if entities_per_question <= 0:
        raise ValueError(f"entities_per_question must be > 0, got {entities_per_question}")
    rng = random.Random(_rng_seed(seed, 1))
    n_ent = max(_MIN_ENTITIES, math.ceil(entities_per_question * num_questions))
    ents = _build_entities(rng, n_ent, seed)
    namesakes: dict[str, list[int]] = {}
    for i, e in enumerate(ents):
        namesakes.setdefault(e.name, []).append(i)
    n_bridge = round(bridge_frac * num_questions)
    chosen, dropped, validated, shortfall = _select(rng, ents, namesakes, n_bridge,
                                                    num_questions - n_bridge)
    if shortfall:
        logging.warning("multihop: %d question(s) short of %d (not enough valid candidates; "
                        "raise entities_per_question)", shortfall, num_questions)
    return MultihopWorld(ents, chosen, dropped, validated, shortfall, namesakes)


# ---------------------------------------------------------------------------------------------
# HotpotQA records and files


def _context(rng: random.Random, w: MultihopWorld, q: Question, num_distractors: int,
             linked_from: dict[int, list[int]]) -> list[int]:
    """Gold passages and distractors (namesakes, then linked passages, then random), shuffled."""
    gold = list(q.entities)
    near: list[int] = []
    for i in gold:
        near.extend(j for j in w.namesakes[w.entities[i].name] if j not in gold)
    linked: list[int] = []
    for i in gold:
        linked.extend(j for _, j in w.entities[i].links)
        linked.extend(linked_from.get(i, ()))
    picked: list[int] = []
    for group in (near, linked):
        group = [j for j in dict.fromkeys(group) if j not in gold]
        rng.shuffle(group)
        picked.extend(j for j in group if j not in picked)
    picked = picked[:num_distractors]
    n = len(w.entities)
    want = min(num_distractors, n - len(gold))
    while len(picked) < want:
        j = rng.randrange(n)
        if j not in gold and j not in picked:
            picked.append(j)
    ids = gold + picked
    rng.shuffle(ids)
    return ids


def _example(w: MultihopWorld, q: Question, ctx: list[int], seed: int) -> HotpotExample:
    ents = w.entities
    hard = any(len(w.namesakes[ents[i].name]) > 1 for i in q.entities)
    return HotpotExample(
        id=hashlib.sha1(f"{seed}\0{q.question}".encode()).hexdigest()[:24],
        question=q.question, answer=q.answer, type=q.type,
        supporting_facts=tuple((ents[i].title, k) for i, k in q.support),
        context=tuple((ents[i].title, tuple(ents[i].sentences)) for i in ctx),
        level="hard" if hard else "medium")


def _check_args(dev_frac: float, test_frac: float, num_distractors: int) -> None:
    if not (0.0 <= dev_frac and 0.0 <= test_frac and dev_frac + test_frac < 1.0):
        raise ValueError(f"dev_frac and test_frac must be >= 0 with a sum below 1, got "
                         f"{dev_frac}, {test_frac}")
    if num_distractors < 0:
        raise ValueError(f"num_distractors must be >= 0, got {num_distractors}")


def generate_multihop(out_dir: str | os.PathLike, num_questions: int, seed: int = 0, *,
                      bridge_frac: float = 0.5, dev_frac: float = 0.1, test_frac: float = 0.1,
                      entities_per_question: float = 2.0, num_distractors: int = 8
                      ) -> dict[str, Any]:
    """Write the two-hop benchmark into ``out_dir``; returns {"paths", "counts", "meta"}.

    ``num_questions`` in all: test = round(test_frac * N), dev = round(dev_frac * N), train the
    rest (a shortfall, logged and counted, comes out of train). ``bridge_frac`` of them are
    bridge questions. ``entities_per_question`` sets the corpus size, ``num_distractors`` the
    paragraphs besides the two gold ones in each record's context.
    """
    _check_args(dev_frac, test_frac, num_distractors)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    w = build_world(num_questions, seed, bridge_frac=bridge_frac,
                    entities_per_question=entities_per_question)
    rng = random.Random(_rng_seed(seed, 2))
    order = list(range(len(w.questions)))
    rng.shuffle(order)  # file order must not follow selection order
    n_test, n_dev = round(test_frac * num_questions), round(dev_frac * num_questions)
    cuts = {"test": order[:n_test], "dev": order[n_test:n_test + n_dev],
            "train": order[n_test + n_dev:]}
    linked_from: dict[int, list[int]] = {}
    for i, e in enumerate(w.entities):
        for _, j in e.links:
            linked_from.setdefault(j, []).append(i)
    paths = {k: str(out / v) for k, v in FILES.items()}
    examples: dict[str, list[HotpotExample]] = {s: [] for s in SPLITS}
    progress = Progress("multihop: records", len(w.questions), unit="records")
    for split in SPLITS:
        for k in cuts[split]:
            q = w.questions[k]
            examples[split].append(_example(w, q, _context(rng, w, q, num_distractors,
                                                           linked_from), seed))
            progress.update()
    progress.done()
    with timed(f"multihop: writing files to {out}", "multihop: files written"):
        n_passages, corpus_counts = hotpotqa.write_corpus(
            ((e.title, e.sentences) for e in w.entities), paths["corpus"])
        for split in SPLITS:
            hotpotqa.write_hotpot(paths[split], examples[split])
    if n_passages != len(w.entities) or corpus_counts:
        raise RuntimeError(f"corpus lost passages: {n_passages} of {len(w.entities)}, "
                           f"{dict(corpus_counts)}")  # titles are unique, texts one-line
    with timed("multihop: counting", "multihop: counted"):
        counts = _counts(w, examples)
    params = {"num_questions": num_questions, "bridge_frac": bridge_frac, "dev_frac": dev_frac,
              "test_frac": test_frac, "entities_per_question": entities_per_question,
              "num_distractors": num_distractors, "name_share": NAME_SHARE}
    meta = {"generator": "dense_cf.synthetic.multihop", "version": GENERATOR_VERSION,
            "seed": seed, "params": params, "counts": counts,
            "files": {k: v for k, v in FILES.items() if k != "meta"}}
    with files.atomic_open(paths["meta"]) as f:  # last: its presence means the files are whole
        f.write(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    logging.info("multihop benchmark written to %s: %s", out, counts["questions"])
    return {"paths": paths, "counts": counts, "meta": meta}


def _counts(w: MultihopWorld, examples: dict[str, list[HotpotExample]]) -> dict[str, Any]:
    ents = w.entities
    by_split = {s: Counter(q.type for q in examples[s]) for s in SPLITS}
    kinds = Counter(q.kind for q in w.questions)
    yes_no = Counter(q.answer for q in w.questions if q.kind == "same_birthplace")
    rules = Counter(hotpotqa.bridge_order_rule(ex) for s in SPLITS for ex in examples[s]
                    if ex.type == "bridge")
    return {
        "passages": len(ents),
        "entities": {TYPE_NAMES[t]: sum(e.etype == t for e in ents) for t in _TYPE_PROBS},
        "entities_with_namesake": sum(len(g) for g in w.namesakes.values() if len(g) > 1),
        "links": dict(sorted(Counter(r for e in ents for r, _ in e.links).items())),
        "questions": {s: len(examples[s]) for s in SPLITS},
        "types": {s: {t: by_split[s][t] for t in hotpotqa.TYPES} for s in SPLITS},
        "kinds": {k: kinds[k] for k in list(BRIDGE_RELATIONS) + list(COMPARISON_KINDS)},
        "same_birthplace_answers": {a: yes_no[a] for a in ("yes", "no")},
        "levels": dict(sorted(Counter(ex.level for s in SPLITS for ex in examples[s]).items())),
        "bridge_order_rules": dict(sorted(rules.items())),
        "candidates_validated": w.validated, "dropped": dict(sorted(w.dropped.items())),
        "dropped_total": sum(w.dropped.values()), "shortfall": w.shortfall,
        "mean_passage_words": round(float(np.mean([world._words(e.text) for e in ents])), 2),
        "min_passage_sentences": min(len(e.sentences) for e in ents),
    }


_DEFAULTS = {"bridge_frac": 0.5, "dev_frac": 0.1, "test_frac": 0.1, "entities_per_question": 2.0,
             "num_distractors": 8}


def check_params(out_dir: str | os.PathLike, *, num_questions: int, seed: int = 0,
                 **params: Any) -> None:
    """Raises ValueError naming every differing setting (found, wanted) when ``out_dir``'s
    meta.json records other settings than ``num_questions``, ``seed`` and ``params`` (keyword
    arguments of :func:`generate_multihop`; left out = its defaults) or another version."""
    meta = json.loads((Path(out_dir) / FILES["meta"]).read_text(encoding="utf-8"))
    want = {**_DEFAULTS, **params, "num_questions": num_questions, "seed": seed,
            "version": GENERATOR_VERSION}
    unknown = sorted(set(params) - set(_DEFAULTS))
    if unknown:
        raise TypeError(f"unknown generate_multihop settings {unknown}")
    have = {**meta.get("params", {}), "seed": meta.get("seed"), "version": meta.get("version")}
    diff = {k: (have.get(k), v) for k, v in want.items() if have.get(k) != v}
    if diff:
        raise ValueError(f"{out_dir} was generated with other settings (key: (found, wanted)) "
                         f"{diff}; use another --out or remove it")


def generate_or_check(out_dir: str | os.PathLike, num_questions: int, seed: int = 0,
                      **params: Any) -> None:
    """Generates into ``out_dir`` once: a directory with a meta.json (written last) is reused
    after :func:`check_params`, one without is (re)generated."""
    if (Path(out_dir) / FILES["meta"]).exists():
        check_params(out_dir, num_questions=num_questions, seed=seed, **params)
        return
    generate_multihop(out_dir, num_questions, seed, **params)
