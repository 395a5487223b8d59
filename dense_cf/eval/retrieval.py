"""Retrieval evaluation of a trained run: export → index → search → DPR-exact metrics (docs/method.md §6).

``python -m dense_cf.cli.eval_retrieval --workdir DIR [--corpus F] [--qa F] [--index flat]
[--k 100]``

Writes to ``DIR/eval/step_<N>/``: ``retrieval.json`` (DPR's result format: question, answers,
ctxs with id/title/text/score/has_answer), ``run.trec`` + ``qrels.trec`` (pyserini/trec_eval),
``report.json`` (top-k, MRR, their 95 % intervals, the questions and their first-hit ranks, so
that ``python -m dense_cf.eval.compare`` can pair two runs) and ``report.md``. Embeddings go to
``DIR/export/step_<N>/`` and the index to ``DIR/index/step_<N>_<kind>/``; both are reused (and
an interrupted export resumes) when the command is run again on the same corpus. Reuse is keyed
by the corpus content (sha256 over ids, titles and texts, see :mod:`dense_cf.retrieval.export`), not by
row counts: an export of another corpus in ``DIR/export/step_<N>/`` is an error naming both
corpora, never reused. The index records the export it was built from (``export_source.json``:
corpus fingerprint, settings, row count) and is rebuilt when that differs (or is missing, as
in indexes built before it existed).

The corpus is read through its passage store (``DIR/corpus_store/``, or ``eval.corpus_store`` to
share one between runs), written in one streamed pass on first use: export streams its rows and
the results read the retrieved passages from the memory-mapped store, so memory does not grow
with the corpus's text (docs/scale.md "End to end at scale").

Sentence-level runs (DCSR, docs/method.md §4) go through the same command and reports: the export
holds one vector per contextual sentence, the top ``ceil(k · k̄)`` sentences are retrieved
(k̄ = mean sentences per passage), softmaxed per question and aggregated into passage scores
HasAns(P) = 1 − Π(1 − p_i) (:mod:`dense_cf.retrieval.sentence_ranking`); the top k passages are then
scored exactly as DPR's (``score`` in the result files is HasAns).
"""

from __future__ import annotations

import os
import time
from typing import Any

from absl import logging

from dense_cf.datasets.dpr import resolve_data_file
from dense_cf.eval import metrics as metrics_lib
from dense_cf.eval import outcomes, stats
from dense_cf.eval import report as report_lib
from dense_cf.eval import results as results_lib
from dense_cf.eval.base import Evaluator
from dense_cf.files import remove_if_exists
from dense_cf.index.shards import MANIFEST
from dense_cf.retrieval.corpus import StoredCorpus, load_qa, open_corpus
from dense_cf.retrieval.retriever import retriever_for_run
from dense_cf.train.run import Run, RunDir, load_run


def run_corpus(workdir: str, cfg, corpus_path: str | None = None, *,
               rebuild_changed: bool = False) -> tuple[RunDir, StoredCorpus]:
    """The directories of a run's artifacts for a corpus (``corpus_path``, default the config's)
    and the corpus, streamed through its passage store (``eval.corpus_store``, default in those
    directories): a 21M-passage corpus is never held in memory. A corpus changed since its
    store was built is refused; ``rebuild_changed`` rebuilds the store instead."""
    corpus_file = resolve_data_file(cfg.data, "corpus_file", corpus_path)
    rd = RunDir(workdir).for_corpus(cfg, corpus_file)  # another corpus: its own directories
    return rd, open_corpus(corpus_file, cfg.eval.corpus_store or rd.corpus_store(),
                           rebuild_changed=rebuild_changed)


def _forget_export_of_changed_corpus(rd: RunDir, step: int) -> None:
    """With --rebuild_changed_corpus: the export's manifest goes, so the export re-checks every
    shard by the hash of its rows (unchanged shards kept, changed ones re-encoded in place) and
    the index, which records the export's corpus, is rebuilt if that changed."""
    path = os.path.join(rd.export(step), MANIFEST)
    if os.path.exists(path):
        logging.warning("--rebuild_changed_corpus: re-checking the export in %s shard by shard",
                        rd.export(step))
        remove_if_exists(path)


def evaluate_run(workdir: str, *, corpus_path: str | None = None, qa_path: str | None = None,
                 index_kind: str | None = None, k: int | None = None, run=None,
                 out_dir: str | None = None, rebuild_changed_corpus: bool = False) -> dict[str, Any]:
    """The full retrieval evaluation of a run; returns the report dict (also written to disk).
    A corpus changed since its store and export were made is refused, or with
    ``rebuild_changed_corpus`` they are rebuilt from it."""
    run = run or load_run(workdir)
    cfg = run.config
    kind = index_kind or cfg.eval.index
    k = k or cfg.eval.k
    ks = tuple(int(x) for x in cfg.eval.ks)
    rd, corpus = run_corpus(workdir, cfg, corpus_path, rebuild_changed=rebuild_changed_corpus)
    if rebuild_changed_corpus:
        _forget_export_of_changed_corpus(rd, run.step)
    questions, answers = load_qa(resolve_data_file(cfg.data, "test_file", qa_path))
    retriever = retriever_for_run(run, corpus, rd.root, kind=kind, k=k)
    timing, extra = retriever.timing, retriever.extra
    t0 = time.perf_counter()
    retrieved = retriever.search(retriever.encode_questions(questions), k)
    timing["search_s"] = time.perf_counter() - t0
    rep = metrics_lib.evaluate_retrieval(questions, answers, retrieved, mode=cfg.data.answer_mode,
                                         ks=ks)
    out_dir = out_dir or rd.eval(run.step)
    os.makedirs(out_dir, exist_ok=True)
    results_lib.write_dpr_results(os.path.join(out_dir, "retrieval.json"), questions, answers,
                                  retrieved, rep["hits"], mode=cfg.data.answer_mode)
    qids = [str(i) for i in range(len(questions))]
    results_lib.write_trec_run(os.path.join(out_dir, "run.trec"), qids, retrieved,
                               run_name=f"dense_cf_{cfg.method}")
    results_lib.write_trec_qrels(os.path.join(out_dir, "qrels.trec"), qids, rep["hits"], retrieved)
    intervals = stats.rank_intervals(rep["first_hit_rank"], ks)
    summary = {"workdir": os.path.abspath(workdir), "method": cfg.method, "step": run.step,
               "index": kind, "k": k, "corpus_size": len(corpus), "n_questions": rep["n_questions"],
               "top_k": rep["top_k"], "mrr": rep["mrr"], **intervals, "mode": rep["mode"],
               "corpus_rows_skipped": dict(corpus.skipped),
               "empty_answers": sum(1 for a in answers if not a),
               "timing": timing, **extra, "out_dir": os.path.abspath(out_dir),
               "units": report_lib.JSON_UNITS}
    # Per-question outcomes, in question order, so that runs can be compared afterwards
    # (dense_cf.eval.compare pairs questions by text).
    report_lib.write_json(os.path.join(out_dir, outcomes.REPORT),
                          dict(summary, questions=list(questions),
                               first_hit_rank=rep["first_hit_rank"]))
    row = {"method": cfg.method, "step": run.step, **{f"top-{kk}": rep["top_k"][kk] for kk in ks},
           "MRR": 100 * rep["mrr"]}
    ci_row = {"method": cfg.method, "step": run.step,
              **{f"top-{kk}": "[{:.2f}, {:.2f}]".format(*intervals["top_k_ci"][kk]) for kk in ks},
              "MRR": "[{:.2f}, {:.2f}]".format(*(100 * x for x in intervals["mrr_ci"]))}
    table = report_lib.markdown_table([row], list(row))
    table += ("\n\n95 % intervals (Wilson for top-k, percentile bootstrap for MRR, "
              f"{stats.DEFAULT_RESAMPLES} resamples, seed 0):\n\n"
              + report_lib.markdown_table([ci_row], list(ci_row)))
    report_lib.write_markdown(os.path.join(out_dir, "report.md"), f"Retrieval: {workdir}",
                              [("Top-k accuracy and MRR (%)", table),
                               ("Setup", f"index={kind}, k={k}, corpus={len(corpus)} passages, "
                                         f"questions={rep['n_questions']}"
                                         + (f" ({summary['empty_answers']} with an empty answer "
                                            "list: always misses)" if summary["empty_answers"] else "")
                                         + ("; corpus rows skipped: " + ", ".join(
                                             f"{n} {r}" for r, n in corpus.skipped.items())
                                            if corpus.skipped else "")
                                         + (f"; DCSR: {extra['sentences']} sentences indexed, "
                                            f"top {extra['sentences_retrieved']} retrieved, "
                                            f"passages ranked by HasAns" if extra else "")),
                               report_lib.columns_section(["top-k", "MRR", "95% CI"])])
    logging.info("retrieval %s step %d: %s MRR=%.4f", cfg.method, run.step,
                 {kk: round(v, 2) for kk, v in rep["top_k"].items()}, rep["mrr"])
    return summary


def _after_training(run: Run, workdir: str) -> dict[str, Any]:
    return evaluate_run(workdir, run=run)


# Top-k and MRR of the run's test questions (per-question first-hit ranks in its report).
EVALUATOR = Evaluator("retrieval", _after_training,
                      metrics=tuple(outcomes.metric(f"retrieval.{m}")
                                    for m in ("top1", "top5", "top20", "top100", "mrr")),
                      report=outcomes.REPORT)


if __name__ == "__main__":  # the design card's command; its binary is cli/eval_retrieval.py
    from dense_cf import app
    from dense_cf.cli import eval_retrieval
    app.run(eval_retrieval.main, eval_retrieval.FLAGS, eval_retrieval.USAGE)
