"""Pseudo-evidence annotations for the ``evidence`` counterfactual strategy (EADPR §3.1, docs/method.md §2).

Command::

    python -m dense_cf.cli.evidence --input data/dpr/biencoder-nq-train.json.gz \\
        --output data/dpr/biencoder-nq-train.evidence.jsonl --scorer t5:allenai/unifiedqa-t5-base

For every example of the biencoder file, p+ = ``positive_ctxs[0].text`` is split into sentences
with ``split_sentences`` (the ids the pipeline gives its tokens, ``token_sentence_ids``), every
leave-one-sentence-out candidate is scored by a QA model (``dense_cf.mining.evidence.scorer``) and the
sentence whose removal gives the LOWEST confidence is written out.

Output: append-only JSONL, one line per example::

    {"index": i, "sentence": s, "question": q, "source": "biencoder-nq-train.json",
     "n_sentences": n, "scores": [confidence of each candidate]}
    {"index": j, "sentence": -1, "question": q, "source": ..., "skip": "single_sentence"}

``index`` is the example's position in ``iter_biencoder(path, skip_bad=True)`` — the order in
which the pipeline numbers its examples, bad records (skipped by the reader, counted) excluded.
Both sides use the same reader, so they agree; the ``question`` and ``source`` fields make
that checkable: the pipeline (:class:`EvidenceMatcher`) ignores records made for another file
(e.g. the train annotations when it loads the dev split) and raises on a record whose question
differs from the example at its index (a changed or re-ordered input). ``sentence`` -1 marks an
example without a usable span (no answers, empty text, a single sentence): it trains without
a counterfactual, like an example without an answer match under the ``sentence`` strategy.

Resumable: on restart a torn last line from a crash is cut off (:func:`repair_torn_tail`:
this command owns the file; readers never change it), the existing lines are read,
their indices are skipped (their questions checked against the input), and new lines are
appended and flushed after every chunk. Progress (examples/s) is logged; the command prints
the summary (counts per skip reason, answer matches, time) as JSON at the end.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any

import numpy as np
from absl import logging

from dense_cf.datasets.evidence_file import EvidenceRecord, read_evidence, source_name
from dense_cf.datasets.formats import BiencoderExample, DataFormatError, SkipReport, iter_biencoder
from dense_cf.files import UserError
from dense_cf.mining.evidence import candidates as cand
from dense_cf.mining.evidence.scorer import QAItem
from dense_cf.progress import Progress


@dataclasses.dataclass
class AnnotateStats:
    examples: int = 0          # examples of this shard read (bad records excluded)
    already_done: int = 0      # found in the output of an earlier run
    annotated: int = 0         # written with a sentence this run
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)  # per reason, this run
    answer_not_in_passage: int = 0   # annotated although no answer string-matches p+
    chose_answer_sentence: int = 0   # chosen sentence holds an answer match (agrees with `sentence`)
    candidates_scored: int = 0
    seconds: float = 0.0


def _write(f, rec: dict[str, Any]) -> None:
    f.write(json.dumps(rec, ensure_ascii=False) + "\n")


def repair_torn_tail(path: str) -> int:
    """Makes an interrupted run's output whole again; returns the bytes cut.

    Only this writer changes its output: a last line without its line end that is not a JSON
    value is what a crash in the middle of a write leaves, and is cut; one that is a complete
    JSON value only lost its line end, which is added. Anything else is left for
    :func:`read_evidence` to report. (Lines are appended in one write each, so a crash leaves at
    most one torn line, at the end.)
    """
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        if not size:
            return 0
        f.seek(max(0, size - (1 << 20)))
        tail = f.read()
    if tail.endswith(b"\n"):
        return 0
    cut = tail.rfind(b"\n") + 1
    if cut == 0 and size > len(tail):
        raise DataFormatError(path, None, "<row>", "the last line is over 1 MB without a line end: "
                              "not an interrupted write of this command", reason="incomplete last line")
    last = tail[cut:]
    try:
        json.loads(last)
    except (ValueError, RecursionError):
        with open(path, "r+b") as f:
            f.truncate(size - len(last))
        logging.warning("%s: cut a torn last line (%d bytes) left by an interrupted run",
                        path, len(last))
        return len(last)
    with open(path, "ab") as f:
        f.write(b"\n")
    return 0


def annotate(input_path: str, output_path: str, scorer, *, max_answers: int = 1,
             answer_mode: str = "string", chunk_examples: int = 64, max_examples: int = 0,
             log_every_s: float = 30.0, num_shards: int = 1, shard_id: int = 0) -> AnnotateStats:
    """Writes/extends ``output_path`` (see module docstring); returns this run's counts.

    ``scorer`` is a :class:`dense_cf.mining.evidence.scorer.QAScorer`. ``max_examples`` stops after
    that many input examples (0 = all), like ``config.data.max_train_examples``. With
    ``num_shards`` > 1 only examples with ``index % num_shards == shard_id`` are annotated (one
    process/host per shard, each with its own output); indices stay global, so the shard files
    concatenated are the full annotation.
    """
    if not 0 <= shard_id < num_shards:
        raise ValueError(f"shard_id must be in [0, {num_shards}), got {shard_id}")

    source = source_name(input_path)
    done: dict[int, EvidenceRecord] = {}
    if os.path.exists(output_path):
        repair_torn_tail(output_path)
        done = read_evidence(output_path)
        wrong = sorted({r.source for r in done.values() if r.source != source}, key=str)
        if wrong:
            raise UserError(f"{output_path} already holds annotations of {wrong[:3]}, not {source}: "
                            "choose another --output")
        logging.info("resuming %s: %d examples already annotated", output_path, len(done))
    os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)
    stats = AnnotateStats()
    report = SkipReport()
    t0 = time.monotonic()

    def detail() -> str:
        skipped = sum(stats.skipped.values())
        return f"{stats.annotated + skipped} new, {skipped} skipped, {stats.already_done} resumed"

    # The input is streamed, so the total is known only when max_examples caps it.
    total = len(range(shard_id, max_examples, num_shards)) if max_examples else None
    progress = Progress("evidence", total, unit="examples", every_s=log_every_s, detail=detail)
    pending: list[tuple[int, BiencoderExample]] = []

    def flush(f) -> None:
        plans, items, spans = [], [], []
        for i, ex in pending:
            plan = cand.plan_example(ex.question, ex.answers, ex.positive_ctxs[0].text,
                                     max_answers=max_answers, answer_mode=answer_mode)
            plans.append(plan)
            if isinstance(plan, str):
                spans.append(None)
                continue
            start = len(items)
            items.extend(QAItem(ex.question, a, c) for c in plan.candidates for a in plan.answers)
            spans.append((start, len(items)))
        scores = scorer.score(items) if items else np.zeros(0)
        if len(scores) != len(items):
            raise RuntimeError(f"scorer {scorer.name} returned {len(scores)} scores for {len(items)} items")
        stats.candidates_scored += len(items)
        for (i, ex), plan, span in zip(pending, plans, spans):
            rec: dict[str, Any] = {"index": i}
            if isinstance(plan, str):
                rec.update(sentence=-1, question=ex.question, source=source, skip=plan)
                stats.skipped[plan] = stats.skipped.get(plan, 0) + 1
            else:
                grid = scores[span[0]:span[1]].reshape(plan.num_sentences, len(plan.answers))
                conf = cand.candidate_confidence(grid)
                rec.update(sentence=cand.select_lowest(conf), question=ex.question, source=source,
                           n_sentences=plan.num_sentences, scores=[round(float(c), 5) for c in conf])
                stats.annotated += 1
                stats.answer_not_in_passage += int(not plan.answer_in_passage)
                stats.chose_answer_sentence += int(rec["sentence"] in plan.answer_sentences)
            _write(f, rec)
        f.flush()
        os.fsync(f.fileno())  # a chunk is either fully on disk or (torn tail) repaired on resume
        pending.clear()

    with open(output_path, "a", encoding="utf-8") as f:
        it = iter_biencoder(input_path, skip_bad=True, report=report)
        for i, ex in enumerate(it):
            if max_examples and i >= max_examples:
                break
            if i % num_shards != shard_id:
                continue
            stats.examples += 1
            rec = done.get(i)
            if rec is not None:
                if rec.question is not None and rec.question != ex.question:
                    raise DataFormatError(output_path, i, "question",
                                          f"example {i} was annotated for question "
                                          f"{rec.question!r:.80}, but {input_path} now has "
                                          f"{ex.question!r:.80}", reason="question mismatch")
                stats.already_done += 1
                progress.skip(1)  # resumed: counted, but not in the rate
                continue
            pending.append((i, ex))
            if len(pending) >= chunk_examples:
                flush(f)
            progress.update(1)
        if pending:
            flush(f)
    progress.done()
    stats.seconds = time.monotonic() - t0
    if report.total:
        report.log()
    stats.skipped["bad_records_in_input"] = report.total
    return stats


if __name__ == "__main__":  # the design card's command; its binary is cli/evidence.py
    from dense_cf import app
    from dense_cf.cli import evidence
    app.run(evidence.main, evidence.FLAGS, evidence.USAGE)
