"""Robustness to near-duplicate distractors (docs/method.md §5; EADPR Fig. 5).

``python -m dense_cf.cli.eval_robustness --workdir DIR [--max_distractors 20]
[--counts 0,1,2,5,10,20]``

EADPR added, for every test question with a gold passage, up to 20 LLM-written passages that
"mimic the context of the evidence passage but leave out the key evidence" and plotted top-k
against their number. Offline we derive them from the gold context with
``counterfactual.distractor_variants`` (sentence p*, answer- and window-masked p*, then p*'s
sentences reordered / one more dropped; every one checked answer-free with DPR ``has_answer``).

Set-up and decisions:

* Questions = the AAR triplets (``aar.load_triplets``: gold info joined with the qa answers by
  ``aar_math.join_gold_with_qa``, the same join as AAR).
  When several questions share one gold context, their distractors must lack ALL their answers
  (they share one corpus), so the variants are built with the union of those answers.
  Questions whose gold context has no answer match, or that get no answer-free variant, are
  left out of the evaluation (counted as ``questions_without_distractors``); the question set
  is the same for every K. ``triplet_fates`` counts every gold record once by reason
  (``ROBUSTNESS_FATES``: evaluated, or lost at the join / for want of an answer match / of a
  distractor), in ``robustness.json`` and ``robustness.md``; the log names the first of each.
  Questions with fewer than K distinct variants get all they have (counted per K as
  ``questions_short``; ``distractors_per_question_actual`` is the mean actually added).
* Base corpus embeddings are the run's export (``DIR/export/step_<N>``, shared with
  ``retrieval.ensure_index``; finished shards are never re-encoded). Distractors (title = the
  gold title) are encoded once, rounded to the export dtype, and the first K of every question
  are added to an exact index (faiss Flat, or a JaxIndex when ``eval.index = jax``; ids: base
  rows 0..N-1, distractors N..). All vectors are
  held in RAM: meant for test sets and corpora that fit (not the 21M-passage Wikipedia).
* Metrics are DPR's (docs/method.md §6) on the retrieved TEXTS, distractors included: ``top_k``/``mrr``.
  A question's own distractors never bear its answer (checked; an error otherwise), but
  another question's may contain it by coincidence (e.g. a year); DPR's ``has_answer`` then
  counts it as a hit, like any corpus passage, and ``retrieved_distractors_with_answer``
  reports how often. ``top_k_corpus``/``mrr_corpus`` count only answer-bearing CORPUS
  passages: the clean signal, exactly non-increasing in K (a Flat index that gains passages
  only pushes the old ones down; ``top_k`` is too whenever no distractor hit is counted).
  ``mean_distractors_above_first_corpus_hit`` averages, over questions with a corpus hit in
  the top k, the distractors ranked above it (``own_``: the question's own distractors).

* These "p*" distractors are the transformations PiCL/EADPR train on, so they measure
  robustness in-distribution. ``--heldout`` (``eval.robustness_heldout``) adds a held-out
  family on the same corpus and questions (:mod:`dense_cf.synthetic.distractors`): the answer
  value swapped for another value of its type, the other sentences paraphrased with the
  world's alternative templates and reordered (answer sentence dropped), and a namesake's
  passage (same name, other disambiguator, own value). Kinds alternate in that order; a kind
  that cannot be built for a question is counted (``questions_without_<kind>``), and every
  held-out distractor is checked answer-free. ``eval.robustness_heldout_kinds`` (``--heldout_kinds``)
  selects other registered kinds and their order (``synthetic.distractors.KINDS``, e.g. the
  opt-in ``rule_paraphrase`` of issue 50); the default is today's three, so a K keeps its mix.
  Its results go under ``"heldout"`` in robustness.json (the p* keys are unchanged) and
  compare rows are named "K=5 held-out distractors: top-1" beside the p* family's "K=5 distractors: top-1".

Writes ``robustness.json``, ``robustness.md``, ``robustness.png`` (and the distractor texts,
``robustness_distractors.jsonl``; with ``heldout`` also ``robustness_heldout_distractors.jsonl``)
to ``DIR/eval/step_<N>/``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import zlib
from collections import Counter
from typing import Any, Mapping, Sequence

import numpy as np
from absl import logging

from dense_cf.datasets.dpr import resolve_data_file
from dense_cf.eval import aar, aar_math, outcomes, stats
from dense_cf.eval import metrics as metrics_lib
from dense_cf.eval import report as report_lib
from dense_cf.eval.base import Evaluator
from dense_cf.index import kinds as index_kinds
from dense_cf.progress import Progress
from dense_cf.retrieval import export
from dense_cf.retrieval.corpus import load_corpus
from dense_cf.synthetic.distractors import HELDOUT_KINDS, KINDS, check_kinds, heldout_variants, namesake_index
from dense_cf.text.answers import find_answer_spans
from dense_cf.text.counterfactuals import distractor_variants
from dense_cf.train.run import Run, RunDir, load_run

__all__ = ["DEFAULT_COUNTS", "FAMILIES", "ROBUSTNESS_FATES", "DistractorSet", "build_distractors",
           "evaluate_robustness", "plot_runs", "robustness_table"]

DEFAULT_COUNTS: tuple[int, ...] = (0, 1, 2, 5, 10, 20)
# Distractor families: "pstar" (p*-style: the training counterfactuals' transformations,
# counterfactuals.distractor_variants) and "heldout" (value swaps, paraphrases, namesakes:
# dense_cf.synthetic.distractors, unlike any training p*).
FAMILIES: tuple[str, ...] = ("pstar", "heldout")
# Fate of a gold record in the robustness evaluation; the counts sum to the gold records.
ROBUSTNESS_FATES: tuple[str, ...] = ("evaluated", *aar_math.LOST_AT_JOIN, "answer_not_in_context",
                                     "no_distractor")


@dataclasses.dataclass
class DistractorSet:
    """Evaluated questions (triplet indices) and their distractor texts, in variant order."""

    index: list[int]
    questions: list[str]
    answers: list[list[str]]
    titles: list[str]
    variants: list[list[str]]
    stats: dict[str, Any]
    fates: aar_math.ReasonCounts | None = None  # ROBUSTNESS_FATES over every gold record
    # Held-out family only: each distractor's own title (a namesake's is not the gold title)
    # and kind (synthetic.distractors.HELDOUT_KINDS); None: every title is the gold title.
    variant_titles: list[list[str]] | None = None
    kinds: list[list[str]] | None = None

    @property
    def offsets(self) -> np.ndarray:
        """Row of each question's first distractor in the flat (question-major) list."""
        return np.concatenate([[0], np.cumsum([len(v) for v in self.variants])]).astype(np.int64)

    def flat(self) -> tuple[list[str], list[str]]:
        """(titles, texts) of all distractors, question-major."""
        if self.variant_titles is not None:
            return ([t for ts in self.variant_titles for t in ts],
                    [x for v in self.variants for x in v])
        titles = [t for t, v in zip(self.titles, self.variants) for _ in v]
        return titles, [x for v in self.variants for x in v]


def _question_seed(seed: int, question: str) -> int:
    # By question text, so that a question keeps its distractors if the test set is subset.
    return zlib.crc32(f"{seed}\t{question}".encode("utf-8"))


def build_distractors(triplets, max_distractors: int, *, seed: int = 0, mode: str = "string",
                      window_words: int = 5, family: str = "pstar",
                      namesakes: Mapping[str, Sequence[str]] | None = None,
                      kinds: Sequence[str] = HELDOUT_KINDS) -> DistractorSet:
    """``distractor_variants`` of every triplet's gold context, without the answers of every
    question sharing that context; questions whose own answer does not match their gold
    context, or that get no variant, are left out and counted (see the module docstring).

    ``family="heldout"``: ``synthetic.distractors.heldout_variants`` instead (value swaps,
    paraphrases, namesakes; ``namesakes`` = ``namesake_index`` of the corpus titles; ``kinds``
    the held-out kinds and their order); the stats then count, per kind, the questions that got
    none (``questions_without_<kind>``) and, for a kind with a skip rule, the passages it
    cannot apply to (``skipped_<kind>``).
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    kinds = check_kinds(kinds)
    by_context: dict[tuple[str, str], list[str]] = {}
    for t, c, a in zip(triplets.titles, triplets.contexts, triplets.answers):
        group = by_context.setdefault((t, c), [])
        group.extend(x for x in a if x not in group)
    gen: dict[str, int] = {}
    fates = triplets.fate_counts(ROBUSTNESS_FATES)
    out = DistractorSet([], [], [], [], [], {}, fates)
    if family == "heldout":
        out.variant_titles, out.kinds = [], []
        # Per kind: built distractors, failed draws, questions that got none (the last only
        # when max_distractors reaches every kind of the round robin).
        for kind in kinds:
            gen[f"built_{kind}"] = gen[f"failed_draws_{kind}"] = 0
            if KINDS[kind].skip is not None:
                gen[f"skipped_{kind}"] = 0
            if max_distractors >= len(kinds):
                gen[f"questions_without_{kind}"] = 0
        gen["namesake_world"] = gen["namesake_built"] = 0
    without, sizes = 0, []
    for i, (q, a, t, c) in enumerate(zip(triplets.questions, triplets.answers, triplets.titles,
                                         triplets.contexts)):
        if not find_answer_spans(c, a, mode=mode):  # the gold context lacks this question's answer
            without += 1
            fates.add("answer_not_in_context", triplets.label(i))
            continue
        if family == "heldout":
            hv = heldout_variants(t, c, by_context[(t, c)], max_distractors,
                                  _question_seed(seed, q), namesakes=namesakes, mode=mode,
                                  stats=gen, kinds=kinds)
            v = [x[2] for x in hv]
            for kind in kinds:
                if max_distractors >= len(kinds) and not any(x[0] == kind for x in hv):
                    gen[f"questions_without_{kind}"] = gen.get(f"questions_without_{kind}", 0) + 1
        else:
            v = distractor_variants(c, by_context[(t, c)], max_distractors,
                                    _question_seed(seed, q), mode=mode,
                                    window_words=window_words, stats=gen)
        if not v:
            without += 1
            fates.add("no_distractor", triplets.label(i))
            continue
        fates.add("evaluated", triplets.label(i))
        out.index.append(i)
        out.questions.append(q)
        out.answers.append(list(a))
        out.titles.append(t)
        out.variants.append(v)
        if family == "heldout":
            out.variant_titles.append([x[1] for x in hv])
            out.kinds.append([x[0] for x in hv])
        sizes.append(len(v))
    uses = Counter(zip(triplets.titles, triplets.contexts))
    shared = sum(n for n in uses.values() if n > 1)
    out.stats = {"triplets": len(triplets.questions), "questions_evaluated": len(out.questions),
                 "questions_without_distractors": without,
                 "questions_sharing_gold_context": shared,
                 "questions_below_max": int(sum(1 for s in sizes if s < max_distractors)),
                 "variants_per_question": ({"min": int(min(sizes)), "mean": float(np.mean(sizes)),
                                            "max": int(max(sizes))} if sizes else {}),
                 "total_distractors": int(sum(sizes)), **gen}
    fates.check_total(triplets.gold_records, "robustness questions")
    return out


def _retrieved_lists(scores: np.ndarray, rows: np.ndarray, ids: Sequence[str],
                     titles: Sequence[str], texts: Sequence[str]) -> list[list[tuple]]:
    return [[(ids[r], titles[r], texts[r], float(s)) for s, r in zip(s_row, r_row) if r >= 0]
            for s_row, r_row in zip(scores, rows)]


def _count_stats(rows: np.ndarray, hits: list[list[bool]], owner: np.ndarray, n_base: int,
                 ks: Sequence[int]) -> tuple[dict[str, Any], list[int | None]]:
    """Distractors among each question's retrieved rows (``owner``: question of a distractor
    row) and the 1-based rank of the first answer-bearing CORPUS passage (None: none)."""
    n_dist = n_hit_dist = n_hit_own = 0
    above, above_own, corpus_first, corpus_hits = [], [], [], []
    for qi, (r_row, h_row) in enumerate(zip(rows, hits)):
        r_row = r_row[r_row >= 0]
        is_dist = r_row >= n_base
        own = np.zeros_like(is_dist)
        if len(owner):
            own = is_dist & (owner[np.clip(r_row - n_base, 0, len(owner) - 1)] == qi)
        h = np.asarray(h_row, bool)
        n_dist += int(is_dist.sum())
        n_hit_dist += int((is_dist & h).sum())
        n_hit_own += int((own & h).sum())
        corpus_hits.append((h & ~is_dist).tolist())
        f = int(np.argmax(h & ~is_dist)) + 1 if (h & ~is_dist).any() else None
        corpus_first.append(f)
        if f is not None:
            above.append(int(is_dist[:f - 1].sum()))
            above_own.append(int(own[:f - 1].sum()))
    frac = metrics_lib.top_k_accuracy(corpus_hits, ks)
    return {"top_k_corpus": {kk: 100.0 * v for kk, v in frac.items()},
            "mrr_corpus": metrics_lib.mrr(corpus_hits),
            "retrieved_distractors": n_dist, "retrieved_distractors_with_answer": n_hit_dist,
            "retrieved_own_distractors_with_answer": n_hit_own,
            "questions_with_corpus_hit": len(above),
            "mean_distractors_above_first_corpus_hit":
                float(np.mean(above)) if above else float("nan"),
            "mean_own_distractors_above_first_corpus_hit":
                float(np.mean(above_own)) if above_own else float("nan")}, corpus_first


def _check_counts(counts: Sequence[int], max_distractors: int) -> list[int]:
    counts = sorted({int(c) for c in counts})
    if not counts:
        raise ValueError("counts is empty")
    if counts[0] < 0 or counts[-1] > max_distractors:
        raise ValueError(f"counts must lie in [0, max_distractors={max_distractors}], got {counts}")
    return counts


def _encode(run, encoder, dset: DistractorSet, manifest: Mapping[str, Any]
            ) -> tuple[np.ndarray, np.ndarray]:
    """(distractor vectors, question vectors) of ``dset``."""
    d_titles, d_texts = dset.flat()
    ids, mask = export.tokenize_passages(run.tokenizer, d_titles, d_texts, manifest["max_p_len"])
    # Same precision as the stored corpus vectors, so neither side is favoured by rounding.
    with Progress("robustness: encoding distractors", len(ids), unit="passages") as progress:
        d_emb = export.encode_in_slices(encoder.passages, ids, mask, encoder=encoder,
                                        progress=progress)
    d_emb = d_emb.astype(manifest["dtype"]).astype(np.float32)
    q_emb = export.encode_questions(run, dset.questions, encoder=encoder)
    return d_emb, q_emb


def _search_family(dset: DistractorSet, base: np.ndarray, d_emb: np.ndarray, q_emb: np.ndarray,
                   corpus, counts: Sequence[int], k: int, ks: Sequence[int], mode: str,
                   index_kind: str, label: str = ""
                   ) -> tuple[dict[int, dict[str, Any]], dict[int, list[int | None]],
                              dict[int, list[int | None]]]:
    """(table, first_hit_rank, first_corpus_hit_rank) per K for one distractor family."""
    d_titles, d_texts = dset.flat()
    n_base = len(corpus)
    offsets = dset.offsets
    n_var = np.array([len(v) for v in dset.variants])
    d_owner = np.repeat(np.arange(len(dset.questions)), n_var)
    d_ids = [f"distractor:{dset.index[q]}:{j}" for q, v in enumerate(dset.variants)
             for j in range(len(v))]
    table: dict[int, dict[str, Any]] = {}
    first_ranks: dict[int, list[int | None]] = {}
    corpus_ranks: dict[int, list[int | None]] = {}
    # One index build and search per K: each takes seconds to minutes on a real corpus.
    progress = Progress(f"robustness: {label}index and search", len(counts), unit="K values")
    for K in counts:
        t0 = time.perf_counter()
        sel = np.concatenate([offsets[q] + np.arange(min(K, n)) for q, n in enumerate(n_var)]
                             ).astype(np.int64)
        vectors = np.concatenate([base, d_emb[sel]]) if len(sel) else base
        index = index_kinds.exact_index(vectors, index_kind)
        scores, rows = index.search(q_emb, k)
        all_ids = corpus.ids + [d_ids[j] for j in sel]
        all_titles = corpus.titles + [d_titles[j] for j in sel]
        all_texts = corpus.texts + [d_texts[j] for j in sel]
        retrieved = _retrieved_lists(scores, rows, all_ids, all_titles, all_texts)
        rep = metrics_lib.evaluate_retrieval(dset.questions, dset.answers, retrieved, mode=mode,
                                             ks=ks)
        entry = {"top_k": rep["top_k"], "mrr": rep["mrr"],
                 "distractors_per_question_actual": float(len(sel) / len(dset.questions)),
                 "distractors_added": int(len(sel)), "corpus_size": int(index.ntotal),
                 "questions_short": int((n_var < K).sum()),
                 **stats.rank_intervals(rep["first_hit_rank"], ks)}  # 95 %: Wilson, bootstrap
        counted, corpus_first = _count_stats(rows, rep["hits"], d_owner[sel], n_base, ks)
        entry.update(counted)
        entry["search_s"] = time.perf_counter() - t0
        if entry["retrieved_own_distractors_with_answer"]:
            raise RuntimeError("a question retrieved its own distractor as answer-bearing: "
                               "distractor_variants must never return one")
        if entry["retrieved_distractors_with_answer"]:
            logging.warning("robustness %sK=%d: %d retrieved distractors of OTHER questions "
                            "contain the answer (counted as hits, as DPR's has_answer does)",
                            label, K,
                            entry["retrieved_distractors_with_answer"])
        table[K] = entry
        first_ranks[K] = rep["first_hit_rank"]
        corpus_ranks[K] = corpus_first
        logging.info("robustness %sK=%d: corpus %d, %s MRR=%.4f", label, K, entry["corpus_size"],
                     {kk: round(v, 2) for kk, v in rep["top_k"].items()}, rep["mrr"])
        progress.update(1)
    progress.done()
    return table, first_ranks, corpus_ranks


def evaluate_robustness(workdir: str, *, counts: Sequence[int] = DEFAULT_COUNTS,
                        max_distractors: int = 20, run=None, gold_path: str | None = None,
                        qa_path: str | None = None, corpus_path: str | None = None,
                        out_dir: str | None = None, ks: Sequence[int] | None = None,
                        k: int | None = None, seed: int = 0,
                        window_words: int = 5, index_kind: str | None = None,
                        heldout: bool | None = None,
                        heldout_kinds: Sequence[str] | None = None) -> dict[str, Any]:
    """Top-k / MRR vs. K near-duplicate distractors per question (docs/method.md §5, EADPR Fig. 5).

    Returns (and writes as ``robustness.json``) ``{"table": {K: {"top_k", "mrr",
    "distractors_per_question_actual", "corpus_size", "questions_short", "top_k_corpus",
    "retrieved_distractors_with_answer", "top_k_ci", "mrr_ci", ...}}, "first_hit_rank": {K: [...]},
    "first_corpus_hit_rank": {K: [...]}, "questions", "distractor_stats", ...}`` (top-k in %,
    per-question ranks in ``questions`` order). ``k`` = retrieval depth (default config).
    ``index_kind`` (default ``eval.index``): ``jax`` searches with an exact JaxIndex, any faiss
    kind with faiss Flat (exact, so a distractor's effect is not mixed with approximation error).
    ``heldout`` (default ``eval.robustness_heldout``): also the held-out family (value swaps, paraphrases, namesakes;
    :mod:`dense_cf.synthetic.distractors`) on the same corpus, under ``result["heldout"]``
    (the same keys as the p* family's, plus ``kinds``); the p* numbers do not change.
    ``heldout_kinds`` (default ``eval.robustness_heldout_kinds``, else :data:`HELDOUT_KINDS`):
    the held-out kinds and their round-robin order.
    """

    counts = _check_counts(counts, max_distractors)
    run = run or load_run(workdir)
    cfg = run.config
    ks = tuple(int(x) for x in (ks or cfg.eval.ks))
    k = max(int(k or cfg.eval.k), max(ks))
    mode = cfg.data.answer_mode
    index_kind = index_kind or cfg.eval.index
    if heldout is None:
        heldout = bool(cfg.eval.get("robustness_heldout", False))
    heldout_kinds = check_kinds(heldout_kinds or cfg.eval.get("robustness_heldout_kinds",
                                                              HELDOUT_KINDS))
    timing: dict[str, float] = {}

    triplets = aar.load_triplets(resolve_data_file(cfg.data, "gold_file", gold_path),
                                 resolve_data_file(cfg.data, "test_file", qa_path))
    dset = build_distractors(triplets, max_distractors, seed=seed, mode=mode,
                             window_words=window_words)
    if not dset.questions:
        raise ValueError(f"no question has a distractor: {triplets.stats} {dset.stats} "
                         f"{dset.fates}")
    logging.info("robustness: %d of %d gold records evaluated; %s", len(dset.questions),
                 triplets.gold_records, dset.fates.summary())
    if dset.fates.lost():
        logging.warning("robustness: %d of %d gold records not evaluated: %s", dset.fates.lost(),
                        triplets.gold_records, dset.fates.summary(lost_only=True))
    if dset.stats["questions_below_max"]:
        logging.warning("robustness: %d questions have fewer than %d variants",
                        dset.stats["questions_below_max"], max_distractors)

    corpus = load_corpus(resolve_data_file(cfg.data, "corpus_file", corpus_path))
    encoder = export.Encoder(run, cfg.eval.batch_size)
    export_dir = RunDir(workdir).export(run.step)
    t0 = time.perf_counter()
    manifest = export.export_passages(run, corpus.rows(), export_dir, shard_size=cfg.eval.shard_size,
                                      batch_size=cfg.eval.batch_size, dtype=cfg.eval.embedding_dtype,
                                      encoder=encoder, num_rows=len(corpus))
    if manifest["count"] != len(corpus) or export.load_passage_ids(export_dir) != corpus.ids:
        raise RuntimeError(f"the export in {export_dir} is not of this corpus ({len(corpus)} "
                           "passages): it was made from another corpus file; move it away")
    base = export.load_embeddings(export_dir)
    timing["export_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    d_emb, q_emb = _encode(run, encoder, dset, manifest)
    timing["encode_s"] = time.perf_counter() - t0
    n_base = len(corpus)
    table, first_ranks, corpus_ranks = _search_family(dset, base, d_emb, q_emb, corpus, counts,
                                                      k, ks, mode, index_kind)
    held: dict[str, Any] | None = None
    if heldout:
        t0 = time.perf_counter()
        hset = build_distractors(triplets, max_distractors, seed=seed, mode=mode,
                                 family="heldout", namesakes=namesake_index(corpus.titles),
                                 kinds=heldout_kinds)
        if not hset.questions:
            raise ValueError(f"no question has a held-out distractor: {hset.stats} {hset.fates}")
        logging.info("robustness (held-out): %d of %d gold records evaluated; %s",
                     len(hset.questions), triplets.gold_records, hset.stats)
        hd_emb, hq_emb = _encode(run, encoder, hset, manifest)
        h_table, h_first, h_corpus = _search_family(hset, base, hd_emb, hq_emb, corpus, counts,
                                                    k, ks, mode, index_kind, label="held-out ")
        timing["heldout_s"] = time.perf_counter() - t0
        held = {"family": "heldout", "kinds": list(heldout_kinds),
                "n_questions": len(hset.questions), "triplet_fates": hset.fates.to_json(),
                "distractor_stats": hset.stats, "table": h_table, "questions": hset.questions,
                "first_hit_rank": h_first, "first_corpus_hit_rank": h_corpus}

    result = {"workdir": os.path.abspath(workdir), "method": cfg.method, "step": run.step,
              "k": k, "ks": list(ks), "counts": counts, "max_distractors": max_distractors,
              "seed": seed, "mode": mode, "index": index_kinds.exact_kind(index_kind),
              "base_corpus_size": n_base,
              "n_questions": len(dset.questions), "triplet_stats": triplets.stats,
              "triplet_join": triplets.join.to_json() if triplets.join else None,
              "triplet_fates": dset.fates.to_json(),
              "distractor_stats": dset.stats, "export": {
                  "dir": export_dir, "encoded_this_run": manifest["encoded_this_run"],
                  "dtype": manifest["dtype"]},
              "timing": timing, "table": table, "questions": dset.questions,
              "first_hit_rank": first_ranks, "first_corpus_hit_rank": corpus_ranks}
    if held is not None:  # only then: a p*-only robustness.json keeps its former keys
        result["heldout"] = held
    out_dir = out_dir or RunDir(workdir).eval(run.step)
    os.makedirs(out_dir, exist_ok=True)
    result["out_dir"], result["units"] = os.path.abspath(out_dir), report_lib.JSON_UNITS
    report_lib.write_json(os.path.join(out_dir, outcomes.ROBUSTNESS), result)
    with report_lib.atomic_open(os.path.join(out_dir, "robustness_distractors.jsonl")) as f:
        for q, a, t, v in zip(dset.questions, dset.answers, dset.titles, dset.variants):
            f.write(json.dumps({"question": q, "answers": a, "title": t, "distractors": v},
                               ensure_ascii=False) + "\n")
    name = f"{cfg.method} (step {run.step})"
    curves = {name: result} if held is None else {f"{name} p*": result,
                                                   f"{name} held-out": held}
    plot_runs(curves, os.path.join(out_dir, "robustness.png"))
    extra: list[tuple[str, str]] = []
    if held is not None:
        with report_lib.atomic_open(os.path.join(out_dir,
                                                 "robustness_heldout_distractors.jsonl")) as f:
            for q, a, ts, ks_, v in zip(hset.questions, hset.answers, hset.variant_titles,
                                        hset.kinds, hset.variants):
                f.write(json.dumps({"question": q, "answers": a, "titles": ts, "kinds": ks_,
                                    "distractors": v}, ensure_ascii=False) + "\n")
        extra = [(f"Held-out distractors ({', '.join(k.replace('_', ' ') for k in held['kinds'])})",
                  _heldout_text(held, name, max_distractors))]
    s = dset.stats
    detail = [{"K": K, "corpus": e["corpus_size"], "distractors/q": e["distractors_per_question_actual"],
               "questions short": e["questions_short"],
               "retrieved distractors": e["retrieved_distractors"],
               "with answer": e["retrieved_distractors_with_answer"],
               f"corpus-only top-{max(ks)} (%)": e["top_k_corpus"][max(ks)],
               "distractors above 1st corpus hit": e["mean_distractors_above_first_corpus_hit"],
               "own above 1st corpus hit": e["mean_own_distractors_above_first_corpus_hit"]}
              for K, e in table.items()]
    report_lib.write_markdown(
        os.path.join(out_dir, "robustness.md"), f"Distractor robustness: {workdir}",
        [("Top-k accuracy and MRR (%) vs. distractors per question K",
          robustness_table({name: result}) + "\n\n![top-k vs. K](robustness.png)"),
         ("Distractors in the index and in the results", report_lib.markdown_table(detail, list(detail[0]))),
         ("Setup", f"{len(dset.questions)} questions (of {s['triplets']} triplets; "
                   f"{s['questions_without_distractors']} without an answer match in the gold "
                   f"context or without a distractor, left out); base corpus {n_base} "
                   f"passages; up to {max_distractors} synthetic near-duplicates per question "
                   f"(variants per question "
                   f"{s['variants_per_question']}; {s['questions_below_max']} questions below "
                   f"{max_distractors}; {s['dropped_with_answer']} candidates dropped because "
                   f"they still contained an answer); exact {result['index']} index, k={k}, "
                   f"seed={seed}."),
         ("Triplets (every gold record counted once)",
          aar_math.reason_table({"questions": dset.fates}, triplets.join)),
         *extra,
         report_lib.columns_section(["K", "top-k", "MRR", "corpus", "distractors/q",
                                     "questions short", "retrieved distractors", "with answer",
                                     "corpus-only top-k", "distractors above 1st corpus hit",
                                     "own above 1st corpus hit"])])
    return result


def _heldout_text(held: Mapping[str, Any], name: str, max_distractors: int) -> str:
    """The robustness.md section of the held-out family."""
    s = held["distractor_stats"]
    kinds = ", ".join(f"{k}: {s.get('built_' + k, 0)} built, "
                      f"{s.get('questions_without_' + k, 'n/a')} questions without one"
                      + (f", {s['skipped_' + k]} passages it cannot apply to"
                         if 'skipped_' + k in s else "")
                      for k in held["kinds"])
    what = ", ".join(KINDS[k].description for k in held["kinds"])
    return (robustness_table({f"{name} held-out": held}) + "\n\n"
            f"Distractors unlike the training p*: {what} "
            f"(dense_cf.synthetic.distractors); kinds alternate in that order, up to "
            f"{max_distractors} per question. {held['n_questions']} questions "
            f"({s['questions_without_distractors']} left out). Per kind: {kinds}. Namesakes: "
            f"{s.get('namesake_world', 0)} from the world's own namesakes, "
            f"{s.get('namesake_built', 0)} built. Compare rows are labelled "
            f"\"K=<K> held-out distractors: ...\"; the p* rows above keep \"K=<K> distractors: "
            f"...\".")


def _norm_table(result: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """``result["table"]`` with int K and int k keys (JSON-loaded results have strings)."""
    return {int(K): dict(e, top_k={int(kk): float(v) for kk, v in e["top_k"].items()})
            for K, e in result["table"].items()}


def robustness_table(results_by_run: Mapping[str, Mapping[str, Any]]) -> str:
    """Markdown table, one row per K, runs side by side: top-k (%) and MRR (×100) per run."""
    if not results_by_run:
        raise ValueError("no runs")
    tables = {name: _norm_table(r) for name, r in results_by_run.items()}
    all_K = sorted({K for t in tables.values() for K in t})
    per_q = {K: {t[K]["distractors_per_question_actual"] for t in tables.values() if K in t}
             for K in all_K}
    same = all(len(v) == 1 for v in per_q.values())
    rows, columns = [], ["K"] + (["distractors/q"] if same else [])
    for K in all_K:
        row: dict[str, Any] = {"K": K}
        if same:
            row["distractors/q"] = next(iter(per_q[K]))
        for name, t in tables.items():
            if K not in t:
                continue
            e = t[K]
            if not same:
                row[f"{name} distractors/q"] = e["distractors_per_question_actual"]
            for kk, v in sorted(e["top_k"].items()):
                row[f"{name} top-{kk}"] = v
            row[f"{name} MRR"] = 100 * e["mrr"]
        rows.append(row)
    for row in rows:
        columns.extend(c for c in row if c not in columns)
    return report_lib.markdown_table(rows, columns)


def plot_runs(results_by_run: Mapping[str, Mapping[str, Any]], path: str,
              title: str | None = None) -> None:
    """Top-k vs. K for several runs in one PNG (``aar_math.topk_vs_distractors_plot``)."""
    aar_math.topk_vs_distractors_plot(
        {name: {K: e["top_k"] for K, e in _norm_table(r).items()}
         for name, r in results_by_run.items()}, path,
        title=title or "Top-k vs. near-duplicate distractors per question (EADPR Fig. 5)")


def _after_training(run: Run, workdir: str) -> dict[str, Any] | None:
    counts = tuple(int(c) for c in run.config.eval.robustness_counts)
    if not counts or not run.config.data.get("gold_file"):  # off, or no triplets to perturb
        return None
    return evaluate_robustness(workdir, run=run, counts=counts, max_distractors=max(counts))


# Top-k and MRR with K near-duplicate distractors per question (config.eval.robustness_counts).
EVALUATOR = Evaluator("robustness", _after_training,
                      metrics=tuple(outcomes.metric(f"robustness.k5.{m}")
                                    for m in ("top1", "top5", "top20", "mrr")),
                      report=outcomes.ROBUSTNESS)


if __name__ == "__main__":  # the design card's command; its binary is cli/eval_robustness.py
    from dense_cf import app
    from dense_cf.cli import eval_robustness
    app.run(eval_robustness.main, eval_robustness.FLAGS, eval_robustness.USAGE)
