"""Answer-awareness of a trained run (docs/method.md §5): ``python -m dense_cf.cli.eval_aar --workdir DIR``.

Triplets (q, p+, p*) come from gold-passage info (DPR's ``nq-test_gold_info.json`` or the
synthetic benchmark's): p+ is the gold context. DPR's gold info carries no answers, so they are
joined from the test qa CSV by ``aar_math.join_gold_with_qa``: by position when both files list
the same normalised question texts in the same order, else the k-th occurrence of a text in one
file with its k-th occurrence in the other (texts repeat when names collide); a gold record's
own ``answers`` win. p* is built by the SAME counterfactual code as training
(``inputs/cf_masks.py`` inside the tf.data pipeline): the ``sentence`` strategy gives PiCL's
AAR (Def. 3), the ``answer`` strategy EADPR's AA score.

Every gold record's fate is counted by reason (``aar_math.AAR_FATES``): scored, or lost for
want of a qa record, a malformed record, an answer not found in the gold context, an answer that
lies only beyond the encoder's ``max_p_len`` word pieces (or a p* that differs from p+ only
there), or no counterfactual under the strategy. The counts add up to the gold records; they are
logged (with the first example of each loss), printed, and written to ``aar.json`` / ``aar.md``.

Reports (``DIR/eval/step_<N>/aar.json``, ``aar.md``, ``aar_hist.png``): AAR per strategy, AAR by
question type (PiCL Table 6), 95 % intervals (Wilson for AAR, bootstrap for the mean score
difference), score differences sim(q,p+) − sim(q,p*) split aware / unaware /
all (PiCL Table 5) and their histogram (PiCL Fig. 6), the triplet counts. Ties count as
mismatches.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

import numpy as np
from absl import logging

from dense_cf.datasets.dpr import resolve_data_file
from dense_cf.datasets.formats import BiencoderExample, Passage, SkipReport, read_gold_info, read_qa_csv
from dense_cf.eval import aar_math, outcomes, stats
from dense_cf.eval import report as report_lib
from dense_cf.eval.base import Evaluator
from dense_cf.inputs import dpr as pipeline
from dense_cf.progress import Progress
from dense_cf.retrieval import export
from dense_cf.text.answers import find_answer_spans
from dense_cf.train.run import Run, RunDir, load_run


@dataclasses.dataclass
class Triplets:
    """Gold (question, answers, title, context) records usable for answer-awareness."""

    questions: list[str]
    answers: list[list[str]]
    titles: list[str]
    contexts: list[str]
    stats: dict[str, Any]
    # Position of each triplet among the readable gold records, for logs and score files.
    gold_index: list[int] = dataclasses.field(default_factory=list)
    join: aar_math.ReasonCounts | None = None  # JOIN_REASONS over every gold record

    def label(self, i: int) -> str:
        """``gold record <n>: '<question>'`` of triplet ``i``, for logs."""
        n = self.gold_index[i] if self.gold_index else i
        return f"gold record {n}: {self.questions[i]!r}"

    def fate_counts(self, reasons: tuple[str, ...]) -> aar_math.ReasonCounts:
        """Fate counts over ``reasons`` holding the losses of the join (none without one)."""
        if self.join is None:
            return aar_math.ReasonCounts(reasons)
        return self.join.carry(reasons, aar_math.LOST_AT_JOIN)

    @property
    def gold_records(self) -> int:
        """Gold records behind these triplets, those lost at the join included."""
        return self.join.total if self.join is not None else len(self.questions)


def single_run_intervals(pos: Any, cf: Any, *, seed: int = 0) -> dict[str, list[float]]:
    """95 % intervals of one run's answer-awareness (docs/method.md §5): ``aar_ci`` (Wilson,
    fraction; aware = pos > cf) and ``score_diff_ci`` (percentile bootstrap of the mean gap
    sim(q,p+) − sim(q,p*) over triplets)."""
    aware = ~aar_math.mismatches(pos, cf)
    boot = stats.bootstrap_mean_ci(aar_math.score_diffs(pos, cf), seed=seed)
    return {"aar_ci": list(stats.wilson_interval(int(aware.sum()), int(aware.size))),
            "score_diff_ci": [boot["lo"], boot["hi"]]}


def load_triplets(gold_path: str, qa_path: str) -> Triplets:
    """Gold info joined with the qa file's answers (``aar_math.join_gold_with_qa``); logs the
    join counts and the first example of each loss."""
    report = SkipReport()
    qa = list(read_qa_csv(qa_path, skip_bad=True, report=report))
    gold = list(read_gold_info(gold_path, skip_bad=True, report=report))
    joined = aar_math.join_gold_with_qa(gold, qa)
    malformed = report.count(file=gold_path)
    if malformed:  # skipped by the reader: counted so that no gold record goes uncounted
        examples = [m for (f, _), ms in report.examples.items() if f == gold_path for m in ms]
        joined.counts.add("malformed_gold_record", examples[0] if examples else "", malformed)
    out = Triplets(
        questions=[gold[i]["question"] for i in joined.index], answers=joined.answers,
        titles=[gold[i]["title"] for i in joined.index],
        contexts=[gold[i]["context"] for i in joined.index],
        stats={"gold_records": len(gold) + malformed, "qa_records": len(qa),
               "join_mode": joined.mode, "qa_records_unused": joined.qa_unused,
               "gold_answers_ignored": joined.gold_answers_ignored,
               "skipped_records": report.total},
        gold_index=list(joined.index), join=joined.counts)
    if report.total:
        report.log()
    logging.info("gold-triplet join (%s): %d gold records, %d qa records (%d unused): %s",
                 joined.mode, out.gold_records, len(qa), joined.qa_unused,
                 joined.counts.summary())
    if joined.counts.lost():
        logging.warning("gold-triplet join: %d of %d gold records lost: %s", joined.counts.lost(),
                        out.gold_records, joined.counts.summary(lost_only=True))
    return out


def _encode_once(fn, side: str, ids: np.ndarray, mask: np.ndarray, memo: dict, *, encoder,
                 progress: Progress) -> np.ndarray:
    """``fn(ids, mask)`` row by row, but each distinct input row encoded once: ``memo`` maps
    ``(side, ids bytes, mask bytes)`` to its vector, across the calls that share it (the
    strategies of one AAR evaluation read the same q and p+ rows; questions sharing a gold
    context, the same p+). Identical inputs, so the vectors are those of encoding every row
    (within float tolerance: a bucketed encoder pads a row by its batch)."""
    keys = [(side, i.tobytes(), m.tobytes()) for i, m in zip(ids, mask)]
    todo = list({k: r for r, k in enumerate(keys) if k not in memo}.values())
    progress.update(len(keys) - len(todo))
    if todo:
        rows = np.asarray(todo)
        for k, v in zip((keys[r] for r in todo),
                        export.encode_in_slices(fn, ids[rows], mask[rows], encoder=encoder,
                                                progress=progress)):
            memo[k] = v
    return np.stack([memo[k] for k in keys])


def triplet_scores(run, triplets: Triplets, strategy: str, *, encoder=None,
                   batch_size: int = 128, memo: dict | None = None) -> dict[str, Any]:
    """sim(q, p+) and sim(q, p*) of every triplet scored under ``strategy``, and the fate of
    every gold record (``fates``: ``aar_math.AAR_FATES`` counts, summing to the gold records).
    ``memo`` (kept by the caller) shares encodings between calls (:func:`_encode_once`).

    A triplet is scored when its answer matches the gold context (DPR rules, ``answer_mode``),
    an answer token lies within the max_p_len word pieces the encoder sees of p+, and p* exists
    and differs from p+ within them; otherwise it is counted under the first reason that fails.
    """
    cfg = run.config
    examples = [BiencoderExample(q, a, [Passage(title=t, text=c)], [], [])
                for q, a, t, c in zip(triplets.questions, triplets.answers, triplets.titles,
                                      triplets.contexts)]
    data = pipeline.preprocess(examples, run.tokenizer, max_q_len=cfg.data.max_q_len,
                               max_p_len=cfg.data.max_p_len, max_hard=0,
                               answer_mode=cfg.data.answer_mode)
    spec = pipeline.PipelineSpec(global_batch=1, max_q_len=cfg.data.max_q_len,
                                 max_p_len=cfg.data.max_p_len, num_hard=0, strategy=strategy,
                                 window=cfg.data.window, pad_id=run.tokenizer.token_to_id("[PAD]") or 0,
                                 sep_id=run.tokenizer.token_to_id("[SEP]"), shuffle=False)
    cols: dict[str, list[np.ndarray]] = {}
    n = len(examples)
    # Building p* runs example by example in tf.data: tens of seconds per strategy.
    with Progress(f"AAR {strategy}: building counterfactuals", n, unit="triplets") as progress:
        for batch in pipeline.make_eval_dataset(data, spec):
            for key in ("q_ids", "q_mask", "pos_ids", "pos_mask", "cf_ids", "cf_mask", "cf_valid"):
                cols.setdefault(key, []).append(batch[key])
            progress.update(len(batch["q_ids"]))
    arr = {k: np.concatenate(v) for k, v in cols.items()}
    cf_valid = arr["cf_valid"].astype(bool)
    # p+ is cut to its first max_p_len - 1 body word pieces plus [SEP] (inputs.source.fix_len).
    seen = cfg.data.max_p_len - 1
    fates = triplets.fate_counts(aar_math.AAR_FATES)
    valid = np.zeros(n, bool)
    for i in range(n):
        if not find_answer_spans(triplets.contexts[i], triplets.answers[i],
                                 mode=cfg.data.answer_mode):
            reason = "answer_not_in_context"
        elif not data.pos_ans.row(i)[:seen].any():
            reason = "truncated_by_max_p_len"
        elif not cf_valid[i]:
            reason = "no_counterfactual"
        elif (np.array_equal(arr["pos_ids"][i], arr["cf_ids"][i])
              and np.array_equal(arr["pos_mask"][i], arr["cf_mask"][i])):
            reason = "truncated_by_max_p_len"  # the removed text lies beyond the window
        else:
            reason, valid[i] = "scored", True
        fates.add(reason, triplets.label(i))
    fates.check_total(triplets.gold_records, f"AAR triplets ({strategy})")
    idx = np.flatnonzero(valid)
    if len(idx):
        encoder = encoder or export.Encoder(run, batch_size)
        memo = {} if memo is None else memo
        with Progress(f"AAR {strategy}: encoding q, p+ and p*", 3 * len(idx), unit="vectors") as progress:
            q, pos, cf = (_encode_once(fn, side, arr[f"{key}_ids"][valid], arr[f"{key}_mask"][valid],
                                       memo, encoder=encoder, progress=progress)
                          for fn, side, key in ((encoder.questions, "q", "q"),
                                                (encoder.passages, "p", "pos"),
                                                (encoder.passages, "p", "cf")))
        pos_s, cf_s = np.einsum("bd,bd->b", q, pos), np.einsum("bd,bd->b", q, cf)
    else:
        pos_s = cf_s = np.zeros(0, np.float32)
    return {"pos": pos_s, "cf": cf_s, "questions": [triplets.questions[i] for i in idx],
            "index": idx, "no_counterfactual": fates.counts["no_counterfactual"], "fates": fates}


def evaluate_aar(workdir: str, *, gold_path: str | None = None, qa_path: str | None = None,
                 strategies: Sequence[str] | None = None, run=None,
                 out_dir: str | None = None, encoder=None) -> dict[str, Any]:
    """AAR / AA score report of a run; returns the report (also written to disk).

    ``encoder`` (default ``export.Encoder`` of the run) needs ``questions(ids, mask)`` and
    ``passages(ids, mask)`` returning one vector per row.
    """

    run = run or load_run(workdir)
    cfg = run.config
    strategies = list(strategies or cfg.eval.aar_strategies)
    triplets = load_triplets(resolve_data_file(cfg.data, "gold_file", gold_path),
                              resolve_data_file(cfg.data, "test_file", qa_path))
    if not triplets.questions:
        raise ValueError(f"no usable triplets: {triplets.stats} {triplets.join}")
    encoder = encoder or export.Encoder(run, cfg.eval.batch_size)
    out_dir = out_dir or RunDir(workdir).eval(run.step)
    os.makedirs(out_dir, exist_ok=True)
    result: dict[str, Any] = {"workdir": os.path.abspath(workdir), "method": cfg.method,
                              "step": run.step, "triplet_stats": triplets.stats,
                              "triplet_join": triplets.join.to_json() if triplets.join else None,
                              "strategies": {}, "out_dir": os.path.abspath(out_dir),
                              "units": report_lib.JSON_UNITS}
    diffs = {}
    fates: dict[str, aar_math.ReasonCounts] = {}
    memo: dict = {}  # the strategies share q and p+ encodings: each row is encoded once
    for strategy in strategies:
        s = triplet_scores(run, triplets, strategy, encoder=encoder, memo=memo)
        fates[strategy] = s["fates"]
        entry = {"triplets": int(len(s["pos"])), "no_counterfactual": s["no_counterfactual"],
                 "triplet_fates": s["fates"].counts,
                 "first_lost": {r: x for r, x in s["fates"].first.items()
                                if r in aar_math.LOSS_REASONS}}
        if len(s["pos"]):
            entry["aar"] = aar_math.aar(s["pos"], s["cf"])
            entry.update(single_run_intervals(s["pos"], s["cf"]))
            entry["by_type"] = aar_math.aar_by_type(s["questions"], s["pos"], s["cf"])
            entry["score_diff"] = aar_math.score_diff_stats(s["pos"], s["cf"])
            diffs[strategy] = aar_math.score_diffs(s["pos"], s["cf"])
        gold_index = np.asarray(triplets.gold_index or range(len(triplets.questions)), np.int64)
        # Per-triplet outcomes for paired comparisons (dense_cf.eval.compare pairs triplets by
        # gold record and checks the question texts).
        with report_lib.atomic_open(os.path.join(out_dir, outcomes.aar_scores_name(strategy)), "wb") as f:
            np.savez(f, pos=s["pos"], cf=s["cf"], index=s["index"],
                     gold_index=gold_index[s["index"]],
                     questions=np.asarray(s["questions"], dtype=str))
        result["strategies"][strategy] = entry
        logging.info("AAR %s (%s): %s over %d of %d gold records; %s", cfg.method, strategy,
                     entry.get("aar"), entry["triplets"], triplets.gold_records,
                     s["fates"].summary())
        if s["fates"].lost():
            logging.warning("AAR %s (%s): %d of %d gold records not scored: %s", cfg.method,
                            strategy, s["fates"].lost(), triplets.gold_records,
                            s["fates"].summary(lost_only=True))
    if diffs:
        aar_math.histogram_plot({f"{cfg.method} ({k})": v for k, v in diffs.items()},
                                os.path.join(out_dir, "aar_hist.png"),
                                title=f"sim(q,p+) - sim(q,p*) — {cfg.method}, step {run.step}")
    report_lib.write_json(os.path.join(out_dir, outcomes.AAR), result)
    rows = []
    for strategy, e in result["strategies"].items():
        sd = e.get("score_diff", {})
        ci, gap_ci = e.get("aar_ci"), e.get("score_diff_ci")
        rows.append({"strategy": strategy, "triplets": e["triplets"],
                     "AAR (%)": 100 * e.get("aar", float("nan")),
                     "AAR 95% CI (Wilson)": "[{:.2f}, {:.2f}]".format(*(100 * x for x in ci))
                     if ci else None,
                     "mean diff (all)": sd.get("all", {}).get("mean", float("nan")),
                     "mean diff 95% CI (bootstrap)": "[{:.4f}, {:.4f}]".format(*gap_ci)
                     if gap_ci else None,
                     "mean diff (aware)": sd.get("aware", {}).get("mean", float("nan")),
                     "mean diff (unaware)": sd.get("unaware", {}).get("mean", float("nan"))})
    sections = [("Answer-awareness (AAR: sentence strategy; AA score: answer strategy)",
                 report_lib.markdown_table(rows, list(rows[0])))]
    first = result["strategies"].get("sentence") or next(iter(result["strategies"].values()))
    if "by_type" in first:
        type_rows = [{"type": t, "count": v["count"], "AAR (%)": 100 * v["aar"]}
                     for t, v in first["by_type"].items()]
        sections.append(("AAR by question type", report_lib.markdown_table(type_rows, list(type_rows[0]))))
    sections.append(("Triplets (every gold record counted once per strategy)",
                     aar_math.reason_table(fates, triplets.join)))
    if diffs:
        sections.append(("Score gaps", "![histogram of sim(q,p+) − sim(q,p*)](aar_hist.png)"))
    sections.append(report_lib.columns_section(["triplets", "AAR", "AA score", "mean diff", "95% CI"]))
    report_lib.write_markdown(os.path.join(out_dir, "aar.md"), f"Answer-awareness: {workdir}", sections)
    return result


def _after_training(run: Run, workdir: str) -> dict[str, Any] | None:
    if not run.config.data.get("gold_file"):  # no triplets to score
        return None
    return evaluate_aar(workdir, run=run)


# AAR and the AA score (per-triplet scores of each strategy beside the report).
EVALUATOR = Evaluator("aar", _after_training,
                      metrics=tuple(outcomes.metric(m) for m in (
                          "aar.sentence", "aar.sentence.gap", "aar.answer", "aar.answer.gap")),
                      report=outcomes.AAR)


if __name__ == "__main__":  # the design card's command; its binary is cli/eval_aar.py
    from dense_cf import app
    from dense_cf.cli import eval_aar
    app.run(eval_aar.main, eval_aar.FLAGS, eval_aar.USAGE)
