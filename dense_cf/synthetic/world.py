"""Entities of the synthetic benchmark: Feistel-keyed unique names and per-entity values.

Deterministic given (seed, chunk); changing anything here changes the generated files.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from dense_cf.synthetic.templates import FACTS_BY_TYPE, FILLERS, INTROS, Fact
from dense_cf.synthetic.vocab import (
    ACCESS,
    EVENT_KINDS,
    FINANCE,
    FIRST_NAMES,
    INDUSTRIES,
    INSPIRATIONS,
    KNOWN_FOR,
    LANDMARKS,
    LAST_ROOTS,
    LAST_SUFFIXES,
    MONTHS,
    NAME_SHARE,
    OCCUPATIONS,
    ORG_ADJECTIVES,
    ORG_KINDS,
    PLACE_KINDS,
    PLACE_ROOTS,
    PLACE_SUFFIXES,
    PRAISE,
    REGIONS,
    SELECTION,
    SUBJECTS,
    THEMES,
    TRAVEL,
    TYPE_NAMES,
    WORK_ADJECTIVES,
    WORK_KINDS,
    WORK_NOUNS,
)


# ---------------------------------------------------------------------------------------------
# Unique keys: a keyed Feistel permutation of [0, domain) (cycle walking) gives each entity of
# a type a distinct key without storing or sorting the key space.
# ---------------------------------------------------------------------------------------------
def _feistel_permute(idx: np.ndarray, domain: int, key: int) -> np.ndarray:
    """Bijection of [0, domain) applied to ``idx`` (vectorised, deterministic in ``key``)."""
    bits = max(2, int(math.ceil(math.log2(max(domain, 2)))))
    bits += bits % 2
    half = bits // 2
    mask = np.uint64((1 << half) - 1)
    round_keys = np.random.SeedSequence([key, 7]).generate_state(4, dtype=np.uint64)
    mul = np.uint64(0x9E3779B97F4A7C15)
    sh = np.uint64(half)

    def encrypt(x: np.ndarray) -> np.ndarray:
        left, right = x >> sh, x & mask
        for rk in round_keys:
            f = ((right * mul) ^ rk) & np.uint64(0xFFFFFFFFFFFFFFFF)
            f = (f ^ (f >> np.uint64(29))) * np.uint64(0xBF58476D1CE4E5B9)
            left, right = right, (left ^ (f >> np.uint64(17))) & mask
        return (left << sh) | right

    with np.errstate(over="ignore"):
        out = encrypt(np.asarray(idx, dtype=np.uint64))
        todo = out >= domain
        while todo.any():  # cycle walking: re-encrypt values outside the domain
            out[todo] = encrypt(out[todo])
            todo = out >= domain
    return out.astype(np.int64)


def _type_domain(t: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Mixed radices of a type's key: (name parts, disambiguator parts).

    The name is what a reader sees first ("Marta Lindqvist", "Eskholm Marathon", "The Silent
    Harbour"); the disambiguator (occupation, city, region, year, kind+year) tells entities
    with the same name apart, as Wikipedia titles do.
    """
    n_last = len(LAST_ROOTS) * len(LAST_SUFFIXES)
    n_place = len(PLACE_ROOTS) * len(PLACE_SUFFIXES)
    return [
        ((len(FIRST_NAMES), n_last), (len(OCCUPATIONS),)),
        ((n_last + len(ORG_ADJECTIVES), len(ORG_KINDS)), (n_place,)),
        ((n_place,), (len(REGIONS),)),
        ((len(EVENT_KINDS), n_place), (170,)),
        ((len(WORK_ADJECTIVES), len(WORK_NOUNS)), (len(WORK_KINDS), 120)),
    ][t]


def _type_keys(n: int, t: int, seed: int, share: float = NAME_SHARE) -> np.ndarray:
    """``n`` distinct keys of type ``t`` where names deliberately repeat.

    Ordinal j uses name slot ``j % M`` (M = n / share distinct names, a keyed permutation of the
    name space) in round ``j // M``; the disambiguator is a per-name offset plus ``round * step``
    with ``step`` coprime to its radix, so one name never gets the same disambiguator twice.
    key = name + n_names * disambiguator, i.e. the mixed radix (name parts, disambiguator parts).
    """
    name_rad, dis_rad = _type_domain(t)
    n_names, n_dis = int(np.prod(name_rad)), int(np.prod(dis_rad))
    if n > n_names * n_dis:
        raise ValueError(f"too many {TYPE_NAMES[t]} entities ({n}) for the name space "
                         f"({n_names * n_dis})")
    m = max(1, min(n_names, math.ceil(n / share)))
    m = max(m, math.ceil(n / n_dis))  # rounds must stay below n_dis
    j = np.arange(n, dtype=np.int64)
    name = _feistel_permute(j % m, n_names, seed * 8 + t)
    offset = _feistel_permute(name % n_dis, n_dis, seed * 8 + t + 4)  # per-name, looks random
    step = next(s for s in range(n_dis // 3 + 1, 2 * n_dis + 2) if math.gcd(s, n_dis) == 1)
    dis = (offset + (j // m) * step) % n_dis
    return name + n_names * dis


def _decode(key: int, radices: Sequence[int]) -> list[int]:
    out = []
    for r in radices:
        out.append(key % r)
        key //= r
    return out


def _last_name(i: int) -> str:
    return LAST_ROOTS[i // len(LAST_SUFFIXES)] + LAST_SUFFIXES[i % len(LAST_SUFFIXES)]


def _place_name(i: int) -> str:
    return PLACE_ROOTS[i // len(PLACE_SUFFIXES)] + PLACE_SUFFIXES[i % len(PLACE_SUFFIXES)]


# ---------------------------------------------------------------------------------------------
# Per-entity value drawing. Values are token-distinct within an entity, so a fact's answer does
# not reappear in another sentence or a sibling passage; validation is the backstop.
# ---------------------------------------------------------------------------------------------
_WORD_RE = re.compile(r"\w+")


def _token_key(value: str) -> str:
    """" tok tok " (lower-case word tokens): containment of keys ~ DPR token sub-sequence match."""
    return " " + " ".join(_WORD_RE.findall(value.lower())) + " "


class _Entity:
    __slots__ = ("rng", "used", "fields", "etype")

    def __init__(self, rng: random.Random, etype: int) -> None:
        self.rng = rng
        self.etype = etype
        self.used: list[str] = []  # token keys of every value the entity's text already holds
        self.fields: dict[str, Any] = {}  # template fields (str) and the anchor year y0 (int)

    def reserve(self, value: str) -> None:
        self.used.append(_token_key(value))

    def draw(self, kind: str) -> str:
        """A value whose tokens neither contain nor occur inside any earlier value's tokens.

        E.g. a place "Torton" is refused next to a person "Erik Torton", a year 925 next to a
        census of "5,925": either would put the answer in a second sentence or a sibling.
        """
        for _ in range(50):
            value = _VALUE_MAKERS[kind](self.rng, self)
            # An event date carries the event's own (reserved) year by design: check the rest.
            key = _token_key(value.rsplit(" ", 1)[0] if kind == "eventdate" else value)
            if not any(key in u or u in key for u in self.used):
                self.used.append(_token_key(value))
                return value
        raise RuntimeError(f"could not draw a distinct {kind!r} value")  # pools are far larger


def _rand_last(rng: random.Random) -> str:
    return _last_name(rng.randrange(len(LAST_ROOTS) * len(LAST_SUFFIXES)))


def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST_NAMES)} {_rand_last(rng)}"


def _place(rng: random.Random) -> str:
    return _place_name(rng.randrange(len(PLACE_ROOTS) * len(PLACE_SUFFIXES)))


def _head(rng: random.Random) -> str:
    return rng.choice(ORG_ADJECTIVES) if rng.random() < 0.3 else _rand_last(rng)


def _org(rng: random.Random) -> str:
    return f"{_head(rng)} {rng.choice(ORG_KINDS)[0]}"


def _year(rng: random.Random, e: _Entity) -> str:
    """A year consistent with the entity's anchor year ``y0`` (birth, founding, event, release)."""
    y0 = e.fields["y0"]
    lo, hi = {0: (y0 + 18, y0 + 70),                     # person: adult life
              1: (y0 + 3, min(y0 + 150, 2020)),          # organisation: after founding
              2: (max(y0 + 50, 1800), 2020),             # place: modern records
              3: (y0 - 12, y0 - 1),                      # event: plans before the event
              4: (y0 + 1, max(y0 + 1, min(y0 + 12, 2020)))}[e.etype]  # work: prizes after release
    return str(rng.randint(lo, hi))


def _day_month(rng: random.Random) -> str:
    return f"{rng.randint(1, 28)} {rng.choice(MONTHS)}"


def _count(rng: random.Random, lo: int, hi: int) -> str:
    return f"{rng.randint(lo, hi):,}"


_VALUE_MAKERS: dict[str, Callable[[random.Random, _Entity], str]] = {
    "year": _year,
    "foundyear": lambda r, e: str(e.fields["y0"]),
    "birthdate": lambda r, e: f"{_day_month(r)} {e.fields['y0']}",
    "deathdate": lambda r, e: (f"{_day_month(r)} "
                               f"{r.randint(e.fields['y0'] + 45, min(e.fields['y0'] + 90, 2020))}"),
    "eventdate": lambda r, e: f"{_day_month(r)} {e.fields['y0']}",
    "place": lambda r, e: _place(r),
    "person": lambda r, e: _person(r),
    "org": lambda r, e: _org(r),
    "publisher": lambda r, e: (f"{_head(r)} " + r.choice(
        ("Publishing House", "Press", "Film Studio", "Records", "Pictures"))),
    "subject": lambda r, e: r.choice(SUBJECTS),
    "travel": lambda r, e: r.choice(TRAVEL),
    "finance": lambda r, e: r.choice(FINANCE),
    "selection": lambda r, e: r.choice(SELECTION),
    "access": lambda r, e: r.choice(ACCESS),
    "known_for": lambda r, e: r.choice(KNOWN_FOR),
    "industry": lambda r, e: r.choice(INDUSTRIES),
    "theme": lambda r, e: r.choice(THEMES),
    "inspiration": lambda r, e: r.choice(INSPIRATIONS),
    "praise": lambda r, e: r.choice(PRAISE),
    "award": lambda r, e: (f"{_rand_last(r)} "
                           f"{r.choice(('Medal', 'Prize', 'Award', 'Cup', 'Fellowship'))}"
                           if r.random() < 0.7 else
                           f"Order of the {r.choice(WORK_ADJECTIVES)} {r.choice(WORK_NOUNS)}"),
    "street": lambda r, e: f"{r.choice((_rand_last(r), r.choice(PLACE_ROOTS)))} "
                           f"{r.choice(('Street', 'Lane', 'Road', 'Square'))}",
    "river": lambda r, e: (f"River {r.choice(PLACE_ROOTS)}"
                           + r.choice(("en", "a", "ow", "el", "ing", "ey"))),
    "landmark": lambda r, e: (f"Church of Saint {r.choice(FIRST_NAMES)}" if r.random() < 0.5
                              else r.choice(LANDMARKS)),
    "venue": lambda r, e: f"{_rand_last(r)} "
                          f"{r.choice(('Hall', 'Stadium', 'Pavilion', 'Park', 'Arena'))}",
    "ensemble": lambda r, e: f"{r.choice(ORG_ADJECTIVES)} " + r.choice(
        ("Symphony Orchestra", "Brass Band", "Choir", "String Quartet")),
    "count": lambda r, e: _count(r, 30, 990),
    "bigcount": lambda r, e: _count(r, 1200, 98000),
    "years": lambda r, e: f"{r.randint(3, 45)} years",
    "weeks": lambda r, e: f"{r.randint(3, 40)} weeks",
    "months": lambda r, e: f"{r.randint(5, 70)} months",
    "days": lambda r, e: f"{r.randint(2, 60)} days",
    "km": lambda r, e: f"{r.randint(5, 480)} kilometres",
    "money": lambda r, e: f"{_count(r, 200, 60000)} crowns",
    "length": lambda r, e: (f"{r.randint(150, 900)} pages" if e.fields["unit"] == "pages"
                            else f"{r.randint(40, 240)} minutes"),
}


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


_ANCHORED = frozenset({"foundyear", "birthdate", "eventdate"})


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _entity_fields(etype: int, key: int, e: _Entity) -> tuple[str, str]:
    """Fill ``e.fields`` (S, R, N, ...) from the entity key; return (title, question reference)."""
    rng, f = e.rng, e.fields
    name_rad, dis_rad = _type_domain(etype)
    parts = _decode(key, name_rad + dis_rad)
    if etype == 0:  # person: "Marta Lindqvist (chemist)"
        first, last, occ = FIRST_NAMES[parts[0]], _last_name(parts[1]), OCCUPATIONS[parts[2]]
        f.update(N=f"{first} {last}", S=last, occ=occ, a_occ=_a(occ), region=rng.choice(REGIONS),
                 y0=rng.randint(1800, 1930))
        title, ref = f"{first} {last} ({occ})", f"the {occ} {first} {last}"
        for v in (first, last, f["region"]):
            e.reserve(v)
    elif etype == 1:  # organisation: "Meridian Savings Bank (Eskholm)"
        n_last = len(LAST_ROOTS) * len(LAST_SUFFIXES)
        head = _last_name(parts[0]) if parts[0] < n_last else ORG_ADJECTIVES[parts[0] - n_last]
        kind, ks, members, role = ORG_KINDS[parts[1]]
        city = _place_name(parts[2])
        name = f"{head} {kind}"
        f.update(title0=name, ks=ks, a_ks=_a(ks), members=members, role=role, city=city,
                 S=f"the {ks}",
                 y0=rng.randint(1780, 1960))
        title, ref = f"{name} ({city})", f"the {name} in {city}"
        for v in (name, city, head):
            e.reserve(v)
    elif etype == 2:  # place: "Eskholm (Ostmark)"
        name, region = _place_name(parts[0]), REGIONS[parts[1]]
        f.update(S=name, region=region, pkind=rng.choice(PLACE_KINDS), y0=rng.randint(900, 1650))
        title, ref = f"{name} ({region})", f"{name} in {region}"
        for v in (name, region):
            e.reserve(v)
    elif etype == 3:  # event: "1987 Eskholm Marathon"
        kind, ks, kdesc = EVENT_KINDS[parts[0]]
        city, year = _place_name(parts[1]), str(1846 + parts[2])
        title = f"{year} {city} {kind}"
        f.update(title0=title, ks=ks, kdesc=kdesc, a_kdesc=_a(kdesc), city=city, year=year,
                 S=f"the {ks}", y0=int(year))
        ref = f"the {title}"
        for v in (city, year):
            e.reserve(v)
    else:  # work: "The Silent Harbour (1964 film)"
        adj, noun = WORK_ADJECTIVES[parts[0]], WORK_NOUNS[parts[1]]
        kind, created, created_q, unit, copies = WORK_KINDS[parts[2]]
        year = str(1900 + parts[3])
        name = f"The {adj} {noun}"
        f.update(name=name, kind=kind, created=created, created_q=created_q, unit=unit,
                 copies=copies,
                 year=year, S=f"the {kind}", y0=int(year))
        title, ref = f"{name} ({year} {kind})", f"the {year} {kind} {name}"
        for v in (adj, noun, year):
            e.reserve(v)
    f["R"] = ref
    return title, ref


def _words(s: str) -> int:
    return s.count(" ") + 1


class _Question(NamedTuple):
    qtype: str
    question: str
    answer: str
    passage: int  # global passage index (id - 1)
    # Global indices of every passage that mentions the question's entity (its "siblings",
    # the positive included); read only by ``hard_negatives="other_entity"`` mining.
    siblings: tuple[int, ...] = ()


@dataclass
class _Candidate:
    qtype: str
    question: str
    answer: str
    passage: int  # chunk-local passage index
    entity_passages: tuple[int, ...]  # chunk-local indices of all passages of the entity
    fact: int = -1  # index of the fact (= its one sentence) within the entity


def _draw_facts(rng: random.Random, etype: int, key: int, n_pass: int
                ) -> tuple[_Entity, str, list[Fact], list[int], dict[int, dict[str, str]]]:
    """An entity's fields, its shuffled facts, facts per passage and the used facts' values.

    Returns (entity, title, facts, per, vals_by_fact): ``per[p]`` facts go to passage p and
    ``facts[:sum(per)]`` are used, fact i with slot values ``vals_by_fact[i]``. Shared by both
    worlds; the RNG draws are those of the original single-subject world, in the same order.
    """
    e = _Entity(rng, etype)
    title, _ = _entity_fields(etype, key, e)
    facts = list(FACTS_BY_TYPE[etype])
    rng.shuffle(facts)
    # 2-3 facts per passage (fewer when the entity runs out of fact kinds); leftovers unused.
    per = [rng.choice((2, 3, 3)) for _ in range(n_pass)]
    while sum(per) > len(facts):
        i = max(range(n_pass), key=lambda j: per[j])
        per[i] -= 1
    used_facts = facts[:sum(per)]
    # Fixed (anchored) values first: a random value drawn earlier could block them, e.g. a
    # census of "5,925" tokenises to 5 , 925 and would contain a founding year 925.
    vals_by_fact: dict[int, dict[str, str]] = {}
    for i in sorted(range(len(used_facts)), key=lambda i: not any(
            kind in _ANCHORED for _, kind in used_facts[i].slots)):
        vals_by_fact[i] = {slot: e.draw(kind) for slot, kind in used_facts[i].slots}
    return e, title, facts, per, vals_by_fact


def _make_entity(rng: random.Random, etype: int, key: int, n_pass: int, base: int
                 ) -> tuple[str, list[str], list[_Candidate]]:
    """One entity: its title, ``n_pass`` passage texts and all candidate questions."""
    e, title, facts, per, vals_by_fact = _draw_facts(rng, etype, key, n_pass)
    f = e.fields
    passages_sents: list[list[str]] = []
    pending: list[tuple[int, Fact, dict[str, str]]] = []  # (passage, fact, template context)
    fi = 0
    intro_first, intro_later = INTROS[etype]
    fillers = FILLERS[etype]
    pool: list[str] = []
    for p in range(n_pass):
        sents = []
        for _ in range(per[p]):
            fact = facts[fi]
            ctx = {**f, **vals_by_fact[fi]}
            fi += 1
            sents.append(_cap(rng.choice(fact.statements).format(**ctx)))
            pending.append((p, fact, ctx))
        rng.shuffle(sents)
        intro = _cap(rng.choice(intro_first if p == 0 else intro_later).format(**f))
        sents.insert(0, intro)
        # Value-free fillers bring the passage to 40-70 words (the demo's 64-96 word pieces);
        # drawn from one entity-level pool so siblings rarely repeat a filler.
        target = rng.randint(42, 58)
        n = sum(_words(s) for s in sents)
        for _ in range(2 * len(fillers)):  # bounded: skips fillers already in this passage
            if n >= target:
                break
            if not pool:
                pool = list(fillers)
                rng.shuffle(pool)
            s = _cap(pool.pop().format(**f))
            if s in sents:
                continue
            if n + _words(s) > 72:
                break
            sents.insert(rng.randint(1, len(sents)), s)
            n += _words(s)
        passages_sents.append(sents)
    texts = [" ".join(s) for s in passages_sents]
    idx = tuple(base + p for p in range(n_pass))
    cands = []
    for fact_i, (p, fact, ctx) in enumerate(pending):
        by_type: dict[str, list[tuple[str, str]]] = {}
        for qtype, tmpl, slot in fact.questions:
            by_type.setdefault(qtype, []).append((tmpl, slot))
        for qtype, opts in by_type.items():  # one question per (fact, type): no near-duplicates
            tmpl, slot = rng.choice(opts)
            cands.append(_Candidate(qtype, _cap(tmpl.format(**ctx)), ctx[slot], base + p, idx,
                                    fact_i))
    return title, texts, cands


# ---------------------------------------------------------------------------------------------
# The "mixed" world (SQuAD-like paragraphs): every sentence of a passage is about a different
# entity and names it. Opt-in (``generate(world="mixed")``); the default world is unchanged.
# ---------------------------------------------------------------------------------------------
WORLDS = ("entity", "mixed")  # entity: every sentence about the title's entity (default)
# Where the generator's BM25 hard negatives come from: "sibling" (default): the top passages
# lacking the answer, which here are the gold entity's other passages (same title, no answer:
# counterfactuals already, docs/replication.md); "other_entity": only passages of OTHER
# entities, as NQ's BM25 negatives mostly are (other Wikipedia articles); "random": no mining,
# the random negatives serve as hard ones (PiCL §5.3: in-batch plus one random negative).
HARD_NEGATIVES = ("sibling", "other_entity", "random")

# Lead-in for a fact sentence that does not name its entity once formatted ("The main prize
# went to ...", "Critics praised its ..."), per entity type.
_LEADS = ("As for {R}, ", "For {R}, ", "As for {R}, ", "At {R}, ", "As for {R}, ")


def _naming_fields(etype: int, f: dict[str, Any]) -> dict[str, str]:
    """Field overrides that make fact statements name the entity unambiguously.

    {S} becomes the question reference {R} ("the chemist Marta Lindqvist", "Eskholm in
    Ostmark"); "the {ks}" of organisations and events and "the {kind}" of works become full
    names ("the Meridian Savings Bank in Eskholm", "the 1987 Eskholm Marathon", "the 1964 film
    The Silent Harbour"). Names alone repeat across entities (NAME_SHARE), hence the
    disambiguator. Question templates use none of these fields.
    """
    out = {"S": f["R"]}
    if etype == 1:
        out["ks"] = f"{f['title0']} in {f['city']}"
    elif etype == 3:
        out["ks"] = f["title0"]
    elif etype == 4:
        out["kind"] = f"{f['year']} {f['kind']} {f['name']}"
    return out


def _subject(f: dict[str, Any]) -> str:
    """The entity's reference without a leading article: a mixed-world sentence contains it."""
    r = f["R"]
    return r[4:] if r.startswith("the ") else r


def _mixed_statement(rng: random.Random, etype: int, fact: Fact, ctx: dict[str, Any]) -> str:
    """One statement of ``fact`` that names its entity (a lead-in when the template does not)."""
    tmpl = rng.choice(fact.statements)
    s = tmpl.format(**ctx)
    if _subject(ctx).lower() not in s.lower():
        if not tmpl.startswith("{"):  # a template word, not a value (names keep their case)
            s = s[:1].lower() + s[1:]
        s = _LEADS[etype].format(**ctx) + s
    return _cap(s)


@dataclass
class _Item:
    entity: int     # chunk-local entity index
    fact: int       # chunk-unique fact id
    sentence: str
    fact_obj: Fact
    ctx: dict[str, Any]


def _deal(rng: random.Random, items: list[_Item], host: list[int], slots: list[int]
          ) -> tuple[list[list[_Item]], int]:
    """Items into passages: passage p gets up to ``slots[p]`` items, none of its host entity
    ``host[p]`` and no two of one entity. Greedy over shuffled items and passages, then a repair
    pass (a free slot, else one swap with a placed item); items that fit nowhere are left out
    (counted)."""
    rest = list(items)
    rng.shuffle(rest)
    order = list(range(len(host)))
    rng.shuffle(order)
    placed: list[list[_Item]] = [[] for _ in host]
    for p in order:
        for _ in range(slots[p]):
            taken = {it.entity for it in placed[p]} | {host[p]}
            j = next((j for j, it in enumerate(rest) if it.entity not in taken), None)
            if j is None:
                break
            placed[p].append(rest.pop(j))
    def fits(it: _Item, p: int, skip: _Item | None = None) -> bool:
        return host[p] != it.entity and all(o.entity != it.entity for o in placed[p] if o is not skip)

    unplaced = 0
    for it in rest:
        free = [p for p in order if len(placed[p]) < slots[p]]
        p = next((p for p in free if fits(it, p)), None)
        if p is not None:
            placed[p].append(it)
            continue
        # One swap: ``it`` takes the place of an item ``o`` of passage r, which moves to a free slot.
        move = next(((r, o, q) for q in free for r in order if r != q for o in placed[r]
                     if fits(it, r, skip=o) and fits(o, q)), None)
        if move is None:
            unplaced += 1
            continue
        r, o, q = move
        placed[r][placed[r].index(o)] = it
        placed[q].append(o)
    return placed, unplaced


@dataclass
class _MixedPassages:
    """A chunk's passages in the mixed world before they become texts (see ``_mixed_passages``)."""

    titles: list[str]
    host: list[int]            # passage -> title entity (chunk-local)
    intros: list[str]          # passage -> its title entity's intro sentence
    placed: list[list[_Item]]  # passage -> its fact sentences (other, mutually different entities)
    unplaced: int              # fact sentences that fit no passage (left out)


def _mixed_passages(rng: random.Random, types: Sequence[int], keys: Sequence[int],
                    counts: Sequence[int]) -> _MixedPassages:
    """Entities, titles, facts and values drawn as in the default world (``_draw_facts``); an
    entity still titles 3-5 passages, each opening with one of its intros. The fact sentences of
    all the chunk's entities are then dealt out (``_deal``) so that a passage's facts are about
    entities other than its title's and about different ones."""
    titles: list[str] = []
    host: list[int] = []
    slots: list[int] = []
    intros: list[str] = []
    items: list[_Item] = []
    for k, (etype, key, n_pass) in enumerate(zip(types, keys, counts)):
        etype, n_pass = int(etype), int(n_pass)
        e, title, facts, per, vals_by_fact = _draw_facts(rng, etype, int(key), n_pass)
        f = e.fields
        naming = _naming_fields(etype, f)
        for i in range(sum(per)):
            ctx = {**f, **vals_by_fact[i], **naming}
            items.append(_Item(k, len(items), _mixed_statement(rng, etype, facts[i], ctx),
                               facts[i], ctx))
        intro_first, intro_later = INTROS[etype]
        for p in range(n_pass):
            titles.append(title)
            host.append(k)
            slots.append(per[p])
            intros.append(_cap(rng.choice(intro_first if p == 0 else intro_later).format(**f)))
    placed, unplaced = _deal(rng, items, host, slots)
    return _MixedPassages(titles, host, intros, placed, unplaced)


def _make_mixed_chunk(rng: random.Random, types: Sequence[int], keys: Sequence[int],
                      counts: Sequence[int]) -> tuple[list[str], list[str], list[int],
                                                      list[_Candidate], int]:
    """The passages of a chunk of entities in the mixed world, and their candidate questions.

    Every sentence of a passage has its own subject, named in the sentence
    (``_mixed_passages``). A question is asked about the entity of its fact sentence (by the
    same templates); its "siblings" for validation are every other passage that mentions that
    entity (titled by it, or holding another of its facts).
    Returns (titles, texts, passage -> title entity, candidates, facts left out).
    """
    mp = _mixed_passages(rng, types, keys, counts)
    mentions: dict[int, set[int]] = {}
    for p, k in enumerate(mp.host):
        mentions.setdefault(k, set()).add(p)
        for it in mp.placed[p]:
            mentions.setdefault(it.entity, set()).add(p)
    texts: list[str] = []
    cands: list[_Candidate] = []
    for p in range(len(mp.host)):
        sents = [it.sentence for it in mp.placed[p]]
        rng.shuffle(sents)
        texts.append(" ".join([mp.intros[p]] + sents))
        for it in sorted(mp.placed[p], key=lambda it: it.fact):
            by_type: dict[str, list[tuple[str, str]]] = {}
            for qtype, tmpl, slot in it.fact_obj.questions:
                by_type.setdefault(qtype, []).append((tmpl, slot))
            for qtype, opts in by_type.items():
                tmpl, slot = rng.choice(opts)
                cands.append(_Candidate(qtype, _cap(tmpl.format(**it.ctx)), it.ctx[slot], p,
                                        tuple(sorted(mentions[it.entity])), it.fact))
    return mp.titles, texts, mp.host, cands, mp.unplaced
