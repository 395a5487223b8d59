"""Synthetic answer-aware QA benchmark in DPR's file formats (docs/method.md §2, §5, §6, §8).

``python -m dense_cf.synthetic.generate --out DIR --num_passages N --seed S`` (or :func:`generate`)
writes into DIR:

* ``psgs_synth.tsv``                corpus (``id\\ttext\\ttitle``, ids "1".."N");
* ``biencoder-synth-{train,dev}.json`` DPR bi-encoder examples: gold positive, random
  ``negative_ctxs`` and BM25 ``hard_negative_ctxs`` (real ``bm25s`` over the whole corpus,
  query = question, title + text indexed like DPR's BM25; passages with ``has_answer``
  true and the positive are skipped);
* ``synth-test.qa.csv``             test questions and answers;
* ``synth-{train,dev,test}_gold_info.json`` ``{"data": [{question, question_tokens, title,
  context, example_id}]}``, context = the gold positive (source of AAR triplets, docs/method.md §5);
* ``meta.json``                     seed, sizes, counts, drop reasons, generator version.

The world. Entities (people, organisations, places, events, works) get unique keys drawn
without replacement from combinatorial name spaces (keyed Feistel permutation), yet their
*parts* are shared: many people named "Marta ...", organisations named after surnames,
events and facts in the same towns and years, so lexical overlap alone does not identify
the answer passage. Each entity has 3-5 passages (same title, ~40-70 words); every passage
mentions the entity, facts are spread over the passages, one fact = one sentence. A question
paraphrases one fact sentence; its positive is the passage holding that sentence and its
sibling passages (same entity, same context, no evidence) are natural distractors and BM25
hard negatives.

Settings (defaults reproduce the files above byte for byte):

* ``questions_per_passage=k`` (``--questions_per_passage``): questions on up to k different fact
  sentences of each selected positive, so one passage is the positive of several questions
  (SQuAD-like contrastive conflicts, DCSR docs/method.md §4); see :func:`_select_grouped`.
* ``entity_types=(...)`` (``--entity_types``) restricts the world to some entity types;
  :func:`generate_domains` (``--domains N``) writes N domains with disjoint entity types,
  fact sentences and question templates into ``OUT/<domain>/`` (encoder attribution, docs/method.md §7).

Validation (every emitted question, with the project's own ``answers``/``sentences`` code):
``has_answer`` true on the positive, all ``find_answer_spans`` matches inside exactly ONE
``split_sentences`` sentence, no sibling passage ``has_answer``, ``question_type`` equal to
the template's type, question text unique. Failures are dropped and counted in meta.json
(``dropped``); a chunk that runs out of candidates records a ``shortfall``. Values are drawn
token-distinct within an entity, so drops are rare (0 in 600k validated questions at 1M).

Determinism: the entity plan comes from ``seed``; each chunk of entities is generated from
its own seed-derived RNG, so output is byte-identical for a seed whatever the worker count.
Hard negatives also depend on the bm25s top-k backend (JAX here; recorded in meta.json).

Scale (2 shared, busy CPU cores): 1M passages / 600k questions: generation 6-14 min (pysbd
sentence splitting of every positive dominates), bm25s index ~1 min, mining 300-500 q/s
(~30 min for 550k questions), writing ~1 min, peak RSS 3.2 GB, 2.2 GB of files.
``max_mined`` caps mined questions per split (unmined ones get ``hard_negative_ctxs: []``,
counted in meta.json).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple, Sequence

import numpy as np

from dense_cf.text import answers as answers_lib
from dense_cf.datasets import formats
from dense_cf.text import sentences as sentences_lib
import multiprocessing as mp

log = logging.getLogger(__name__)

GENERATOR_VERSION = "synth-1.0"
QTYPES = ("how", "what", "when", "where", "which", "who")
SPLITS = ("train", "dev", "test")
CHUNK_ENTITIES = 1000  # fixed: part of the output's definition (per-chunk RNG streams)

FILES = {
    "corpus": "psgs_synth.tsv",
    "train": "biencoder-synth-train.json",
    "dev": "biencoder-synth-dev.json",
    "test_qa": "synth-test.qa.csv",
    "train_gold": "synth-train_gold_info.json",
    "dev_gold": "synth-dev_gold_info.json",
    "test_gold": "synth-test_gold_info.json",
    "meta": "meta.json",
}

# ---------------------------------------------------------------------------------------------
# Name parts. Everything is ASCII except a few names that exercise DPR's NFD normalisation.
# No part may be a wh-word: question_type() must see only the template's wh-word.
# ---------------------------------------------------------------------------------------------
FIRST_NAMES = (
    "Marta Harlan Clara Tobias Ingrid Felix Anselm Beatrix Casimir Dagny Elias Freya Gustav Hedda "
    "Ivo Jolanta Konrad Liesel Matthias Nora Oskar Petra Quentin Rosa Sven Thea Ulrich Vera Wendel "
    "Xenia Yannick Zora Agnes Bruno Cecilia Dmitri Edith Fabian Greta Hugo Irene Jonas Katrin Leon "
    "Magda Nils Olga Pavel Ruth Stefan Tilda Viktor Wanda Arvid Birgit Cyril Dora Emil Flora Gideon "
    "Hanna Isak Johanna Karl Lotte Milan Nadia Otto Paula Rafael Sabine Teodor Ursula Valentin Alma "
    "Bertil Carla Dorian Elin Frida Gregor Helga Imre Judit Kasimir Lena Mirko Nelly Orla Piet "
    "Ragna Simon Tove Vilma Anton Blanka Cosmin Daria Erik Fenna Jürgen Zoë Åsa Renée Søren Tomás"
).split()
LAST_ROOTS = (
    "Lind Berg Hal Kess Mor Dal Ek Fal Gran Holm Brand Sand Stein Wal Ros Fink Hart Lang Adler "
    "Kron Vos Strom Wend Bauer Nord Sten Hag Ask Bru Carl Dahl Eng Fors Gyl Hed Jar Kal Lund Mal "
    "Nyb Ols Pal Rud Sjo Tor Udd Vik Wes Zell Amb Bell Cor Dor Fer Gal Lor Mar Nov Orb Pet"
).split()
LAST_SUFFIXES = "qvist ler sen ova mann ard ini berg ton ecki".split()
OCCUPATIONS = (
    "chemist painter architect engineer botanist composer poet surgeon astronomer geologist "
    "historian sculptor photographer mathematician linguist economist cartographer violinist "
    "novelist physicist journalist lawyer inventor diplomat philosopher zoologist playwright "
    "pianist explorer archaeologist engraver printer shipbuilder brewer banker teacher judge pilot"
).split()
PLACE_ROOTS = (
    "Bran Esk Tall Hart Wil Ash Marl Thorn Kel Dun Ros Fen Gal Hol Lin Mor Nor Ost Pel Quen Rav "
    "Sel Tor Ul Var Wes Yar Zel Ald Bel Cal Dor El Far Glen Hal Ir Jor Kar Lan Mar Ned Or Pen Rud "
    "Sten Tam Ulv Vel Wend Bir Cor Dal Eb Fal Gar Hes Ivel Kirk Lor Mel Nes Ot Pol Rin Sar Tev "
    "Vin Arn Bex Cran Drum Ems Frod Gil Hex Ink Lud Mab Nan Rok Skel Tib Brom Clif Dew Fro Grim "
    "Lam Pry Sko"
).split()
PLACE_SUFFIXES = (
    "holm ford wick by ton stad berg burg mouth field dale vik hem ley minster bridge haven "
    "thorpe gate moor well stead wood ham ness port cross mere hall heim sund lund borg vale "
    "combe hurst"
).split()
REGIONS = (
    "Ostmark Veldoria Carrow Lowmoor Estria Brenland Halvania Korsland Marisca Norvale Peltoria "
    "Quarnia Rhosmark Sundale Tavria Umbria Valdmark Westerland Yrland Zevania Aldmark Bothnia "
    "Caldera Dunmark Elvaria Fjordane Galmark Hestria Istria Jutmark Kaldera Lorvania Morland "
    "Nessaria Orvania Pomeria Ravenmark Solvania Teramark Ulmark Varland Wenmark Amberland "
    "Blackmoor Coldvale Eastmarch Greyhaven Highvale Ironmark Saltmarsh"
).split()
ORG_ADJECTIVES = (
    "Northern Royal Meridian Union Atlantic Central Eastern Western Imperial United Silverline "
    "Harbour Crown Star Lakeside Highland Riverside Coastal National Provincial"
).split()
# (kind in title, short noun, member noun, leader role)
ORG_KINDS = (
    ("Railway Company", "company", "employees", "chairman"),
    ("Savings Bank", "bank", "employees", "director"),
    ("Symphony Orchestra", "orchestra", "musicians", "conductor"),
    ("Football Club", "club", "members", "chairman"),
    ("Institute of Technology", "institute", "students", "rector"),
    ("Botanical Society", "society", "members", "president"),
    ("Shipbuilding Company", "company", "workers", "director"),
    ("Observatory", "observatory", "staff members", "director"),
    ("Publishing House", "publisher", "employees", "director"),
    ("Brewery", "brewery", "workers", "manager"),
    ("Museum of Art", "museum", "employees", "director"),
    ("Opera House", "opera house", "performers", "director"),
    ("Mining Company", "company", "miners", "chairman"),
    ("Textile Mill", "mill", "weavers", "manager"),
    ("Trading Company", "company", "employees", "chairman"),
    ("General Hospital", "hospital", "nurses", "director"),
    ("Academy of Music", "academy", "students", "rector"),
    ("Glassworks", "glassworks", "workers", "manager"),
    ("Chess Club", "club", "members", "president"),
    ("Rowing Club", "club", "members", "president"),
    ("Steamship Company", "company", "sailors", "chairman"),
    ("Historical Society", "society", "members", "president"),
    ("Printing Works", "printing works", "printers", "manager"),
    ("Porcelain Factory", "factory", "workers", "director"),
    ("Teachers College", "college", "students", "principal"),
)
# (kind in title, short noun, description)
EVENT_KINDS = (
    ("Marathon", "marathon", "road running race"),
    ("Chess Olympiad", "olympiad", "team chess competition"),
    ("Regatta", "regatta", "sailing competition"),
    ("Cycling Race", "race", "road cycling race"),
    ("Piano Competition", "competition", "competition for young pianists"),
    ("Music Festival", "festival", "summer music festival"),
    ("Film Festival", "festival", "festival of independent cinema"),
    ("Trade Fair", "fair", "trade fair for regional manufacturers"),
    ("Book Fair", "fair", "fair for publishers and booksellers"),
    ("Industrial Exhibition", "exhibition", "exhibition of machinery and crafts"),
    ("Rowing Championship", "championship", "national rowing championship"),
    ("Poetry Festival", "festival", "festival of poetry and song"),
    ("Choir Festival", "festival", "gathering of amateur choirs"),
    ("Horse Race", "race", "horse race on the common"),
    ("Ski Race", "race", "cross-country ski race"),
)
# (kind, creator verb in statements, creator verb in questions, length unit, copies noun)
WORK_KINDS = (
    ("novel", "written", "wrote", "pages", "copies"),
    ("film", "directed", "directed", "minutes", "tickets"),
    ("opera", "composed", "composed", "minutes", "tickets"),
    ("album", "recorded", "recorded", "minutes", "copies"),
    ("play", "written", "wrote", "minutes", "tickets"),
)
WORK_ADJECTIVES = (
    "Silent Distant Burning Hidden Last Broken Golden Frozen Quiet Northern Endless Bitter Gentle "
    "Crimson Empty Lonely Restless Secret Shining Wandering Forgotten Iron Painted Sleeping "
    "Drowned Salt Hollow Pale Scarlet Winter Summer Midnight Early Little Great Lost Second "
    "Narrow Open Amber"
).split()
WORK_NOUNS = (
    "Harbour Garden Orchard Lantern River Bridge Mirror Island Tower Forest Winter Voyage Meadow "
    "Letter Shore Kingdom Mountain Valley Orchestra Window Compass Anchor Lighthouse Carriage "
    "Clockmaker Bell Fisherman Pilgrim Sparrow Heron Fox Wolf Archive Monastery Tide Ember "
    "Horizon Crossing Frontier Canal Quarry Furnace Granary Ferry Signal Parade Threshold"
).split()
MONTHS = (
    "January February March April May June July August September October November December"
).split()

# Value pools for answers that are not names, numbers or dates.
SUBJECTS = (
    "classical philology", "applied mathematics", "church history", "mineralogy", "land surveying",
    "organic chemistry", "comparative law", "naval architecture", "moral philosophy",
    "plant physiology", "music theory", "political economy", "medieval art", "marine biology",
    "structural engineering", "ancient languages", "celestial mechanics", "forestry",
    "hydraulic engineering", "agricultural science",
)
TRAVEL = (
    "by overnight train", "by river steamer", "on horseback", "by mail coach", "on foot",
    "by bicycle", "aboard a cargo ship", "by seaplane", "by motor car", "by horse-drawn sleigh",
    "by canal barge", "by coastal ferry", "in a borrowed van", "by cable car and mule",
)
FINANCE = (
    "through public subscription", "with loans from local merchants", "by a royal charter",
    "through a town lottery", "with donations from former students", "by selling shares to farmers",
    "with money from a wealthy widow", "through a levy on harbour traffic",
    "with a grant from the regional council", "by mortgaging its first building",
)
SELECTION = (
    "by public ballot", "through regional qualifiers", "by invitation only", "by drawing lots",
    "through an open audition", "by a jury of former winners", "through a written examination",
    "on the recommendation of local clubs",
)
ACCESS = (
    "by narrow-gauge railway", "by ferry across the lake", "along a winding mountain road",
    "by bus from the coast", "on foot along the old pilgrim path", "by river boat",
    "by a single-track branch line", "across a toll bridge",
)
KNOWN_FOR = (
    "careful record keeping", "its apprenticeship scheme", "a large lending library",
    "its charitable work among sailors", "an unusual clock tower", "generous pensions",
    "its summer open days", "a long rivalry with a neighbouring town", "strict dress rules",
    "its annual winter concert", "a collection of antique maps", "early use of electric light",
)
INDUSTRIES = (
    "salt mining", "wool weaving", "herring fishing", "glass making", "timber rafting",
    "copper smelting", "flax growing", "cheese making", "brick making", "shipbuilding",
    "hop growing", "peat cutting", "slate quarrying", "lace making",
)
THEMES = (
    "the industrial heritage of the coast", "river life", "migration and memory",
    "the future of the railways", "light and water", "northern folk traditions",
    "the history of printing", "craft and machine", "the sea and its trades", "old and new towns",
)
INSPIRATIONS = (
    "a shipwreck off the northern coast", "the letters of a lighthouse keeper",
    "a childhood spent in a mining town", "an old court record", "a folk tale about a drowned bell",
    "a newspaper report about a flood", "the diaries of a travelling surgeon",
    "a long winter in a mountain village", "a painting of a harbour at dawn",
)
PRAISE = (
    "spare dialogue", "bold use of colour", "patient pacing", "unusual structure",
    "vivid landscapes", "restrained humour", "careful research", "haunting final scene",
)
LANDMARKS = ("Old Tollhouse", "Grain Exchange", "Weighhouse", "Salt Tower", "Old Mint",
             "Cloth Hall", "Watermill", "Customs House")

TYPE_NAMES = ("person", "organisation", "place", "event", "work")
TYPE_PROBS = (0.30, 0.20, 0.15, 0.15, 0.20)
# Entities per distinct name: 1.5 means about a third of all entities share their name with
# another entity of the same type ("Marta Lindqvist (chemist)" / "Marta Lindqvist (painter)").
NAME_SHARE = 1.5


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
# Facts. A fact is one sentence (one of ``statements``) with named slots; each question template
# names its wh-type and the slot that is its answer. Templates use {S} (subject in a sentence),
# {R} (unambiguous reference in a question) and entity fields; questions paraphrase statements.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fact:
    slots: tuple[tuple[str, str], ...]  # (slot name, value kind)
    statements: tuple[str, ...]
    questions: tuple[tuple[str, str, str], ...]  # (qtype, template, answer slot)


def F(slots: str, statements: Sequence[str], questions: Sequence[tuple[str, str, str]]) -> Fact:
    """``slots`` like "v:year y:place"."""
    return Fact(tuple(tuple(s.split(":")) for s in slots.split()), tuple(statements), tuple(questions))


PERSON_FACTS = (
    F("v:birthdate", ["{S} was born on {v}, the second of four children in a family of millers.",
                 "Parish records show that {S} was born on {v} in a small house near the market."],
      [("when", "When was {R} born?", "v"), ("what", "What is the date of birth of {R}?", "v")]),
    F("v:place", ["{S} was born in the town of {v} and spent a quiet childhood there.",
                  "The family of {S} lived in {v}, where {S} was born and went to school."],
      [("where", "Where was {R} born?", "v"), ("which", "Which town was {R} born in?", "v")]),
    F("v:subject y:place", ["At the university in {y}, {S} studied {v} under difficult conditions.",
                            "{S} moved to {y} to study {v} at the local university."],
      [("what", "What did {R} study at university?", "v"),
       ("where", "Where did {R} go to study {v}?", "y")]),
    F("v:person", ["{S} completed a doctorate under the supervision of {v} after several attempts.",
                   "The doctoral thesis of {S} was supervised by {v}, a demanding teacher."],
      [("who", "Who supervised the doctorate of {R}?", "v"),
       ("who", "Who was the doctoral advisor of {R}?", "v")]),
    F("v:org y:year", ["In {y}, {S} joined the {v} and stayed for most of a career.",
                       "{S} took a position at the {v} in {y} after a long search for work."],
      [("which", "Which organisation did {R} join in {y}?", "v"),
       ("when", "When did {R} join the {v}?", "y")]),
    F("v:travel c:place", ["{S} travelled to {c} {v} to take up a new post.",
                           "To reach a new post in {c}, {S} made the journey {v}."],
      [("how", "How did {R} travel to {c}?", "v")]),
    F("v:award y:year", ["{S} was awarded the {v} in {y} for a lifetime of work.",
                         "In {y} the {v} was given to {S} in recognition of long service."],
      [("which", "Which award did {R} receive in {y}?", "v"),
       ("what", "What prize was given to {R} in {y}?", "v"),
       ("when", "When did {R} receive the {v}?", "y")]),
    F("v:years o:org", ["{S} spent {v} at the {o} before retiring to the countryside.",
                        "Before retiring, {S} worked for {v} at the {o}."],
      [("how", "How long did {R} spend at the {o}?", "v"),
       ("which", "Which organisation did {R} work at for {v}?", "o")]),
    F("v:person y:year", ["In {y}, {S} married {v}, a teacher met during a summer school.",
                          "{S} and {v} were married in {y} in a small chapel."],
      [("who", "Who did {R} marry in {y}?", "v"), ("when", "When did {R} marry {v}?", "y")]),
    F("v:place d:deathdate", ["{S} died in {v} on {d} after a short illness.",
                         "After a short illness, {S} died on {d} in {v}."],
      [("where", "Where did {R} die?", "v"), ("when", "When did {R} die?", "d")]),
    F("v:count", ["{S} is credited with {v} published works, most of them written at night.",
                  "A complete list of the writings of {S} runs to {v} published works."],
      [("how", "How many published works is {R} credited with?", "v"),
       ("what", "What is the number of published works by {R}?", "v")]),
    F("v:org y:year", ["In {y}, {S} helped to found the {v} together with a group of friends.",
                       "{S} was among the founders of the {v} in {y}."],
      [("which", "Which organisation did {R} help to found?", "v"),
       ("when", "When did {R} help to found the {v}?", "y")]),
)
ORG_FACTS = (
    F("v:foundyear f:person", ["The {ks} was founded in {v} by {f} with a handful of partners.",
                          "{f} founded the {ks} in {v} after returning from abroad."],
      [("when", "When was {R} founded?", "v"), ("who", "Who founded {R}?", "f")]),
    F("v:place y:year", ["In {y}, the {ks} moved its headquarters to {v}.",
                         "The headquarters of the {ks} were transferred to {v} in {y}."],
      [("where", "Where did {R} move its headquarters in {y}?", "v"),
       ("which", "Which town became the headquarters of {R} in {y}?", "v"),
       ("when", "When did {R} move its headquarters to {v}?", "y")]),
    F("v:bigcount y:year", ["By {y}, the {ks} had {v} {members} on its books.",
                            "In {y} the {ks} counted {v} {members}."],
      [("how", "How many {members} did {R} have in {y}?", "v"),
       ("what", "What was the number of {members} of {R} in {y}?", "v")]),
    F("v:person y:year", ["{v} served as {role} of the {ks} from {y} onwards.",
                          "In {y}, {v} was appointed {role} of the {ks}."],
      [("who", "Who was appointed {role} of {R} in {y}?", "v"),
       ("when", "When did {v} become {role} of {R}?", "y")]),
    F("v:known_for", ["Over the years the {ks} became known for {v}.",
                      "Visitors often remarked on {v}, for which the {ks} was known."],
      [("what", "What is {R} known for?", "v")]),
    F("v:org y:year", ["In {y}, the {ks} merged with the {v}.",
                       "A merger with the {v} followed in {y}, after long talks."],
      [("which", "Which organisation merged with {R} in {y}?", "v"),
       ("when", "When did {R} merge with the {v}?", "y")]),
    F("v:finance", ["In its first decade the {ks} was financed {v}.",
                    "The early years of the {ks} were financed {v}."],
      [("how", "How was {R} financed in its first decade?", "v")]),
    F("v:street", ["The first building of the {ks} stood on {v}, close to the old market.",
                   "The {ks} began in a rented building on {v}."],
      [("where", "Where did the first building of {R} stand?", "v"),
       ("what", "What street was the first building of {R} on?", "v")]),
    F("v:award y:year", ["In {y}, the {ks} received the {v} for services to the region.",
                         "The {v} was presented to the {ks} in {y}."],
      [("which", "Which honour did {R} receive in {y}?", "v"),
       ("when", "When did {R} receive the {v}?", "y")]),
    F("v:year", ["A fire in {v} destroyed much of the archive of the {ks}.",
                 "Much of the archive of the {ks} was lost in a fire in {v}."],
      [("when", "When did a fire destroy the archive of {R}?", "v")]),
    F("v:weeks y:year", ["A strike in {y} halted the work of the {ks} for {v}.",
                         "During the strike of {y}, the {ks} stood still for {v}."],
      [("how", "How long did the strike of {y} halt the work of {R}?", "v")]),
)
PLACE_FACTS = (
    F("v:bigcount y:year", ["The census of {y} counted {v} inhabitants in {S}.",
                            "In {y} the population of {S} stood at {v}."],
      [("how", "How many inhabitants did {R} have in {y}?", "v"),
       ("what", "What was the population of {R} in {y}?", "v")]),
    F("v:river", ["{S} lies on the banks of the {v}, which often floods in spring.",
                  "The {v} flows through {S} on its way to the sea."],
      [("which", "Which river flows through {R}?", "v")]),
    F("v:foundyear c:place", ["{S} was founded in {v} by monks from {c}.",
                         "Monks from {c} founded {S} in {v} beside an old ford."],
      [("when", "When was {R} founded?", "v"),
       ("where", "Where did the monks who founded {R} come from?", "c")]),
    F("v:industry", ["For centuries the economy of {S} was based on {v}.",
                     "The wealth of {S} came mainly from {v}."],
      [("what", "What was the economy of {R} based on?", "v")]),
    F("v:person y:year", ["{v} was elected mayor of {S} in {y} by a narrow margin.",
                          "In {y}, the voters of {S} chose {v} as mayor."],
      [("who", "Who was elected mayor of {R} in {y}?", "v"),
       ("when", "When was {v} elected mayor of {R}?", "y")]),
    F("v:place", ["{S} has been twinned with the town of {v} since the war.",
                  "A twinning agreement links {S} with the town of {v}."],
      [("which", "Which town is twinned with {R}?", "v")]),
    F("v:access", ["Most visitors reach {S} {v}.",
                   "Travellers usually arrive in {S} {v}."],
      [("how", "How do most visitors reach {R}?", "v")]),
    F("v:landmark", ["The {v} is the oldest surviving building in {S}.",
                     "The oldest building in {S} is the {v}, restored after the war."],
      [("what", "What is the oldest building in {R}?", "v")]),
    F("v:km", ["{S} is located {v} from the regional capital.",
               "The regional capital lies {v} away from {S}."],
      [("how", "How far is {R} from the regional capital?", "v")]),
    F("v:year", ["A great flood struck {S} in {v} and destroyed the lower town.",
                 "In {v} a great flood swept through the lower town of {S}."],
      [("when", "When did a great flood strike {R}?", "v")]),
    F("v:person", ["The painter {v} lived in {S} for many years and painted its harbour.",
                   "Among the famous residents of {S} was the painter {v}."],
      [("who", "Who was the painter that lived in {R} for many years?", "v")]),
    F("v:org", ["The largest employer in {S} is the {v}.",
                "Most people in {S} work for the {v}, the largest employer."],
      [("which", "Which organisation is the largest employer in {R}?", "v")]),
)
EVENT_FACTS = (
    F("v:person c:place", ["The main prize went to {v} of {c}.",
                           "{v} of {c} took the main prize."],
      [("who", "Who won the main prize at {R}?", "v"),
       ("where", "Where was the winner of the main prize at {R} from?", "c")]),
    F("v:eventdate n:days", ["The {ks} opened on {v} after a delay of {n}.",
                             "After a delay of {n}, the {ks} finally opened on {v}."],
      [("when", "When did {R} open?", "v"),
       ("how", "How long was the opening of {R} delayed?", "n")]),
    F("v:venue", ["Most events took place at the {v}.",
                  "The {v} hosted most of the events."],
      [("where", "Where did most events of {R} take place?", "v")]),
    F("v:bigcount", ["Organisers reported {v} visitors over the whole week.",
                     "The organisers counted {v} visitors in total."],
      [("how", "How many visitors did {R} attract?", "v"),
       ("what", "What was the total number of visitors at {R}?", "v")]),
    F("v:org", ["The {ks} was organised by the {v}.",
                "The {v} organised the {ks} with help from volunteers."],
      [("which", "Which organisation organised {R}?", "v")]),
    F("v:person", ["{v} acted as patron of the {ks}.",
                   "The patron of the {ks} was {v}."],
      [("who", "Who was the patron of {R}?", "v")]),
    F("v:selection", ["Participants were selected {v}.",
                      "Entrants to the {ks} were chosen {v}."],
      [("how", "How were participants selected for {R}?", "v")]),
    F("v:theme", ["The official theme of the {ks} was {v}.",
                  "The {ks} took {v} as its official theme."],
      [("what", "What was the official theme of {R}?", "v")]),
    F("v:ensemble", ["The opening ceremony featured the {v}.",
                     "The {v} performed at the opening ceremony."],
      [("which", "Which ensemble performed at the opening ceremony of {R}?", "v")]),
    F("v:money", ["The winner received a prize of {v}.",
                  "A prize of {v} was paid to the winner."],
      [("how", "How much prize money did the winner of {R} receive?", "v")]),
    F("v:year", ["Plans for the {ks} were first announced in {v}.",
                 "The {ks} was first proposed in {v} by a group of merchants."],
      [("when", "When were plans for {R} first announced?", "v")]),
)
WORK_FACTS = (
    F("v:person", ["The {kind} was {created} by {v} over several winters.",
                   "{v} {created_q} the {kind}, the first of a loose series."],
      [("who", "Who {created_q} {R}?", "v")]),
    F("v:place", ["It was first presented in {v} to a small audience.",
                  "The first presentation took place in {v} before a small audience."],
      [("where", "Where was {R} first presented?", "v")]),
    F("v:place", ["The story is set in {v} during a harsh winter.",
                  "The action of the {kind} takes place in {v} over one harsh winter."],
      [("where", "Where is {R} set?", "v"), ("which", "Which town is {R} set in?", "v")]),
    F("v:length", ["In its final form the {kind} runs to {v}.",
                   "The complete {kind} runs to {v}."],
      [("how", "How long is {R}?", "v")]),
    F("v:bigcount", ["Within a decade, {v} {copies} had been sold.",
                     "Sales reached {v} {copies} within a decade."],
      [("how", "How many {copies} of {R} were sold within a decade?", "v")]),
    F("v:award y:year", ["In {y}, the {kind} won the {v}.",
                         "The {kind} received the {v} in {y}."],
      [("which", "Which prize did {R} win in {y}?", "v"),
       ("when", "When did {R} win the {v}?", "y")]),
    F("v:inspiration", ["The {kind} was inspired by {v}.",
                        "According to interviews, the {kind} drew on {v}."],
      [("what", "What inspired {R}?", "v")]),
    F("v:publisher", ["It was released by the {v} after two rejections.",
                "The {v} released it after two other houses had refused."],
      [("which", "Which company released {R}?", "v")]),
    F("v:person", ["{v} provided the artwork for the first edition.",
                   "The artwork of the first edition was made by {v}."],
      [("who", "Who provided the artwork for {R}?", "v")]),
    F("v:months", ["Work on the {kind} took {v} to complete.",
                   "Completing the {kind} took {v} of steady work."],
      [("how", "How long did work on {R} take?", "v")]),
    F("v:praise", ["Critics praised its {v}.",
                   "Reviewers singled out its {v} for praise."],
      [("what", "What did critics praise about {R}?", "v")]),
)
FACTS_BY_TYPE = (PERSON_FACTS, ORG_FACTS, PLACE_FACTS, EVENT_FACTS, WORK_FACTS)

# Intro sentence of a passage (first passage / later passages) and value-free fillers. They keep
# the entity's context in every sibling, never an answer value.
INTROS = (  # per entity type: (first-passage intros, later-passage intros)
    (  # person
        ["{N} was {a_occ} from {region}.",
         "{N} was {a_occ} who worked mostly in {region}."],
        ["{S} remained active as {a_occ} in these years.",
         "This period shaped the work of {N} as {a_occ}.",
         "As {a_occ}, {N} kept close ties to {region}."],
    ),
    (  # organisation
        ["The {title0} is {a_ks} based in {city}.",
         "The {title0} was {a_ks} in the town of {city}."],
        ["The {title0} in {city} went through many changes.",
         "The history of the {title0} continued in {city}."],
    ),
    (  # place
        ["{S} is a {pkind} in the {region} region.",
         "{S} is a small {pkind} in {region}."],
        ["{S} remains an important {pkind} of {region}.",
         "Much of the history of {S} is tied to {region}."],
    ),
    (  # event
        ["The {title0} was {a_kdesc} held in {city} in {year}.",
         "The {title0} took place in {city} in {year}."],
        ["The {title0} is still remembered in {city}.",
         "Reports on the {title0} appeared in many papers."],
    ),
    (  # work
        ["{name} is a {year} {kind}.",
         "{name} is a {kind} first released in {year}."],
        ["{name} remains the best known {kind} of {year}.",
         "The {year} {kind} {name} has been reissued several times."],
    ),
)
FILLERS = (  # per entity type
    # person
    ["{S} was widely respected among fellow {occ}s.",
     "Several letters written by {S} survive in a private archive.",
     "Contemporaries described {S} as patient and methodical.",
     "Few photographs of {S} have survived.",
     "Later biographers disagreed about the motives of {S}.",
     "The papers of {S} were catalogued only recently.",
     "Friends remembered {S} as a generous host.",
     "{S} rarely gave interviews and avoided public dinners.",
     "A short biography of {S} appeared after the war.",
     "{S} kept a detailed diary for most of these years."],
    # organisation
    ["The {ks} kept detailed minutes of its meetings.",
     "Local newspapers followed the fortunes of the {ks} closely.",
     "The {ks} has been the subject of a short history.",
     "Former staff often spoke warmly of the {ks}.",
     "The records of the {ks} are kept in the town archive.",
     "The {ks} faced several difficult years.",
     "Rival firms watched the growth of the {ks} with concern.",
     "The {ks} published an annual report."],
    # place
    ["{S} has a small museum of local history.",
     "The old streets of {S} are popular with walkers.",
     "Local historians have written much about {S}.",
     "{S} holds a market every week.",
     "Several old houses in {S} are protected monuments.",
     "The surroundings of {S} are mostly farmland.",
     "{S} has a small railway station.",
     "The parish church of {S} dominates the skyline."],
    # event
    ["Local newspapers reported on the {ks} at length.",
     "The {ks} attracted visitors from many towns.",
     "Volunteers from the area helped to run the {ks}.",
     "Photographs of the {ks} are kept in the town archive.",
     "The weather during the {ks} was mostly fair.",
     "Several foreign guests attended the {ks}.",
     "The {ks} was covered in a short newsreel.",
     "Hotels in the area were fully booked during the {ks}."],
    # work
    ["The {kind} received mixed reviews at first.",
     "Scholars have written several studies of the {kind}.",
     "The {kind} is often compared with later works of the period.",
     "Copies of the first edition are now rare.",
     "The {kind} was translated into several languages.",
     "A restored version of the {kind} appeared later.",
     "The {kind} divided audiences for many years.",
     "Schools sometimes use the {kind} in their lessons."],
)
PLACE_KINDS = ("town", "village", "market town", "port town", "river town")


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
        f.update(title0=name, ks=ks, a_ks=_a(ks), members=members, role=role, city=city, S=f"the {ks}",
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
        f.update(name=name, kind=kind, created=created, created_q=created_q, unit=unit, copies=copies,
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


# ---------------------------------------------------------------------------------------------
# Validation with the project's DPR matching and sentence splitting.
# ---------------------------------------------------------------------------------------------
class _Validator:
    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self._sents: dict[int, list[tuple[int, int]]] = {}

    def sents(self, i: int) -> list[tuple[int, int]]:
        if i not in self._sents:
            self._sents[i] = sentences_lib.split_sentences(self.texts[i])
        return self._sents[i]

    def check(self, c: _Candidate) -> str | None:
        """None if valid, else the drop reason."""
        if answers_lib.question_type(c.question) != c.qtype:
            return "question_type_mismatch"
        text = self.texts[c.passage]
        if not answers_lib.has_answer([c.answer], text):
            return "positive_lacks_answer"
        spans = answers_lib.find_answer_spans(text, [c.answer])
        if not spans:
            return "positive_lacks_answer"
        sents = self.sents(c.passage)
        hit = set()
        for s, t in spans:
            inside = [k for k, (a, b) in enumerate(sents) if a <= s and t <= b]
            if not inside:
                return "answer_crosses_sentences"
            hit.add(inside[0])
        if len(hit) != 1:
            return "answer_in_several_sentences"
        for j in c.entity_passages:
            if j != c.passage and answers_lib.has_answer([c.answer], self.texts[j]):
                return "answer_in_sibling"
        return None


# ---------------------------------------------------------------------------------------------
# Chunk worker: entities -> passages -> validated, type-balanced questions with split labels.
# ---------------------------------------------------------------------------------------------
def _chunk_seed(seed: int, chunk: int) -> int:
    return int(np.random.SeedSequence([seed, 1, chunk]).generate_state(1, dtype=np.uint64)[0])


def _generate_chunk(task: dict[str, Any]) -> dict[str, Any]:
    with sentences_lib.large_re_cache():
        return _generate_chunk_impl(task)


def _generate_chunk_impl(task: dict[str, Any]) -> dict[str, Any]:
    rng = random.Random(_chunk_seed(task["seed"], task["chunk"]))
    titles: list[str] = []
    texts: list[str] = []
    ents: list[int] = []
    cands: list[_Candidate] = []
    for k, (etype, key, n_pass) in enumerate(zip(task["types"], task["keys"], task["counts"])):
        title, ptexts, pc = _make_entity(rng, int(etype), int(key), int(n_pass), len(texts))
        titles.extend([title] * len(ptexts))
        texts.extend(ptexts)
        ents.extend([k] * len(ptexts))
        cands.extend(pc)

    buckets: dict[str, list[_Candidate]] = {t: [] for t in QTYPES}
    for c in cands:
        buckets[c.qtype].append(c)
    for t in QTYPES:
        rng.shuffle(buckets[t])
    quota = dict(zip(SPLITS, task["quota"]))
    need = sum(quota.values())
    validator = _Validator(texts)
    dropped: Counter[str] = Counter()
    seen: set[str] = set()
    chosen: list[_Candidate] = []
    qpp = int(task.get("questions_per_passage", 1))
    if qpp > 1:
        # Groups come in random order and stay contiguous, so a passage's questions share a
        # split (only the groups at the test/dev/train boundaries are cut).
        groups = _select_grouped(rng, cands, need, qpp, validator, dropped, seen)
        chosen = [c for g in groups for c in g]
    order = list(QTYPES)
    rng.shuffle(order)  # drawn in both modes: the RNG stream (hence the output) stays as it was
    if qpp == 1:
        # Round-robin over question types keeps the six types balanced (docs/method.md §5 break-downs).
        while len(chosen) < need and any(buckets.values()):
            for t in order:
                if len(chosen) >= need:
                    break
                if not buckets[t]:
                    continue
                c = buckets[t].pop()
                if _accept(c, validator, dropped, seen):
                    chosen.append(c)
        rng.shuffle(chosen)
    # Shortfalls (not expected) hit train first so dev/test keep their sizes.
    labels: list[str] = []
    for s in ("test", "dev", "train"):
        labels.extend([s] * quota[s])
    labels = labels[:len(chosen)]
    questions = [(lab, c.qtype, c.question, c.answer, c.passage) for lab, c in zip(labels, chosen)]
    return {"titles": titles, "texts": texts, "entities": ents, "questions": questions,
            "dropped": dict(dropped), "shortfall": need - len(chosen),
            "validated": sum(dropped.values()) + len(chosen)}


def _accept(c: _Candidate, validator: _Validator, dropped: Counter[str], seen: set[str]) -> bool:
    """True (and ``c.question`` marked seen) if ``c`` is new and validates; else count why not."""
    if c.question in seen:
        dropped["duplicate_question"] += 1
        return False
    reason = validator.check(c)
    if reason:
        dropped[reason] += 1
        return False
    seen.add(c.question)
    return True


def _select_grouped(rng: random.Random, cands: list[_Candidate], need: int, k: int,
                    validator: _Validator, dropped: Counter[str], seen: set[str]
                    ) -> list[list[_Candidate]]:
    """Many questions per passage (``questions_per_passage = k > 1``): SQuAD-like positives.

    Passages are visited in random order; each gets questions on up to ``k`` DIFFERENT fact
    sentences (one question per fact; among a fact's templates the wh-type used least so far
    wins, which keeps the six types roughly balanced). Every question passes the same
    validation as the default mode (answer in exactly one sentence, siblings lack it), so the
    questions of one passage are answered by different sentences of it -- the "contrastive
    conflicts" setting of DCSR (docs/method.md §4). Returns the groups (one per passage) in visit order.
    """
    by_passage: dict[int, dict[int, list[_Candidate]]] = {}
    for c in cands:
        by_passage.setdefault(c.passage, {}).setdefault(c.fact, []).append(c)
    order = sorted(by_passage)
    rng.shuffle(order)
    used: Counter[str] = Counter()
    groups: list[list[_Candidate]] = []
    total = 0
    for p in order:
        if total >= need:
            break
        facts = [by_passage[p][f] for f in sorted(by_passage[p])]
        rng.shuffle(facts)
        group: list[_Candidate] = []
        for opts in facts:
            if len(group) >= k or total + len(group) >= need:
                break
            opts = list(opts)
            rng.shuffle(opts)
            opts.sort(key=lambda c: used[c.qtype])  # stable: random among equally used types
            for c in opts:
                if _accept(c, validator, dropped, seen):
                    used[c.qtype] += 1
                    group.append(c)
                    break
        if group:
            groups.append(group)
            total += len(group)
    return groups


# ---------------------------------------------------------------------------------------------
# Plan, BM25 mining, writing.
# ---------------------------------------------------------------------------------------------
def _type_probs(entity_types: Sequence[str] | None) -> tuple[float, ...]:
    """TYPE_PROBS restricted to ``entity_types`` (renormalised); None = all types."""
    if entity_types is None:
        return TYPE_PROBS
    unknown = sorted(set(entity_types) - set(TYPE_NAMES))
    if unknown or not entity_types:
        raise ValueError(f"entity_types must be a non-empty subset of {TYPE_NAMES}, got "
                         f"{list(entity_types)}")
    keep = [TYPE_PROBS[t] if TYPE_NAMES[t] in entity_types else 0.0 for t in range(len(TYPE_NAMES))]
    total = sum(keep)
    return tuple(x / total for x in keep)


def _plan(num_passages: int, seed: int, entity_types: Sequence[str] | None = None
          ) -> dict[str, np.ndarray]:
    """Entity types, unique keys and passage counts (3-5, exact total ``num_passages``)."""
    if num_passages < 3:
        raise ValueError("num_passages must be at least 3")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0]))
    counts = rng.integers(3, 6, size=num_passages // 3 + 2)
    cum = np.cumsum(counts)
    n_ent = int(np.searchsorted(cum, num_passages) + 1)
    counts = counts[:n_ent].copy()
    counts[-1] -= int(cum[n_ent - 1] - num_passages)
    if counts[-1] < 3 and n_ent > 1:  # no single-passage entity: siblings must exist
        counts[-2] += counts[-1]
        counts = counts[:-1]
        n_ent -= 1
    types = rng.choice(len(TYPE_NAMES), size=n_ent, p=_type_probs(entity_types))
    keys = np.zeros(n_ent, dtype=np.int64)
    for t in range(len(TYPE_NAMES)):
        sel = np.flatnonzero(types == t)
        keys[sel] = _type_keys(len(sel), t, seed)
    return {"types": types, "keys": keys, "counts": counts}


def _split_quota(total: int, cum_prev: int, cum: int, n: int) -> int:
    return total * cum // n - total * cum_prev // n


def _ctx(title: str, text: str, pid: int, score: float, title_score: int) -> dict[str, Any]:
    return {"title": title, "text": text, "score": score, "title_score": title_score,
            "passage_id": str(pid + 1)}


def _mine_hard_negatives(titles: list[str], texts: list[str], questions: list[_Question],
                         k: int, num_hard: int, threads: int) -> list[list[tuple[int, float]]]:
    """Top BM25 passages (bm25s, title + text) lacking the answer, excluding the positive."""
    import bm25s  # lazy: heavy import (pulls in JAX), only needed here

    corpus_tokens = bm25s.tokenize([f"{t} {x}" for t, x in zip(titles, texts)], stopwords="en",
                                   show_progress=False)
    retriever = bm25s.BM25()
    retriever.index(corpus_tokens, show_progress=False)
    del corpus_tokens
    k = min(k, len(texts))
    out: list[list[tuple[int, float]]] = []
    block = 4096
    t0 = time.time()
    for b in range(0, len(questions), block):
        qs = questions[b:b + block]
        q_tokens = bm25s.tokenize([q.question for q in qs], stopwords="en", return_ids=False,
                                  show_progress=False)
        # "auto" = bm25s's JAX top-k when JAX is installed (it is here): numpy's argpartition
        # is ~35x slower on the mostly-zero score vector of a 1M-passage corpus.
        docs, scores = retriever.retrieve(q_tokens, k=k, show_progress=False, n_threads=threads,
                                          backend_selection="auto")
        for q, drow, srow in zip(qs, docs, scores):
            answer, pos = [q.answer], q.passage
            hard: list[tuple[int, float]] = []
            for d, s in zip(drow.tolist(), srow.tolist()):
                if d == pos or s <= 0.0:
                    continue
                if answers_lib.has_answer(answer, texts[d]):
                    continue
                hard.append((d, round(float(s), 4)))
                if len(hard) >= num_hard:
                    break
            out.append(hard)
        log.info("bm25 mined %d/%d questions (%.1f q/s)", b + len(qs), len(questions),
                 (b + len(qs)) / max(time.time() - t0, 1e-9))
    return out


def _bm25s_info() -> dict[str, str]:
    """bm25s version and top-k backend: tie order among equal BM25 scores depends on them."""
    import bm25s
    from bm25s import selection

    return {"version": str(getattr(bm25s, "__version__", "unknown")),
            "topk_backend": "jax" if getattr(selection, "JAX_IS_AVAILABLE", False) else "numpy"}


def _random_negatives(rng: np.random.Generator, n: int, texts: list[str], entity: np.ndarray,
                      pos: int, answer: str) -> list[int]:
    """``n`` random passages from other entities that do not contain the answer."""
    out: list[int] = []
    tries = 0
    while len(out) < n and tries < 20 * n + 20:
        tries += 1
        j = int(rng.integers(len(texts)))
        if entity[j] == entity[pos] or j in out or answers_lib.has_answer([answer], texts[j]):
            continue
        out.append(j)
    return out


def _question_tokens(q: str) -> str:
    # NQ gold info stores the lower-cased tokenised question; DPR keys gold passages by it.
    return " ".join(t[0] for t in answers_lib.dpr_tokenize(q.lower()))


def generate(out_dir: str | os.PathLike, num_passages: int, seed: int = 0, *,
             train_per_passage: float = 0.5, dev_frac: float = 0.1, test_questions: int | None = None,
             num_hard_negatives: int = 3, num_negatives: int = 2, bm25_top_k: int = 20,
             max_mined: int | None = None, workers: int | None = None,
             entity_types: Sequence[str] | None = None,
             questions_per_passage: int = 1) -> dict[str, Any]:
    """Write the benchmark into ``out_dir``; return {"paths", "counts", "timing"}.

    ``entity_types`` (subset of TYPE_NAMES; None = all) restricts the world to those entity
    types -- and so to their fact sentences and question templates: one *domain* of
    :func:`generate_domains`. ``questions_per_passage`` k > 1 asks questions on up to k
    different fact sentences of each selected positive passage (see :func:`_select_grouped`),
    so one passage is the positive of several questions; k = 1 (default) is the original
    selection: type-balanced draws from all candidates, where a passage is the positive of a
    second question only by chance. Non-default values are recorded in meta.json params;
    default arguments give byte-identical files to earlier versions.

    Sizes: train = round(train_per_passage * num_passages) questions, dev = round(dev_frac * train),
    test = ``test_questions`` (default round(0.1 * train)). ``max_mined`` caps the number of
    questions per split that get BM25 hard negatives (None: all). ``workers`` defaults to the
    CPU count; the output does not depend on it.
    """
    if seed < 0:
        raise ValueError("seed must be non-negative")
    if questions_per_passage < 1:
        raise ValueError(f"questions_per_passage must be >= 1, got {questions_per_passage}")
    if min(train_per_passage, dev_frac, num_hard_negatives, num_negatives) < 0 or \
            (test_questions is not None and test_questions < 0):
        raise ValueError("sizes must be non-negative")
    t_start = time.time()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n_train = int(round(train_per_passage * num_passages))
    n_dev = int(round(dev_frac * n_train))
    n_test = int(round(0.1 * n_train)) if test_questions is None else int(test_questions)
    totals = {"train": n_train, "dev": n_dev, "test": n_test}

    plan = _plan(num_passages, seed, entity_types)
    cum_counts = np.concatenate([[0], np.cumsum(plan["counts"])])
    n_ent = len(plan["counts"])
    tasks = []
    for c, lo in enumerate(range(0, n_ent, CHUNK_ENTITIES)):
        hi = min(lo + CHUNK_ENTITIES, n_ent)
        p0, p1 = int(cum_counts[lo]), int(cum_counts[hi])
        tasks.append({"seed": seed, "chunk": c,
                      "types": plan["types"][lo:hi], "keys": plan["keys"][lo:hi],
                      "counts": plan["counts"][lo:hi], "pass_offset": p0, "ent_offset": lo,
                      "quota": [_split_quota(totals[s], p0, p1, num_passages) for s in SPLITS],
                      "questions_per_passage": questions_per_passage})

    titles: list[str] = []
    texts: list[str] = []
    entity = np.zeros(num_passages, dtype=np.int32)
    qs: dict[str, list[_Question]] = {s: [] for s in SPLITS}
    dropped: Counter[str] = Counter()
    seen_questions: set[str] = set()
    shortfall = validated = 0
    workers = workers or os.cpu_count() or 1
    workers = max(1, min(workers, len(tasks)))

    def consume(results: Iterable[dict[str, Any]]) -> None:
        nonlocal shortfall, validated
        for task, res in zip(tasks, results):
            off = task["pass_offset"]
            assert off == len(texts)
            titles.extend(res["titles"])
            texts.extend(res["texts"])
            ents = np.asarray(res["entities"], dtype=np.int32) + task["ent_offset"]
            entity[off:off + len(ents)] = ents
            for lab, qtype, q, a, p in res["questions"]:
                # Unique by construction (entity references are unique keys); enforced anyway.
                if q in seen_questions:
                    dropped["duplicate_question"] += 1
                    continue
                seen_questions.add(q)
                qs[lab].append(_Question(qtype, q, a, p + off))
            dropped.update(res["dropped"])
            shortfall += res["shortfall"]
            validated += res["validated"]
            log.info("generated %d/%d passages", len(texts), num_passages)

    if workers == 1:
        consume(map(_generate_chunk, tasks))
    else:

        # spawn, not fork: the caller may hold JAX/TF threads, which fork can deadlock.
        with mp.get_context("spawn").Pool(workers) as pool:
            consume(pool.imap(_generate_chunk, tasks, chunksize=1))
    t_gen = time.time()

    rng = np.random.default_rng(np.random.SeedSequence([seed, 2]))
    for s in SPLITS:  # global shuffle: file order must not follow corpus order
        perm = rng.permutation(len(qs[s]))
        qs[s] = [qs[s][i] for i in perm]

    mined = {s: qs[s][: (len(qs[s]) if max_mined is None else max_mined)] for s in ("train", "dev")}
    to_mine = mined["train"] + mined["dev"]
    bm25_info = _bm25s_info() if to_mine and num_hard_negatives > 0 else None
    hard: list[list[tuple[int, float]]] = []
    if to_mine and num_hard_negatives > 0:
        hard = _mine_hard_negatives(titles, texts, to_mine, max(bm25_top_k, num_hard_negatives + 2),
                                    num_hard_negatives, workers)
    t_bm25 = time.time()

    paths = {k: str(out / v) for k, v in FILES.items()}
    formats.write_corpus_tsv(paths["corpus"],
                             ((str(i + 1), texts[i], titles[i]) for i in range(len(texts))))
    hard_stats = {"mined_questions": len(to_mine), "hard_negatives": sum(len(h) for h in hard),
                  "mined_without_hard_negative": sum(not h for h in hard)}
    hard_by_split = {"train": hard[:len(mined["train"])], "dev": hard[len(mined["train"]):]}

    def examples(split: str) -> Iterable[dict[str, Any]]:
        for i, (_, q, a, p) in enumerate(qs[split]):
            h = hard_by_split[split][i] if i < len(hard_by_split[split]) else []
            negs = _random_negatives(rng, num_negatives, texts, entity, p, a)
            yield {
                "question": q, "answers": [a],
                "positive_ctxs": [_ctx(titles[p], texts[p], p, 1000.0, 1)],
                "negative_ctxs": [_ctx(titles[j], texts[j], j, 0.0, 0) for j in negs],
                "hard_negative_ctxs": [_ctx(titles[j], texts[j], j, sc, 0) for j, sc in h],
            }

    for s in ("train", "dev"):  # streamed: 1M-passage files do not fit comfortably as lists
        formats.write_biencoder(paths[s], examples(s))
    formats.write_qa_csv(paths["test_qa"], [(q.question, [q.answer]) for q in qs["test"]])
    for s in SPLITS:
        formats.write_gold_info(paths[f"{s}_gold"], [
            {"question": q, "question_tokens": _question_tokens(q), "title": titles[p],
             "context": texts[p], "example_id": i} for i, (_, q, _, p) in enumerate(qs[s])])

    counts = {
        "passages": len(texts), "entities": n_ent,
        "entity_types": {TYPE_NAMES[t]: int((plan["types"] == t).sum()) for t in range(len(TYPE_NAMES))},
        "questions": {s: len(qs[s]) for s in SPLITS},
        "question_types": {s: dict(sorted(Counter(q.qtype for q in qs[s]).items())) for s in SPLITS},
        "candidates_validated": validated, "dropped": dict(sorted(dropped.items())),
        "dropped_total": sum(dropped.values()), "shortfall": shortfall,
        "negatives_per_question": num_negatives, **hard_stats,
        "mean_passage_words": round(float(np.mean([_words(t) for t in texts])), 2),
    }
    if questions_per_passage != 1:
        counts["questions_per_positive"] = {
            s: dict(sorted(Counter(Counter(q.passage for q in qs[s]).values()).items()))
            for s in SPLITS}
    meta = {
        "generator": "dense_cf.synthetic.generate", "version": GENERATOR_VERSION, "seed": seed,
        "params": {"num_passages": num_passages, "train_per_passage": train_per_passage,
                   "dev_frac": dev_frac, "test_questions": n_test,
                   "num_hard_negatives": num_hard_negatives,
                   "num_negatives": num_negatives, "bm25_top_k": bm25_top_k, "max_mined": max_mined,
                   "name_share": NAME_SHARE, "chunk_entities": CHUNK_ENTITIES,
                   # only when set: default meta.json stays byte-identical to older versions
                   **({"entity_types": sorted(entity_types, key=TYPE_NAMES.index)}
                      if entity_types is not None else {}),
                   **({"questions_per_passage": questions_per_passage}
                      if questions_per_passage != 1 else {})},
        "bm25s": bm25_info,
        "counts": counts, "files": {k: v for k, v in FILES.items() if k != "meta"},
    }
    Path(paths["meta"]).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    t_end = time.time()
    timing = {"generate_s": round(t_gen - t_start, 2), "bm25_s": round(t_bm25 - t_gen, 2),
              "write_s": round(t_end - t_bm25, 2), "total_s": round(t_end - t_start, 2)}
    log.info("synthetic benchmark written to %s: %s; timing %s", out, counts["questions"], timing)
    return {"paths": paths, "counts": counts, "timing": timing}


def template_groups() -> list[tuple[str, ...]]:
    """Entity types grouped so that no fact statement or question template crosses groups.

    A few generic templates are shared between types ("When was {R} founded?" by
    organisations and places, "When did {R} receive the {v}?" by people and organisations),
    so the finest domain split with disjoint templates is the connected components of the
    "shares a template" relation: (person, organisation, place), (event,), (work,).
    """
    owner: dict[str, set[int]] = {}
    for t, facts in enumerate(FACTS_BY_TYPE):
        for f in facts:
            for tmpl in list(f.statements) + [q[1] for q in f.questions]:
                owner.setdefault(tmpl, set()).add(t)
    parent = list(range(len(TYPE_NAMES)))

    def find(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    for ts in owner.values():
        ts = sorted(ts)
        for t in ts[1:]:
            parent[find(t)] = find(ts[0])
    comps: dict[int, list[int]] = {}
    for t in range(len(TYPE_NAMES)):
        comps.setdefault(find(t), []).append(t)
    return [tuple(TYPE_NAMES[t] for t in c) for c in sorted(comps.values())]


def domain_types(num_domains: int) -> list[tuple[str, ...]]:
    """``num_domains`` disjoint entity-type groups with disjoint templates (see template_groups).

    Fewer domains than template groups merge the smallest groups (by TYPE_PROBS mass).
    """
    groups = template_groups()
    if not 1 <= num_domains <= len(groups):
        raise ValueError(f"num_domains must be in [1, {len(groups)}]: the synthetic world has "
                         f"{len(groups)} template-disjoint entity-type groups {groups}")
    groups = [list(g) for g in groups]
    mass = lambda g: sum(TYPE_PROBS[TYPE_NAMES.index(t)] for t in g)  # noqa: E731
    while len(groups) > num_domains:
        groups.sort(key=mass)
        groups = [groups[0] + groups[1]] + groups[2:]
        groups.sort(key=lambda g: TYPE_NAMES.index(g[0]))
    return [tuple(sorted(g, key=TYPE_NAMES.index)) for g in groups]


def domain_name(types: Sequence[str]) -> str:
    return "+".join(types)


def generate_domains(out_dir: str | os.PathLike, num_domains: int, num_passages: int,
                     seed: int = 0, **kwargs: Any) -> dict[str, dict[str, Any]]:
    """One benchmark per domain in ``out_dir/<domain name>/`` (DPR layout, own corpus).

    Domains are disjoint entity-type groups (:func:`domain_types`): different entities,
    passage styles, facts and question templates, so each trains a separate model and the
    cross-pairing of their encoders (docs/method.md §7) measures out-of-domain transfer. Each domain has
    ``num_passages`` passages and uses the same ``seed``; kwargs go to :func:`generate`.
    """
    out: dict[str, dict[str, Any]] = {}
    for types in domain_types(num_domains):
        name = domain_name(types)
        out[name] = generate(Path(out_dir) / name, num_passages, seed, entity_types=types, **kwargs)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--num_passages", type=int, default=10000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train_per_passage", type=float, default=0.5, help="train questions per passage")
    p.add_argument("--dev_frac", type=float, default=0.1, help="dev questions as a fraction of train")
    p.add_argument("--test_questions", type=int, default=None, help="default: 10%% of train")
    p.add_argument("--num_hard_negatives", type=int, default=3)
    p.add_argument("--num_negatives", type=int, default=2)
    p.add_argument("--bm25_top_k", type=int, default=20)
    p.add_argument("--max_mined", type=int, default=None, help="max BM25-mined questions per split")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--questions_per_passage", type=int, default=1,
                   help="k > 1: questions on up to k different sentences of each positive")
    p.add_argument("--entity_types", default="",
                   help=f"comma-separated subset of {','.join(TYPE_NAMES)} (default: all)")
    p.add_argument("--domains", type=int, default=0,
                   help="N > 0: write N template-disjoint domains into OUT/<domain>/")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    kw = dict(train_per_passage=a.train_per_passage, dev_frac=a.dev_frac,
              test_questions=a.test_questions, num_hard_negatives=a.num_hard_negatives,
              num_negatives=a.num_negatives, bm25_top_k=a.bm25_top_k, max_mined=a.max_mined,
              workers=a.workers, questions_per_passage=a.questions_per_passage)
    if a.domains:
        if a.entity_types:
            p.error("--domains and --entity_types are exclusive")
        res_d = generate_domains(a.out, a.domains, a.num_passages, a.seed, **kw)
        print(json.dumps({d: {"counts": r["counts"], "timing": r["timing"]}
                          for d, r in res_d.items()}, indent=2))
        return
    types = tuple(t.strip() for t in a.entity_types.split(",") if t.strip()) or None
    res = generate(a.out, a.num_passages, a.seed, entity_types=types, **kw)
    print(json.dumps({"counts": res["counts"], "timing": res["timing"]}, indent=2))


if __name__ == "__main__":
    main()
