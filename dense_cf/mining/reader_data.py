"""A retriever's results on the TRAIN / dev questions: the extractive reader's training data.

``python -m dense_cf.cli.reader_data --retriever RUN --split train [--qa FILE] [--k 100]
[--max_questions N]`` (docs/readers.md, "Commands"). The questions and answers of ``--split``
come from the run's own files (``data.train_file`` / ``dev_file``: biencoder JSON, whose
examples without a positive the reader skips and counts, or ``test_file``: a qa CSV) or from
``--qa`` (either format). They are written as a qa CSV into
``RUN/reader_data/step_N/<split>/`` and retrieved there exactly as the retrieval evaluation does
(:func:`dense_cf.eval.retrieval.evaluate_run`: the run's export and index are reused), giving
``retrieval.json`` (DPR's results format, the reader's ``config.reader.<split>_file``) with
the retrieval reports (the retriever's top-k on those questions). Stages talk through
files: the reader never imports the retriever.

A two-hop retriever (``Method.hops == 2``: MDR; docs/multihop.md, "Reader") gives chains instead:
its ``--split`` HotpotQA file goes through :func:`dense_cf.eval.multihop.evaluate_multihop`
(beam search, no AAR) into the same directory, and ``retrieval.json`` holds each question's top
chains, each one passage (:func:`dense_cf.eval.multihop.chain_results`: both passages, titles
kept, ``has_answer`` on the chain); yes/no questions are left out and counted.
"""

from __future__ import annotations

import json
import os
from typing import Any

from absl import logging

from dense_cf.datasets import formats
from dense_cf.datasets.dpr import resolve_data_file
from dense_cf.eval.multihop import chain_results, evaluate_multihop
from dense_cf.eval.retrieval import evaluate_run
from dense_cf.files import write_json
from dense_cf.retrieval.corpus import load_corpus
from dense_cf.train.run import RunDir, load_run

__all__ = ["SPLIT_FILES", "chain_reader_data", "read_questions", "reader_data", "split_files"]

SPLIT_FILES = {"train": "train_file", "dev": "dev_file", "test": "test_file"}


def read_questions(path: str, max_questions: int = 0) -> tuple[list[str], list[list[str]], int]:
    """``(questions, answers, skipped records)`` of a biencoder JSON (``.json``/``.json.gz``)
    or a qa CSV (anything else); bad records are skipped, counted and logged."""
    report = formats.SkipReport()
    name = os.path.basename(path).lower()
    if name.endswith((".json", ".json.gz")):
        rows = ((ex.question, ex.answers) for ex in
                formats.iter_biencoder(path, skip_bad=True, report=report))
    else:
        rows = formats.read_qa_csv(path, skip_bad=True, report=report)
    questions, answers = [], []
    for q, a in rows:
        if max_questions and len(questions) >= max_questions:
            break
        questions.append(q)
        answers.append(list(a))
    if report.total:
        report.log()
    return questions, answers, report.total


def reader_data(workdir: str, split: str, *, qa_path: str | None = None, k: int | None = None,
                max_questions: int = 0, out_dir: str | None = None, index_kind: str | None = None,
                corpus_path: str | None = None, step: int | None = None, run=None) -> dict[str, Any]:
    """Retrieves for the ``split`` questions with the retriever ``workdir`` (module docstring);
    returns the retrieval summary plus ``retrieval_json`` (the file the reader reads)."""
    if split not in SPLIT_FILES:
        raise ValueError(f"split must be one of {sorted(SPLIT_FILES)}, got {split!r}")
    run = run or load_run(workdir, step)
    if run.method.kind != "retriever":
        raise ValueError(f"{workdir} is a {run.method.kind} run ({run.method.name}); reader data "
                         f"comes from a retriever's results")
    if run.method.hops == 2:
        return chain_reader_data(workdir, split, run=run, qa_path=qa_path, k=k,
                                 max_questions=max_questions, out_dir=out_dir,
                                 index_kind=index_kind, corpus_path=corpus_path)
    source = resolve_data_file(run.config.data, SPLIT_FILES[split], qa_path)
    questions, answers, skipped = read_questions(source, max_questions)
    if not questions:
        raise ValueError(f"{source}: no questions to retrieve for")
    out_dir = out_dir or RunDir(workdir).reader_data(run.step, split)
    os.makedirs(out_dir, exist_ok=True)
    qa_csv = os.path.join(out_dir, "questions.qa.csv")
    formats.write_qa_csv(qa_csv, zip(questions, answers))
    logging.info("reader data: %d %s questions of %s (%d records skipped)", len(questions), split,
                 source, skipped)
    summary = evaluate_run(workdir, run=run, qa_path=qa_csv, out_dir=out_dir, k=k,
                           index_kind=index_kind, corpus_path=corpus_path)
    summary.update(split=split, source=os.path.abspath(source), source_records_skipped=skipped,
                   retrieval_json=os.path.join(os.path.abspath(out_dir), "retrieval.json"))
    write_json(os.path.join(out_dir, "reader_data.json"), summary)
    return summary


def chain_reader_data(workdir: str, split: str, *, run, qa_path: str | None = None,
                      k: int | None = None, max_questions: int = 0, out_dir: str | None = None,
                      index_kind: str | None = None, corpus_path: str | None = None
                      ) -> dict[str, Any]:
    """A two-hop retriever's top ``k`` chains (default ``multihop.top_chains``) on the ``split``
    HotpotQA questions as ``retrieval.json`` (module docstring); returns the multi-hop summary
    plus ``retrieval_json`` and ``chain_counts``."""
    source = resolve_data_file(run.config.data, SPLIT_FILES[split], qa_path)
    corpus_file = resolve_data_file(run.config.data, "corpus_file", corpus_path)
    out_dir = out_dir or RunDir(workdir).reader_data(run.step, split)
    os.makedirs(out_dir, exist_ok=True)
    summary = evaluate_multihop(workdir, run=run, qa_path=source, corpus_path=corpus_file,
                                index_kind=index_kind, top_chains=k, out_dir=out_dir,
                                max_questions=max_questions, aar=False)
    with open(os.path.join(out_dir, "chains.json")) as f:
        chain_records = json.load(f)
    records, counts = chain_results(chain_records, load_corpus(corpus_file),
                                    answer_mode=run.config.data.answer_mode)
    if not records:
        raise ValueError(f"{source}: no question with a span answer to read")
    path = os.path.join(os.path.abspath(out_dir), "retrieval.json")
    write_json(path, records)
    logging.info("reader data: top-%d chains of %d %s questions of %s (%s)",
                 summary["top_chains"], counts["kept"], split, source, counts)
    summary.update(split=split, source=os.path.abspath(source), chain_counts=counts,
                   retrieval_json=path)
    write_json(os.path.join(out_dir, "reader_data.json"), summary)
    return summary


def split_files(workdir: str, run, questions: dict[str, int], *, k: int | None = None
                ) -> dict[str, str]:
    """``{split: retrieval.json}`` of the retriever ``workdir`` on the first ``n`` questions of
    each split in ``questions`` (``{split: n}``, 0: all), written by :func:`reader_data` unless
    already there (a reader's train / dev files)."""
    files = {}
    for split, n in questions.items():
        path = os.path.join(RunDir(workdir).reader_data(run.step, split), "retrieval.json")
        if not os.path.exists(path):
            logging.info("reader data: %s retrieves for %s %s questions", workdir, n or "all",
                         split)
            reader_data(workdir, split, k=k, max_questions=n, run=run)
        files[split] = path
    return files
