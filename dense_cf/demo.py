"""The README's main command: synthetic benchmark → train DPR and PiCL (MiniLM) → compare.

``python -m dense_cf.demo --workdir=runs/demo`` (``make demo``). Re-running resumes finished or
interrupted runs from their checkpoints. The report compares retrieval (top-k, MRR),
answer-awareness (AAR, AA score) and robustness to near-duplicate distractors, each figure with
its 95 % interval, and pairs the first method with each other one on the same test items
(``dense_cf.eval.compare``), saying whether each difference is significant at 0.05.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
from absl import app, flags, logging

from dense_cf.configs.presets import demo_config
from dense_cf.eval import aar_math
from dense_cf.eval import compare as compare_lib
from dense_cf.eval import report as report_lib
from dense_cf.eval.robustness import plot_runs, robustness_table
from dense_cf.experiment import train_and_evaluate as train

_WORKDIR = flags.DEFINE_string("workdir", "runs/demo", "Where data, runs and the report go.")
_METHODS = flags.DEFINE_list("methods", ["dpr", "picl"], "Demo configs to train (configs/demo.py).")
_STEPS = flags.DEFINE_integer("num_steps", 0, "Override the demo's number of steps (0 = config).")


def load_demo_config(method: str):
    return demo_config(method)


def _with_ci(value: float, ci: Any, scale: float = 1.0, digits: int = 2) -> str | float:
    """``value [lo, hi]`` (95 % interval) as a cell; the bare value when no interval was saved."""
    if not ci:
        return value
    lo, hi = (scale * x for x in ci)
    return f"{value:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def report_rows(results: dict[str, dict]) -> list[dict]:
    """One row per method: training losses, dev ranking, retrieval top-k/MRR, AAR / AA score.

    Evaluation figures carry their 95 % intervals (``[95% CI]`` columns: Wilson for top-k, AAR
    and AA score; percentile bootstrap for MRR and the mean score gap)."""
    rows = []
    for method, s in results.items():
        t, d = s["train"], s["dev"]
        row = {"method": method, "steps": s["step"],
               "train loss": t.get("train/loss"), "train l_dpr": t.get("train/l_dpr"),
               "dev loss": d.get("loss"), "dev rank_acc": d.get("rank_acc")}
        ev = s.get("eval", {})
        ret = ev.get("retrieval", {})
        top_ci = {int(k): v for k, v in ret.get("top_k_ci", {}).items()}
        for k, v in ret.get("top_k", {}).items():
            row[f"top-{k} [95% CI]"] = _with_ci(v, top_ci.get(int(k)))
        if ret:
            row["MRR [95% CI]"] = _with_ci(100 * ret["mrr"], ret.get("mrr_ci"), 100.0)
        strategies = ev.get("aar", {}).get("strategies", {})
        if "sentence" in strategies:
            e = strategies["sentence"]
            row["AAR [95% CI]"] = _with_ci(100 * e.get("aar", float("nan")), e.get("aar_ci"),
                                           100.0)
            row["mean sim(q,p+)-sim(q,p*) [95% CI]"] = _with_ci(
                e["score_diff"]["all"]["mean"], e.get("score_diff_ci"), digits=4)
        if "answer" in strategies:
            e = strategies["answer"]
            row["AA score [95% CI]"] = _with_ci(100 * e.get("aar", float("nan")),
                                                e.get("aar_ci"), 100.0)
        rows.append(row)
    return rows


def paired_sections(workdir: str, results: dict[str, dict], seed: int = 0) -> str:
    """Markdown: the first method (the baseline, DPR in the demo) against each other method on
    the same test items (``dense_cf.eval.compare``: McNemar on top-k hits and AAR / AA outcomes,
    paired bootstrap on MRR and the mean score gap), each row saying whether the difference is
    significant at 0.05."""
    methods = list(results)
    parts = []
    for other in methods[1:]:
        base = methods[0]
        try:
            res = compare_lib.compare(os.path.join(workdir, base), os.path.join(workdir, other),
                                      step_a=results[base].get("step"),
                                      step_b=results[other].get("step"), seed=seed,
                                      names=(base, other), verbose=False)
        except (ValueError, FileNotFoundError) as e:
            parts.append(f"## Paired comparison: {base} vs {other}\n\nnot compared: {e}")
            continue
        parts.append(f"## Paired comparison: {base} (A) vs {other} (B) on the same test items\n\n"
                     + compare_lib.markdown(res, title=False))
    return "\n\n".join(parts)


def main(argv) -> None:
    del argv
    import tensorflow as tf
    tf.config.set_visible_devices([], "GPU")

    workdir = os.path.abspath(_WORKDIR.value)
    results = {}
    for method in _METHODS.value:
        cfg = load_demo_config(method)
        cfg.data.data_dir = os.path.join(workdir, "synthetic")
        if _STEPS.value:
            cfg.train.num_steps = _STEPS.value
        logging.info("=== demo: training %s ===", method)
        summary = train(cfg, os.path.join(workdir, method))
        summary.pop("run")
        results[method] = summary
    rows = report_rows(results)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    table = report_lib.markdown_table(rows, columns)
    diffs = {}
    for method in results:
        path = os.path.join(workdir, method, "eval", f"step_{results[method]['step']}",
                            "aar_scores_sentence.npz")
        if os.path.exists(path):
            with np.load(path) as z:
                diffs[method] = aar_math.score_diffs(z["pos"], z["cf"])
    if diffs:
        aar_math.histogram_plot(diffs, os.path.join(workdir, "aar_hist.png"),
                                title="sim(q,p+) - sim(q,p*) on the synthetic test triplets")
        table += "\n\nAAR triplets: " + ", ".join(f"{m}: {len(d)}" for m, d in diffs.items())
    paired = paired_sections(workdir, results)
    if paired:
        table += "\n\n" + paired
    robust = {m: r["eval"]["robustness"] for m, r in results.items()
              if "robustness" in r.get("eval", {})}
    if robust:
        table += ("\n\n## Top-k vs. near-duplicate distractors per question (EADPR Fig. 5)\n\n"
                  + robustness_table(robust))
        plot_runs(robust, os.path.join(workdir, "robustness.png"))
    with open(os.path.join(workdir, "report.md"), "w") as f:
        f.write("# dense_cf demo: synthetic QA benchmark, all-MiniLM-L6-v2\n\n" + table + "\n")
    report_lib.write_json(os.path.join(workdir, "report.json"), results)
    print(table)
    print(f"\nreport: {os.path.join(workdir, 'report.md')}", file=sys.stderr)


if __name__ == "__main__":
    app.run(main)
