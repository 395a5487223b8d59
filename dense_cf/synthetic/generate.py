"""Synthetic answer-aware QA benchmark in DPR's file formats (docs/method.md §2, §5, §6, §8).

``python -m dense_cf.cli.synthetic --out DIR --num_passages N --seed S`` (or :func:`generate`)
writes into DIR:

* ``psgs_synth.tsv``                corpus (``id\\ttext\\ttitle``, ids "1".."N");
* ``biencoder-synth-{train,dev}.json`` DPR bi-encoder examples: gold positive, random
  ``negative_ctxs`` and BM25 ``hard_negative_ctxs`` (:mod:`dense_cf.index.bm25` over the
  whole corpus with bm25s' k1 = 1.5, b = 0.75 and ``bm25s.tokenize``; query = question,
  title + text indexed like DPR's BM25; passages with ``has_answer`` true and the positive
  are skipped);
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
* ``world="mixed"`` (``--world mixed``): SQuAD-like paragraphs. Entities, facts and questions
  are drawn as above, but every fact sentence names its entity and the fact sentences of a
  chunk's entities are dealt out so that a passage holds its title entity's intro plus 2-3
  facts about OTHER, mutually different entities: the non-answer sentences of a positive are
  about other subjects (DCSR's in-passage negatives, docs/dcsr.md). Same validation, with
  every passage that mentions the question's entity as a "sibling".
* ``hard_negatives="other_entity"`` (``--hard_negatives other_entity``): BM25 hard negatives
  from OTHER entities only (as NQ's mostly are): the gold entity's siblings, which are
  counterfactuals of the positive already, are skipped; see :func:`_mine_hard_negatives`.
* ``hard_negatives="random"``: no BM25 mining; each record's ``hard_negative_ctxs`` are its
  random negatives (``negative_ctxs``), so ``data.num_hard = 1`` trains with in-batch plus one
  random negative (PiCL §5.3, footnote 3; issue 50).
* ``entity_types=(...)`` (``--entity_types``) restricts the world to some entity types;
  :func:`generate_domains` (``--domains N``) writes N domains with disjoint entity types,
  fact sentences and question templates into ``OUT/<domain>/`` (encoder attribution, docs/method.md §7).

Validation (every emitted question, with the project's own ``answers``/``sentences`` code):
``has_answer`` true on the positive, all ``find_answer_spans`` matches inside exactly ONE
``split_sentences`` sentence, no sibling passage ``has_answer``, ``question_type`` equal to
the template's type, question text unique. Failures are dropped and counted in meta.json
(``dropped``); a chunk that runs out of candidates records a ``shortfall``. Values are drawn
token-distinct within an entity, so drops are rare (0 in 600k validated questions at 1M).

Modules: :mod:`.vocab` (name parts, value pools), :mod:`.templates` (facts, questions, intros,
fillers), :mod:`.world` (Feistel keys, entities, values); this one validates, runs the chunk
workers, assigns splits, mines BM25 negatives and writes the files.
CLI: :mod:`dense_cf.cli.synthetic`.

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

import json
import logging
import multiprocessing as mp
import os
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from dense_cf.datasets import formats
from dense_cf.index import bm25
from dense_cf.progress import Progress, timed
from dense_cf.synthetic.templates import FACTS_BY_TYPE
from dense_cf.synthetic.vocab import NAME_SHARE, TYPE_NAMES, TYPE_PROBS
from dense_cf.synthetic.world import (
    HARD_NEGATIVES,
    WORLDS,
    _Candidate,
    _make_entity,
    _make_mixed_chunk,
    _Question,
    _type_keys,
    _words,
)
from dense_cf.text import answers as answers_lib
from dense_cf.text import sentences as sentences_lib

log = logging.getLogger(__name__)

GENERATOR_VERSION = "synth-1.0"
QTYPES = ("how", "what", "when", "where", "which", "who")
SPLITS = ("train", "dev", "test")
_BM25_BLOCK = 4096  # questions per bm25s retrieve call
# other_entity ranks this many more passages: the gold entity's own 3-7 passages (and in the
# mixed world the passages mentioning the question's entity) rank first and are skipped.
_OTHER_ENTITY_EXTRA_K = 16
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
    unplaced = 0
    if task.get("world", "entity") == "mixed":
        titles, texts, ents, cands, unplaced = _make_mixed_chunk(
            rng, task["types"], task["keys"], task["counts"])
    else:
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
    questions = [(lab, c.qtype, c.question, c.answer, c.passage, c.entity_passages)
                 for lab, c in zip(labels, chosen)]
    return {"titles": titles, "texts": texts, "entities": ents, "questions": questions,
            "dropped": dict(dropped), "shortfall": need - len(chosen),
            "validated": sum(dropped.values()) + len(chosen), "unplaced_facts": unplaced}


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
                         k: int, num_hard: int, threads: int, entity: np.ndarray | None = None
                         ) -> list[list[tuple[int, float]]]:
    """Top BM25 passages (title + text) lacking the answer, excluding the positive.

    ``entity`` given (``hard_negatives="other_entity"``): also excluding every passage of the
    positive's title entity and every passage that mentions the question's entity
    (``_Question.siblings``), so the negatives come from other entities, as NQ's do.
    bm25s' own parameters and tokenizer (not mining's Anserini ones): they define the
    benchmark's hard negatives, so changing them needs a new GENERATOR_VERSION.
    """
    out: list[list[tuple[int, float]]] = []
    progress = Progress("synthetic: bm25 hard negatives", len(questions), unit="questions")
    blocks = bm25.search_texts([f"{t} {x}" for t, x in zip(titles, texts)],
                               [q.question for q in questions], k, tokenizer="bm25s",
                               threads=threads, block=_BM25_BLOCK, **bm25.BM25S_DEFAULTS)
    for b, (docs, scores) in zip(range(0, len(questions), _BM25_BLOCK), blocks):
        qs = questions[b:b + _BM25_BLOCK]
        for q, drow, srow in zip(qs, docs, scores):
            answer, pos = [q.answer], q.passage
            skip = {pos} if entity is None else {pos, *q.siblings}
            hard: list[tuple[int, float]] = []
            for d, s in zip(drow.tolist(), srow.tolist()):
                if d in skip or s <= 0.0:
                    continue
                if entity is not None and entity[d] == entity[pos]:
                    continue
                if answers_lib.has_answer(answer, texts[d]):
                    continue
                hard.append((d, round(float(s), 4)))
                if len(hard) >= num_hard:
                    break
            out.append(hard)
        progress.update(len(qs))
    progress.done()
    return out


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


def _check_args(seed: int, questions_per_passage: int, sizes: Sequence[float],
                test_questions: int | None, world: str = "entity",
                hard_negatives: str = "sibling") -> None:
    if world not in WORLDS:
        raise ValueError(f"world must be one of {WORLDS}, got {world!r}")
    if hard_negatives not in HARD_NEGATIVES:
        raise ValueError(f"hard_negatives must be one of {HARD_NEGATIVES}, got {hard_negatives!r}")
    if seed < 0:
        raise ValueError("seed must be non-negative")
    if questions_per_passage < 1:
        raise ValueError(f"questions_per_passage must be >= 1, got {questions_per_passage}")
    if min(sizes) < 0 or (test_questions is not None and test_questions < 0):
        raise ValueError("sizes must be non-negative")


def _split_sizes(num_passages: int, train_per_passage: float, dev_frac: float,
                 test_questions: int | None) -> dict[str, int]:
    """Questions per split (see :func:`generate`)."""
    n_train = int(round(train_per_passage * num_passages))
    n_dev = int(round(dev_frac * n_train))
    n_test = int(round(0.1 * n_train)) if test_questions is None else int(test_questions)
    return {"train": n_train, "dev": n_dev, "test": n_test}


def _chunk_tasks(plan: dict[str, np.ndarray], totals: dict[str, int], num_passages: int,
                 seed: int, questions_per_passage: int, world: str = "entity"
                 ) -> list[dict[str, Any]]:
    """One worker task per CHUNK_ENTITIES entities, with its passage offset and split quotas."""
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
                      "questions_per_passage": questions_per_passage, "world": world})
    return tasks


@dataclass
class _Generated:
    """The corpus and questions assembled from all chunks, in corpus order."""

    titles: list[str]
    texts: list[str]
    entity: np.ndarray  # int32 [num_passages]: entity index of each passage
    qs: dict[str, list[_Question]]
    dropped: Counter[str]
    shortfall: int = 0
    validated: int = 0
    unplaced_facts: int = 0  # world="mixed": fact sentences that fit no passage (left out)

    def add(self, task: dict[str, Any], res: dict[str, Any], seen: set[str]) -> None:
        off = task["pass_offset"]
        assert off == len(self.texts)
        self.titles.extend(res["titles"])
        self.texts.extend(res["texts"])
        ents = np.asarray(res["entities"], dtype=np.int32) + task["ent_offset"]
        self.entity[off:off + len(ents)] = ents
        for lab, qtype, q, a, p, sib in res["questions"]:
            # Unique by construction (entity references are unique keys); enforced anyway.
            if q in seen:
                self.dropped["duplicate_question"] += 1
                continue
            seen.add(q)
            self.qs[lab].append(_Question(qtype, q, a, p + off, tuple(j + off for j in sib)))
        self.dropped.update(res["dropped"])
        self.shortfall += res["shortfall"]
        self.validated += res["validated"]
        self.unplaced_facts += res.get("unplaced_facts", 0)


def _run_chunks(tasks: list[dict[str, Any]], num_passages: int, workers: int) -> _Generated:
    """Runs the chunk workers (in order) and concatenates their results."""
    gen = _Generated([], [], np.zeros(num_passages, dtype=np.int32),
                     {s: [] for s in SPLITS}, Counter())
    seen: set[str] = set()
    progress = Progress("synthetic: generating", num_passages, unit="passages")

    def consume(results: Iterable[dict[str, Any]]) -> None:
        for task, res in zip(tasks, results):
            gen.add(task, res, seen)
            progress.set(len(gen.texts))
        progress.done()

    if workers == 1:
        consume(map(_generate_chunk, tasks))
    else:
        # spawn, not fork: the caller may hold JAX/TF threads, which fork can deadlock.
        with mp.get_context("spawn").Pool(workers) as pool:
            consume(pool.imap(_generate_chunk, tasks, chunksize=1))
    return gen


def _write_files(paths: dict[str, str], gen: _Generated, hard_by_split: dict[str, list],
                 rng: np.random.Generator, num_negatives: int, random_hard: bool = False) -> None:
    """Writes corpus, biencoder, QA and gold-info files (docs/method.md §8); meta.json is not."""
    titles, texts, qs = gen.titles, gen.texts, gen.qs
    formats.write_corpus_tsv(paths["corpus"],
                             ((str(i + 1), texts[i], titles[i]) for i in range(len(texts))))

    def examples(split: str) -> Iterable[dict[str, Any]]:
        for i, question in enumerate(qs[split]):
            q, a, p = question.question, question.answer, question.passage
            h = hard_by_split[split][i] if i < len(hard_by_split[split]) else []
            # rng draws in file order: part of the output's definition
            negs = _random_negatives(rng, num_negatives, texts, gen.entity, p, a)
            yield {
                "question": q, "answers": [a],
                "positive_ctxs": [_ctx(titles[p], texts[p], p, 1000.0, 1)],
                "negative_ctxs": [_ctx(titles[j], texts[j], j, 0.0, 0) for j in negs],
                "hard_negative_ctxs": ([_ctx(titles[j], texts[j], j, 0.0, 0) for j in negs]
                                       if random_hard else
                                       [_ctx(titles[j], texts[j], j, sc, 0) for j, sc in h]),
            }

    for s in ("train", "dev"):  # streamed: 1M-passage files do not fit comfortably as lists
        formats.write_biencoder(paths[s], examples(s))
    formats.write_qa_csv(paths["test_qa"], [(q.question, [q.answer]) for q in qs["test"]])
    for s in SPLITS:
        formats.write_gold_info(paths[f"{s}_gold"], [
            {"question": q, "question_tokens": _question_tokens(q), "title": titles[p],
             "context": texts[p], "example_id": i}
            for i, (_, q, _, p, _) in enumerate(qs[s])])


def _counts(gen: _Generated, plan: dict[str, np.ndarray], num_negatives: int,
            hard_stats: dict[str, int], questions_per_passage: int,
            world: str = "entity") -> dict[str, Any]:
    """The ``counts`` block of meta.json and of :func:`generate`'s result."""
    qs = gen.qs
    types = {TYPE_NAMES[t]: int((plan["types"] == t).sum()) for t in range(len(TYPE_NAMES))}
    counts = {
        "passages": len(gen.texts), "entities": len(plan["counts"]),
        "entity_types": types,
        "questions": {s: len(qs[s]) for s in SPLITS},
        "question_types": {s: dict(sorted(Counter(q.qtype for q in qs[s]).items()))
                           for s in SPLITS},
        "candidates_validated": gen.validated, "dropped": dict(sorted(gen.dropped.items())),
        "dropped_total": sum(gen.dropped.values()), "shortfall": gen.shortfall,
        "negatives_per_question": num_negatives, **hard_stats,
        "mean_passage_words": round(float(np.mean([_words(t) for t in gen.texts])), 2),
    }
    if world != "entity":
        counts["unplaced_facts"] = gen.unplaced_facts
    if questions_per_passage != 1:
        counts["questions_per_positive"] = {
            s: dict(sorted(Counter(Counter(q.passage for q in qs[s]).values()).items()))
            for s in SPLITS}
    return counts


def check_params(out_dir: str | os.PathLike, *, num_passages: int, seed: int = 0,
                 test_questions: int, questions_per_passage: int = 1,
                 world: str = "entity", entity_types: Sequence[str] | None = None,
                 num_hard_negatives: int = 3, hard_negatives: str = "sibling") -> None:
    """Raises ValueError naming every differing key (found, wanted) when ``out_dir``'s
    meta.json records other generation settings than these (absent keys in meta.json are the
    generator's defaults)."""
    meta = json.loads((Path(out_dir) / FILES["meta"]).read_text(encoding="utf-8"))
    params = meta["params"]
    have = {"num_passages": params["num_passages"], "test_questions": params["test_questions"],
            "seed": meta["seed"],
            "questions_per_passage": params.get("questions_per_passage", 1),
            "world": params.get("world", "entity"),
            "entity_types": params.get("entity_types"),
            "num_hard_negatives": params.get("num_hard_negatives", 3),
            "hard_negatives": params.get("hard_negatives", "sibling")}
    want = {"num_passages": num_passages, "test_questions": test_questions, "seed": seed,
            "questions_per_passage": questions_per_passage, "world": world,
            "entity_types": (sorted(entity_types, key=TYPE_NAMES.index)
                             if entity_types is not None else None),
            "num_hard_negatives": num_hard_negatives, "hard_negatives": hard_negatives}
    diff = {k: (have[k], v) for k, v in want.items() if have[k] != v}
    if diff:
        raise ValueError(f"{out_dir} was generated with other settings (key: (found, wanted)) "
                         f"{diff}; use another --out or remove it")


def generate_or_check(out_dir: str | os.PathLike, num_passages: int, seed: int = 0, *,
                      test_questions: int, questions_per_passage: int = 1,
                      world: str = "entity", entity_types: Sequence[str] | None = None,
                      num_hard_negatives: int = 3, hard_negatives: str = "sibling") -> None:
    """Generates the benchmark into ``out_dir`` once: a directory with a meta.json (written
    last) is reused after :func:`check_params`, one without is (re)generated. For the
    benchmark commands, which share a data directory between runs."""
    kw = {"test_questions": test_questions, "questions_per_passage": questions_per_passage,
          "world": world, "entity_types": entity_types, "num_hard_negatives": num_hard_negatives,
          "hard_negatives": hard_negatives}
    if (Path(out_dir) / FILES["meta"]).exists():
        check_params(out_dir, num_passages=num_passages, seed=seed, **kw)
        return
    generate(out_dir, num_passages, seed, **kw)


def generate(out_dir: str | os.PathLike, num_passages: int, seed: int = 0, *,
             train_per_passage: float = 0.5, dev_frac: float = 0.1,
             test_questions: int | None = None,
             num_hard_negatives: int = 3, num_negatives: int = 2, bm25_top_k: int = 20,
             max_mined: int | None = None, workers: int | None = None,
             entity_types: Sequence[str] | None = None,
             questions_per_passage: int = 1, world: str = "entity",
             hard_negatives: str = "sibling") -> dict[str, Any]:
    """Write the benchmark into ``out_dir``; return {"paths", "counts", "timing"}.

    ``entity_types`` (subset of TYPE_NAMES; None = all) restricts the world to those entity
    types -- and so to their fact sentences and question templates: one *domain* of
    :func:`generate_domains`. ``questions_per_passage`` k > 1 asks questions on up to k
    different fact sentences of each selected positive passage (see :func:`_select_grouped`),
    so one passage is the positive of several questions; k = 1 (default) is the original
    selection: type-balanced draws from all candidates, where a passage is the positive of a
    second question only by chance. ``world`` (:data:`WORLDS`) = "entity" (default): every
    sentence of a passage is about the title's entity; "mixed": SQuAD-like paragraphs, every
    fact sentence of a passage is about a different entity, named in the sentence, none the
    title's (:func:`dense_cf.synthetic.world._make_mixed_chunk`). Non-default values are
    recorded in meta.json params; default arguments give byte-identical files to earlier
    versions. ``hard_negatives`` (:data:`HARD_NEGATIVES`): "sibling" (default) mines the top
    BM25 passages lacking the answer, in practice the gold entity's siblings; "other_entity"
    only passages of other entities (no passage of the positive's entity, none mentioning the
    question's entity, none with the answer). Questions left with fewer than
    ``num_hard_negatives`` are kept and counted (``mined_without_hard_negative``,
    ``mined_short_of_hard_negatives``); corpus, questions and random negatives do not change.

    Sizes: train = round(train_per_passage * num_passages) questions, dev = round(dev_frac * train),
    test = ``test_questions`` (default round(0.1 * train)). ``max_mined`` caps the number of
    questions per split that get BM25 hard negatives (None: all). ``workers`` defaults to the
    CPU count; the output does not depend on it.
    """
    _check_args(seed, questions_per_passage,
                (train_per_passage, dev_frac, num_hard_negatives, num_negatives), test_questions,
                world, hard_negatives)
    t_start = time.time()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    totals = _split_sizes(num_passages, train_per_passage, dev_frac, test_questions)
    plan = _plan(num_passages, seed, entity_types)
    tasks = _chunk_tasks(plan, totals, num_passages, seed, questions_per_passage, world)
    workers = max(1, min(workers or os.cpu_count() or 1, len(tasks)))
    gen = _run_chunks(tasks, num_passages, workers)
    qs = gen.qs
    t_gen = time.time()

    rng = np.random.default_rng(np.random.SeedSequence([seed, 2]))
    for s in SPLITS:  # global shuffle: file order must not follow corpus order
        perm = rng.permutation(len(qs[s]))
        qs[s] = [qs[s][i] for i in perm]

    mined = {s: qs[s][: (len(qs[s]) if max_mined is None else max_mined)]
             for s in ("train", "dev")}
    to_mine = [] if hard_negatives == "random" else mined["train"] + mined["dev"]
    bm25_info = bm25.bm25s_info() if to_mine and num_hard_negatives > 0 else None
    hard: list[list[tuple[int, float]]] = []
    if to_mine and num_hard_negatives > 0:
        other = hard_negatives == "other_entity"
        hard = _mine_hard_negatives(gen.titles, gen.texts, to_mine,
                                    max(bm25_top_k, num_hard_negatives + 2)
                                    + (_OTHER_ENTITY_EXTRA_K if other else 0),
                                    num_hard_negatives, workers,
                                    entity=gen.entity if other else None)
    t_bm25 = time.time()

    paths = {k: str(out / v) for k, v in FILES.items()}
    hard_by_split = {"train": hard[:len(mined["train"])], "dev": hard[len(mined["train"]):]}
    with timed(f"synthetic: writing files to {out}", "synthetic: files written"):
        _write_files(paths, gen, hard_by_split, rng, num_negatives,
                     random_hard=hard_negatives == "random")
    hard_stats = {"mined_questions": len(to_mine), "hard_negatives": sum(len(h) for h in hard),
                  "mined_without_hard_negative": sum(not h for h in hard)}
    if hard_negatives != "sibling":  # only then: default meta.json stays byte-identical
        hard_stats["mined_short_of_hard_negatives"] = sum(len(h) < num_hard_negatives
                                                          for h in hard)
    if hard_stats["mined_without_hard_negative"]:
        log.warning("synthetic: %d of %d mined questions got no %s hard negative (kept, with "
                    "hard_negative_ctxs: [])", hard_stats["mined_without_hard_negative"],
                    len(hard), hard_negatives)
    counts = _counts(gen, plan, num_negatives, hard_stats, questions_per_passage, world)
    meta = {
        "generator": "dense_cf.synthetic.generate", "version": GENERATOR_VERSION, "seed": seed,
        "params": {"num_passages": num_passages, "train_per_passage": train_per_passage,
                   "dev_frac": dev_frac, "test_questions": totals["test"],
                   "num_hard_negatives": num_hard_negatives,
                   "num_negatives": num_negatives, "bm25_top_k": bm25_top_k,
                   "max_mined": max_mined,
                   "name_share": NAME_SHARE, "chunk_entities": CHUNK_ENTITIES,
                   # only when set: default meta.json stays byte-identical to older versions
                   **({"entity_types": sorted(entity_types, key=TYPE_NAMES.index)}
                      if entity_types is not None else {}),
                   **({"questions_per_passage": questions_per_passage}
                      if questions_per_passage != 1 else {}),
                   **({"world": world} if world != "entity" else {}),
                   **({"hard_negatives": hard_negatives} if hard_negatives != "sibling" else {})},
        "bm25s": bm25_info,
        "counts": counts, "files": {k: v for k, v in FILES.items() if k != "meta"},
    }
    Path(paths["meta"]).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n",
                                   encoding="utf-8")
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
