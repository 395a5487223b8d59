"""Answer-awareness of a trained run (SPEC §5): ``python -m dense_cf.cli.eval_aar --workdir DIR``.

Triplets (q, p+, p*) come from gold-passage info (DPR's ``nq-test_gold_info.json`` or the
synthetic benchmark's): p+ is the gold context; answers are joined from the test qa CSV by
question text (gold info carries none). p* is built by the SAME counterfactual code as training
(``data/counterfactual.py`` inside the tf.data pipeline): the ``sentence`` strategy gives PiCL's
AAR (Def. 3), the ``answer`` strategy EADPR's AA score. Triplets whose answer is not found in
the gold context have no p* and are counted, not used.

Reports (``DIR/eval/step_<N>/aar.json``, ``aar.md``, ``aar_hist.png``): AAR per strategy, AAR by
question type (PiCL Table 6), score differences sim(q,p+) − sim(q,p*) split aware / unaware /
all (PiCL Table 5) and their histogram (PiCL Fig. 6). Ties count as mismatches.
"""

from __future__ import annotations

import dataclasses
import os
import runpy
from typing import Any, Sequence

import numpy as np
from absl import logging

from dense_cf.inputs import dpr as pipeline
from dense_cf.datasets.formats import BiencoderExample, Passage, SkipReport, read_gold_info, read_qa_csv
from dense_cf.eval import aar_math
from dense_cf.eval import report as report_lib
from dense_cf.datasets.dpr import resolve_data_file
from dense_cf.retrieval import export
from dense_cf.train.run import RunDir, load_run


@dataclasses.dataclass
class Triplets:
    """Gold (question, answers, title, context) records usable for answer-awareness."""

    questions: list[str]
    answers: list[list[str]]
    titles: list[str]
    contexts: list[str]
    stats: dict[str, int]


def _norm_q(q: str) -> str:
    return " ".join(q.lower().split()).rstrip("?").strip()


def load_triplets(gold_path: str, qa_path: str) -> Triplets:
    """Joins gold info with the qa file's answers by (normalised) question text."""
    report = SkipReport()
    answers_by_q: dict[str, list[str]] = {}
    for q, a in read_qa_csv(qa_path, skip_bad=True, report=report):
        answers_by_q.setdefault(_norm_q(q), a)
    out = Triplets([], [], [], [], {"gold_records": 0, "no_answers_for_question": 0,
                                     "skipped_records": 0})
    for rec in read_gold_info(gold_path, skip_bad=True, report=report):
        out.stats["gold_records"] += 1
        ans = answers_by_q.get(_norm_q(rec["question"]))
        if ans is None:
            out.stats["no_answers_for_question"] += 1
            continue
        out.questions.append(rec["question"])
        out.answers.append(ans)
        out.titles.append(rec["title"])
        out.contexts.append(rec["context"])
    out.stats["skipped_records"] = report.total
    if report.total:
        report.log()
    return out


def triplet_scores(run, triplets: Triplets, strategy: str, *, encoder=None,
                   batch_size: int = 128) -> dict[str, Any]:
    """sim(q, p+) and sim(q, p*) for every triplet that has a counterfactual under ``strategy``."""
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
    for batch in pipeline.make_eval_dataset(data, spec).as_numpy_iterator():
        for key in ("q_ids", "q_mask", "pos_ids", "pos_mask", "cf_ids", "cf_mask", "cf_valid"):
            cols.setdefault(key, []).append(batch[key])
    arr = {k: np.concatenate(v) for k, v in cols.items()}
    valid = arr["cf_valid"].astype(bool)
    encoder = encoder or export.Encoder(run, batch_size)
    q = encoder.questions(arr["q_ids"][valid], arr["q_mask"][valid])
    pos = encoder.passages(arr["pos_ids"][valid], arr["pos_mask"][valid])
    cf = encoder.passages(arr["cf_ids"][valid], arr["cf_mask"][valid])
    idx = np.flatnonzero(valid)
    return {"pos": np.einsum("bd,bd->b", q, pos), "cf": np.einsum("bd,bd->b", q, cf),
            "questions": [triplets.questions[i] for i in idx], "index": idx,
            "no_counterfactual": int((~valid).sum())}


def evaluate_aar(workdir: str, *, gold_path: str | None = None, qa_path: str | None = None,
                 strategies: Sequence[str] | None = None, run=None,
                 out_dir: str | None = None) -> dict[str, Any]:
    """AAR / AA score report of a run; returns the report (also written to disk)."""

    run = run or load_run(workdir)
    cfg = run.config
    strategies = list(strategies or cfg.eval.aar_strategies)
    triplets = load_triplets(resolve_data_file(cfg.data, "gold_file", gold_path),
                              resolve_data_file(cfg.data, "test_file", qa_path))
    if not triplets.questions:
        raise ValueError(f"no usable triplets: {triplets.stats}")
    encoder = export.Encoder(run, cfg.eval.batch_size)
    out_dir = out_dir or RunDir(workdir).eval(run.step)
    os.makedirs(out_dir, exist_ok=True)
    result: dict[str, Any] = {"workdir": os.path.abspath(workdir), "method": cfg.method,
                              "step": run.step, "triplet_stats": triplets.stats, "strategies": {}}
    diffs = {}
    for strategy in strategies:
        s = triplet_scores(run, triplets, strategy, encoder=encoder)
        entry = {"triplets": int(len(s["pos"])), "no_counterfactual": s["no_counterfactual"]}
        if len(s["pos"]):
            entry["aar"] = aar_math.aar(s["pos"], s["cf"])
            entry["by_type"] = aar_math.aar_by_type(s["questions"], s["pos"], s["cf"])
            entry["score_diff"] = aar_math.score_diff_stats(s["pos"], s["cf"])
            diffs[strategy] = aar_math.score_diffs(s["pos"], s["cf"])
        np.savez(os.path.join(out_dir, f"aar_scores_{strategy}.npz"), pos=s["pos"], cf=s["cf"],
                 index=s["index"])
        result["strategies"][strategy] = entry
        logging.info("AAR %s (%s): %s over %d triplets (%d without p*)", cfg.method, strategy,
                     entry.get("aar"), entry["triplets"], entry["no_counterfactual"])
    if diffs:
        aar_math.histogram_plot({f"{cfg.method} ({k})": v for k, v in diffs.items()},
                                os.path.join(out_dir, "aar_hist.png"),
                                title=f"sim(q,p+) - sim(q,p*) — {cfg.method}, step {run.step}")
    report_lib.write_json(os.path.join(out_dir, "aar.json"), result)
    rows = []
    for strategy, e in result["strategies"].items():
        sd = e.get("score_diff", {})
        rows.append({"strategy": strategy, "triplets": e["triplets"],
                     "AAR (%)": 100 * e.get("aar", float("nan")),
                     "mean diff (all)": sd.get("all", {}).get("mean", float("nan")),
                     "mean diff (aware)": sd.get("aware", {}).get("mean", float("nan")),
                     "mean diff (unaware)": sd.get("unaware", {}).get("mean", float("nan"))})
    sections = [("Answer-awareness (AAR: sentence strategy; AA score: answer strategy)",
                 report_lib.markdown_table(rows, list(rows[0])))]
    first = result["strategies"].get("sentence") or next(iter(result["strategies"].values()))
    if "by_type" in first:
        type_rows = [{"type": t, "count": v["count"], "AAR (%)": 100 * v["aar"]}
                     for t, v in first["by_type"].items()]
        sections.append(("AAR by question type", report_lib.markdown_table(type_rows, list(type_rows[0]))))
    report_lib.write_markdown(os.path.join(out_dir, "aar.md"), f"Answer-awareness: {workdir}", sections)
    return result


if __name__ == "__main__":
    # The binary lives in dense_cf/cli/eval_aar.py; by name, so no upward import.
    runpy.run_module("dense_cf.cli.eval_aar", run_name="__main__", alter_sys=True)
