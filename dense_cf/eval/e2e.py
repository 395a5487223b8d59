"""End-to-end QA: a reader over each retriever's saved top-k passages → EM / F1 (docs/readers.md).

``python -m dense_cf.eval.e2e --retriever RUN [--retriever RUN2 ...] --reader READER_RUN
--k 1,5,20,100`` (the binary is ``dense_cf/cli/eval_e2e.py``; this module is the library).

A retriever is named by its run directory (its latest ``eval/step_N/retrieval.json``), an eval
directory, or a ``retrieval.json`` path (DPR's format, ours or DPR's own). Nothing is
retrieved again: the reader reads the saved lists, so one reader run pairs with any retriever.
The reader is any reader-kind method with a ``predict`` (``Method.predict``; the extractive
reader now, FiD later): this module never asks which one.

Writes to ``READER/e2e/step_N/`` (or ``out_dir``):

* ``<label>/predictions.json``: per question its text, gold answers, question type and, per k,
  the prediction, the passage it was read from (id and 0-based rank), the span and passage
  scores, EM and F1;
* ``<label>/e2e.json``: EM and F1 at each k with 95 % intervals (Wilson for EM, percentile
  bootstrap for F1), EM by question type, the answer-bearing rate of the first k passages, the
  retriever's AAR / AA score when its answer-awareness report is beside the results, and the per-question
  outcomes (``questions``, ``em_outcomes``, ``f1_outcomes``) that ``python -m
  dense_cf.eval.compare A B`` pairs;
* ``e2e.json`` / ``e2e.md``: every retriever's figures in PiCL's Table 3 layout (EM per
  retriever and k), EM against AAR, EM by question type and, with several retrievers, the first
  against each other on the same questions: exact McNemar on per-question EM, paired bootstrap
  on F1, each row saying whether the difference is significant at 0.05.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
from absl import app, logging

from dense_cf.datasets.formats import SkipReport, iter_retrieval_results
from dense_cf.eval import outcomes, stats
from dense_cf.eval import report as report_lib
from dense_cf.eval.aar_math import QUESTION_TYPES
from dense_cf.text.answers import question_type
from dense_cf.text.qa_eval import qa_scores
from dense_cf.train.run import RunDir, load_run

__all__ = ["RESULTS_FILE", "RetrieverResults", "evaluate_e2e", "load_retriever", "markdown",
           "paired_rows", "score_predictions"]

RESULTS_FILE = "retrieval.json"


class RetrieverResults:
    """One retriever's saved ranked lists: questions, gold answers, passages, where they came
    from, and the retriever's own report figures when they are beside the file."""

    def __init__(self, path: str, label: str, questions: list[str], answers: list[list[str]],
                 contexts: list[list[Any]], skipped: int, method: str | None = None,
                 step: int | None = None, aar: dict[str, Any] | None = None) -> None:
        self.path, self.label = path, label
        self.questions, self.answers, self.contexts = questions, answers, contexts
        self.skipped, self.method, self.step, self.aar = skipped, method, step, aar

    @property
    def depth(self) -> int:
        return min((len(c) for c in self.contexts), default=0)


def _results_path(spec: str, step: int | None = None) -> str:
    if os.path.isfile(spec):
        return spec
    if os.path.isfile(os.path.join(spec, RESULTS_FILE)) and step is None:
        return os.path.join(spec, RESULTS_FILE)
    d = outcomes.find_eval_dir(spec, step)
    path = os.path.join(d, RESULTS_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{spec}: no {RESULTS_FILE} in {d}; run `python -m "
                                f"dense_cf.cli.eval_retrieval --workdir {spec}` first")
    return path


def _aar(eval_dir: str) -> dict[str, Any] | None:
    aar = outcomes.read_aar(eval_dir)
    if aar is None:
        return None
    strategies = aar.get("strategies", {})
    return {s: {"aar": e["aar"], "aar_ci": e.get("aar_ci")} for s, e in strategies.items()
            if "aar" in e}


def load_retriever(spec: str, *, step: int | None = None, max_ks: int = 0,
                   max_questions: int = 0) -> RetrieverResults:
    """Reads a retriever's ``retrieval.json`` (``spec``: file, eval directory or run directory),
    keeping the first ``max_ks`` passages per question (0: all); bad records are skipped,
    counted and logged."""
    path = _results_path(spec, step)
    report = SkipReport()
    questions, answers, contexts = [], [], []
    for _, rec in iter_retrieval_results(path, skip_bad=True, report=report, max_ctxs=max_ks):
        if rec is None:
            continue
        if max_questions and len(questions) >= max_questions:
            break
        questions.append(rec.question)
        answers.append(rec.answers)
        contexts.append(rec.ctxs)
    if report.total:
        report.log()
    eval_dir = os.path.dirname(os.path.abspath(path))
    method = run_step = None
    rep = outcomes.read_report(eval_dir)
    if rep is not None:
        method, run_step = rep.get("method"), rep.get("step")
    label = method or os.path.basename(os.path.normpath(spec)).replace(".json", "")
    return RetrieverResults(path, label, questions, answers, contexts, report.total, method,
                            run_step, _aar(eval_dir))


def score_predictions(results: RetrieverResults, predictions: dict[int, list[Any]], mode: str,
                      *, seed: int = 0, n_resamples: int = stats.DEFAULT_RESAMPLES
                      ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(summary, per-question records)`` of one retriever's predictions at each k."""
    n = len(results.questions)
    types = [question_type(q) for q in results.questions]
    summary: dict[str, Any] = {
        "retriever": results.label, "results_file": os.path.abspath(results.path),
        "method": results.method, "step": results.step, "n_questions": n,
        "skipped_records": results.skipped, "depth": results.depth, "mode": mode,
        "ks": sorted(predictions), "em": {}, "em_ci": {}, "f1": {}, "f1_ci": {},
        "answer_in_top_k": {}, "by_type": {}, "aar": results.aar,
        "empty_answers": sum(1 for a in results.answers if not a),
        "no_prediction": {}, "units": report_lib.JSON_UNITS}
    records = [{"question": q, "answers": a, "type": t, "predictions": {}}
               for q, a, t in zip(results.questions, results.answers, types)]
    em_out, f1_out = {}, {}
    for k, preds in sorted(predictions.items()):
        em, f1 = qa_scores([p.text for p in preds], results.answers, mode)
        em_out[k], f1_out[k] = [int(x) for x in em], [round(x, 6) for x in f1]
        hits = int(sum(em))
        summary["em"][k] = 100.0 * hits / n
        summary["em_ci"][k] = [100.0 * x for x in stats.wilson_interval(hits, n)]
        boot = stats.bootstrap_mean_ci(np.asarray(f1, np.float64), seed, n_resamples)
        summary["f1"][k] = 100.0 * boot["mean"]
        summary["f1_ci"][k] = [100.0 * boot["lo"], 100.0 * boot["hi"]]
        summary["no_prediction"][k] = sum(1 for p in preds if not p.text)
        flags = [[c.has_answer for c in ctxs[:k]] for ctxs in results.contexts]
        if all(f is not None for row in flags for f in row):
            summary["answer_in_top_k"][k] = 100.0 * float(np.mean([any(row) for row in flags]))
        summary["by_type"][k] = {
            t: {"count": int(sum(1 for x in types if x == t)),
                "em": 100.0 * float(np.mean([e for e, x in zip(em, types) if x == t]))}
            for t in QUESTION_TYPES if t in types}
        for rec, p, e, f in zip(records, preds, em, f1):
            rec["predictions"][str(k)] = {"text": p.text, "passage_id": p.passage_id,
                                          "passage_rank": p.passage_rank, "score": p.score,
                                          "passage_score": p.passage_score, "em": bool(e),
                                          "f1": round(f, 6)}
    summary["questions"] = list(results.questions)
    summary["em_outcomes"], summary["f1_outcomes"] = em_out, f1_out
    return summary, records


def paired_rows(a: dict[str, Any], b: dict[str, Any], *, seed: int = 0,
                n_resamples: int = stats.DEFAULT_RESAMPLES) -> list[dict[str, Any]]:
    """Two retrievers' EM@k (exact McNemar) and F1@k (paired bootstrap) on the questions both
    were read on (``score_predictions`` summaries; paired by question text)."""
    names = (a["retriever"], b["retriever"])
    ia, ib = outcomes.pair_questions(a["questions"], b["questions"], a["results_file"],
                                     b["results_file"])
    rows = []
    for k in sorted(set(a["em_outcomes"]) & set(b["em_outcomes"])):
        ea, eb = np.asarray(a["em_outcomes"][k], bool)[ia], np.asarray(b["em_outcomes"][k], bool)[ib]
        em, f1 = outcomes.metric(f"e2e.em@{k}"), outcomes.metric(f"e2e.f1@{k}")
        rows.append({**stats.compare_outcomes(em.label, ea, eb, names=names), "id": em.id})
        fa = np.asarray(a["f1_outcomes"][k], np.float64)[ia]
        fb = np.asarray(b["f1_outcomes"][k], np.float64)[ib]
        rows.append({**stats.compare_outcomes(f1.label, fa, fb, kind="mean", scale=100.0,
                                              seed=seed, n_resamples=n_resamples, names=names),
                     "id": f1.id})
    return rows


def _unique_labels(labels: Sequence[str]) -> list[str]:
    out, seen = [], {}
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label}-{seen[label]}")
    return out


def evaluate_e2e(retrievers: Sequence[str], reader: str, *, ks: Sequence[int] = (1, 5, 20, 100),
                 names: Sequence[str] | None = None, out_dir: str | None = None,
                 reader_step: int | None = None, retriever_step: int | None = None,
                 batch_size: int = 64, max_questions: int = 0, answer_mode: str | None = None,
                 seed: int = 0, n_resamples: int = stats.DEFAULT_RESAMPLES, run=None
                 ) -> dict[str, Any]:
    """Reads every retriever's lists with the reader and writes the reports (module
    docstring); returns the ``e2e.json`` content (plus ``markdown``)."""
    if not retrievers:
        raise ValueError("name at least one retriever (--retriever RUN or a retrieval.json)")
    if names and len(names) != len(retrievers):
        raise ValueError(f"{len(names)} names for {len(retrievers)} retrievers")
    run = run or load_run(reader, reader_step)
    method = run.method
    if method.kind != "reader" or method.predict is None:
        raise ValueError(f"{reader} is a {method.name} run ({method.kind}), not a reader with a "
                         f"predict function")
    ks = sorted({int(k) for k in ks})
    mode = answer_mode or run.config.data.answer_mode
    loaded = [load_retriever(r, step=retriever_step, max_ks=ks[-1], max_questions=max_questions)
              for r in retrievers]
    labels = list(names) if names else _unique_labels([r.label for r in loaded])
    out_dir = out_dir or RunDir(reader).e2e(run.step)
    os.makedirs(out_dir, exist_ok=True)
    cache: dict = {}  # readings shared across retrievers: a passage two of them return is read once
    summaries = []
    for res, label in zip(loaded, labels):
        res.label = label
        if res.depth < ks[-1]:
            logging.warning("%s: some questions have only %d passages; EM@%d reads what there is",
                            res.path, res.depth, ks[-1])
        logging.info("e2e: reading %d questions of %s (%s)", len(res.questions), label, res.path)
        preds = method.predict(run, res.questions, res.contexts, ks, batch_size=batch_size,
                               cache=cache)
        summary, records = score_predictions(res, preds, mode, seed=seed, n_resamples=n_resamples)
        summary.update(reader=os.path.abspath(reader), reader_method=method.name,
                       reader_step=run.step)
        sub = os.path.join(out_dir, label)
        os.makedirs(sub, exist_ok=True)
        report_lib.write_json(os.path.join(sub, outcomes.E2E), summary)
        report_lib.write_json(os.path.join(sub, "predictions.json"), records)
        summaries.append(summary)
        logging.info("e2e %s: EM %s", label, {k: round(v, 2) for k, v in summary["em"].items()})
    paired = []
    for other in summaries[1:]:
        try:
            rows = paired_rows(summaries[0], other, seed=seed, n_resamples=n_resamples)
        except ValueError as e:  # different question sets: said, not compared
            paired.append({"a": summaries[0]["retriever"], "b": other["retriever"], "error": str(e)})
            continue
        paired.append({"a": summaries[0]["retriever"], "b": other["retriever"], "rows": rows})
    light = [{k: v for k, v in s.items() if k not in ("questions", "em_outcomes", "f1_outcomes")}
             for s in summaries]
    result = {"reader": os.path.abspath(reader), "reader_method": method.name,
              "reader_step": run.step, "ks": ks, "mode": mode, "retrievers": light,
              "paired": paired, "out_dir": os.path.abspath(out_dir), "units": report_lib.JSON_UNITS}
    report_lib.write_json(os.path.join(out_dir, outcomes.E2E), result)
    text = markdown(result)
    with report_lib.atomic_open(os.path.join(out_dir, "e2e.md")) as f:
        f.write(text)
    result["markdown"] = text
    return result


def _cell(value: float | None, ci: Sequence[float] | None) -> str:
    if value is None:
        return ""
    return f"{value:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def markdown(result: dict[str, Any]) -> str:
    """``e2e.md``: Table 3, F1, EM against AAR, EM by question type, paired tests."""
    ks, rets = result["ks"], result["retrievers"]
    parts = [f"# End-to-end QA: reader {result['reader']} (step {result['reader_step']})",
             f"Reader `{result['reader_method']}` over each retriever's saved top-k passages; "
             f"answers matched in {result['mode']} mode (docs/readers.md). 95 % intervals: Wilson "
             f"for EM, percentile bootstrap ({stats.DEFAULT_RESAMPLES:,} resamples) for F1."]
    table = [{"retriever": r["retriever"], "questions": r["n_questions"],
              **{f"EM@{k}": _cell(r["em"].get(k), r["em_ci"].get(k)) for k in ks}} for r in rets]
    parts.append("## Exact match (PiCL Table 3 layout)\n\n"
                 + report_lib.markdown_table(table, list(table[0])))
    f1 = [{"retriever": r["retriever"],
           **{f"F1@{k}": _cell(r["f1"].get(k), r["f1_ci"].get(k)) for k in ks}} for r in rets]
    parts.append("## Token F1\n\n" + report_lib.markdown_table(f1, list(f1[0])))
    vs = []
    for r in rets:
        aar = r.get("aar") or {}
        row = {"retriever": r["retriever"],
               "AAR": _cell(100 * aar["sentence"]["aar"], [100 * x for x in aar["sentence"]["aar_ci"]])
               if "sentence" in aar else "",
               "AA score": _cell(100 * aar["answer"]["aar"], [100 * x for x in aar["answer"]["aar_ci"]])
               if "answer" in aar else ""}
        for k in ks:
            row[f"answer in top-{k}"] = r["answer_in_top_k"].get(k)
            row[f"EM@{k}"] = r["em"].get(k)
        vs.append(row)
    parts.append(f"## EM against AAR (answer-awareness of the retriever, its {outcomes.AAR})\n\n"
                 + report_lib.markdown_table(vs, list(vs[0]))
                 + "\n\n`answer in top-k`: questions with an answer-bearing passage (has_answer) "
                   "among the k passages the reader read.")
    type_rows = []
    for r in rets:
        for t in QUESTION_TYPES:
            cells = {f"EM@{k}": r["by_type"][k][t]["em"] for k in ks if t in r["by_type"].get(k, {})}
            if cells:
                count = r["by_type"][ks[0]][t]["count"]
                type_rows.append({"retriever": r["retriever"], "type": t, "count": count, **cells})
    if type_rows:
        parts.append("## EM by question type\n\n"
                     + report_lib.markdown_table(type_rows, list(type_rows[0])))
    for p in result["paired"]:
        head = f"## Paired: {p['a']} (A) vs {p['b']} (B) on the same questions"
        if "error" in p:
            parts.append(f"{head}\n\nnot compared: {p['error']}")
            continue
        cols = ["metric", "n", p["a"], p["b"], "B − A", "test", "p", f"significant at {stats.ALPHA:g}"]
        parts.append(f"{head}\n\n" + report_lib.markdown_table(p["rows"], cols) + "\n\n"
                     + "\n".join(f"- {row['sentence']}" for row in p["rows"]))
    heading, legend = report_lib.columns_section(["EM@k", "F1@k", "AAR", "AA score", "95% CI"])
    parts.append(f"## {heading}\n\n{legend}")
    return "\n\n".join(parts) + "\n"


if __name__ == "__main__":  # the design card's command; its binary is cli/eval_e2e.py
    from dense_cf import app
    from dense_cf.cli import eval_e2e
    app.run(eval_e2e.main, eval_e2e.FLAGS, eval_e2e.USAGE)
