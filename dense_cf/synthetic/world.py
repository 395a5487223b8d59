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


@dataclass
class _Candidate:
    qtype: str
    question: str
    answer: str
    passage: int  # chunk-local passage index
    entity_passages: tuple[int, ...]  # chunk-local indices of all passages of the entity
    fact: int = -1  # index of the fact (= its one sentence) within the entity


def _make_entity(rng: random.Random, etype: int, key: int, n_pass: int, base: int
                 ) -> tuple[str, list[str], list[_Candidate]]:
    """One entity: its title, ``n_pass`` passage texts and all candidate questions."""
    e = _Entity(rng, etype)
    title, _ = _entity_fields(etype, key, e)
    f = e.fields
    facts = list(FACTS_BY_TYPE[etype])
    rng.shuffle(facts)
    # 2-3 facts per passage (fewer when the entity runs out of fact kinds); leftovers unused.
    per = [rng.choice((2, 3, 3)) for _ in range(n_pass)]
    while sum(per) > len(facts):
        i = max(range(n_pass), key=lambda j: per[j])
        per[i] -= 1
    passages_sents: list[list[str]] = []
    used_facts = facts[:sum(per)]
    # Fixed (anchored) values first: a random value drawn earlier could block them, e.g. a
    # census of "5,925" tokenises to 5 , 925 and would contain a founding year 925.
    vals_by_fact: dict[int, dict[str, str]] = {}
    for i in sorted(range(len(used_facts)), key=lambda i: not any(
            kind in _ANCHORED for _, kind in used_facts[i].slots)):
        vals_by_fact[i] = {slot: e.draw(kind) for slot, kind in used_facts[i].slots}
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
