"""PiCL's ablation (Table 4) on the synthetic benchmark, with answer-awareness beside top-k.

``python -m dense_cf.studies.ablation --out DIR [--rows dpr,picl,dpr_cpp,dpr_chn,cpp_chn,answer,
window] [--steps 100] [--seeds 0] [--model minilm] [--num_passages 2000] [--test_questions 300]``

Generates the synthetic benchmark once (``DIR/data``), trains every row of
``dense_cf.configs.ablation`` (the rows of ``configs/picl_ablation.py:ROW,demo``, with the
budget set here: ``configs.studies.ablation_row_config``) into ``DIR/<row>``
(``DIR/<row>_seedN`` for seed N > 0, ``studies.harness.run_dir``) through
``dense_cf.experiment.train_and_evaluate`` (retrieval, AAR with sentence p* and the AA score
with answer p*; robustness off), then writes ``DIR/ablation.md`` and ``DIR/ablation.json``:

* one table: row | top-1 | top-5 | top-20 | MRR | AAR | gap | AA | AA gap, each with the
  95 % interval saved in the run's retrieval and AAR reports (Wilson for rates, percentile
  bootstrap for MRR and the mean gap sim(q,p+) − sim(q,p*); ``gap`` with sentence p*,
  ``AA gap`` with answer p*);
* with several seeds, mean ± std [min, max] over seeds;
* two paired tables from ``dense_cf.analysis.compare`` (every row against ``dpr`` and against
  ``picl``, which are always trained): exact McNemar on top-k hits and AAR / AA outcomes, paired
  bootstrap on MRR and the mean gaps, "significant at 0.05" in words; and a compact B − A
  summary of each.

Resumable: a row whose run finished and was evaluated with the same config is not touched again
(its reports are read back); an interrupted row resumes from its checkpoint. A run directory
trained with another config is refused (use another ``--out``). A row whose config equals an
earlier row's (``sentence`` = ``picl``) reuses that run.
"""

from __future__ import annotations

import os
import time
from typing import Any, Sequence

import ml_collections
from absl import flags

from dense_cf import app as _app
from dense_cf.configs.ablation import ROWS
from dense_cf.configs.studies import ablation_row_config
from dense_cf.eval import outcomes, stats
from dense_cf.eval import report as report_lib
from dense_cf.files import atomic_open, make_dir, utc_now, write_json
from dense_cf.studies import harness
from dense_cf.synthetic import generate as synthetic

__all__ = ["DEFAULT_ROWS", "METRICS", "REFERENCES", "run_ablation", "run_metrics"]

DEFAULT_ROWS = ("dpr", "picl", "dpr_cpp", "dpr_chn", "cpp_chn", "answer", "window")
REFERENCES = ("dpr", "picl")  # every paired table compares against these; always trained
# The summary table's column of each metric id (eval.outcomes): its label, or the table's
# abbreviation where the label is long (MRR ×100, the mean gaps, the AA score).
_ABBREV = {"retrieval.mrr": "MRR", "aar.sentence.gap": "gap", "aar.answer": "AA",
           "aar.answer.gap": "AA gap"}
PAIRED_METRICS = {m: _ABBREV.get(m) or outcomes.metric(m).label
                  for m in ("retrieval.top1", "retrieval.top5", "retrieval.top20", "retrieval.mrr",
                            "aar.sentence", "aar.sentence.gap", "aar.answer", "aar.answer.gap")}
METRICS = tuple(PAIRED_METRICS.values())


def run_metrics(eval_dir: str) -> dict[str, Any]:
    """One run's figures and 95 % intervals from its saved reports: ``{metric: value}`` and
    ``{metric + " ci": [lo, hi]}`` (percent for rates, ×100 for MRR, raw for the gaps)."""
    rep = outcomes.read_report(eval_dir, required=True)
    out: dict[str, Any] = {}
    for k in (1, 5, 20):
        out[f"top-{k}"] = float(rep["top_k"][str(k)])
        out[f"top-{k} ci"] = [float(x) for x in rep["top_k_ci"][str(k)]]
    out["MRR"] = 100 * float(rep["mrr"])
    out["MRR ci"] = [100 * float(x) for x in rep["mrr_ci"]]
    out["questions"] = int(rep["n_questions"])
    aar = outcomes.read_aar(eval_dir, required=True)
    for strategy in ("sentence", "answer"):
        rate, gap = PAIRED_METRICS[f"aar.{strategy}"], PAIRED_METRICS[f"aar.{strategy}.gap"]
        e = aar["strategies"].get(strategy, {})
        out[f"{rate} triplets"] = int(e.get("triplets", 0))
        if "aar" not in e:  # no scored triplet
            out[rate] = out[gap] = out[f"{rate} ci"] = out[f"{gap} ci"] = None
            continue
        out[rate] = 100 * float(e["aar"])
        out[f"{rate} ci"] = [100 * float(x) for x in e["aar_ci"]]
        out[gap] = float(e["score_diff"]["all"]["mean"])
        out[f"{gap} ci"] = [float(x) for x in e["score_diff_ci"]]
    return out


def _cell(value: float | None, ci: Sequence[float] | None, digits: int) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def _table_row(r: dict[str, Any]) -> dict[str, Any]:
    row = {"row": r["row"] + (f" (seed {r['seed']})" if r.get("show_seed") else "")}
    for m in METRICS:
        row[m] = _cell(r[m], r[f"{m} ci"], 4 if "gap" in m else 2)
    return row


def _rows(rows: Sequence[str]) -> list[str]:
    bad = [r for r in rows if r not in ROWS]
    if bad:
        raise ValueError(f"unknown rows {bad}; rows: {', '.join(ROWS)}")
    out = list(REFERENCES) + [r for r in rows if r not in REFERENCES]
    return list(dict.fromkeys(out))


def _prepare_data(data_dir: str, config: ml_collections.ConfigDict) -> None:
    """Generates the benchmark once; refuses a data dir generated with other settings."""
    syn = config.data.synthetic
    synthetic.generate_or_check(data_dir, int(syn.num_passages), int(syn.seed),
                                test_questions=int(syn.test_questions),
                                questions_per_passage=int(syn.questions_per_passage),
                                world=syn.world)


def definition(rows: Sequence[str], data_dir: str, **budget: Any) -> harness.Study:
    """The ablation as data: a run per row (``configs.studies.ablation_row_config``), each row
    paired with ``dpr`` and with ``picl``."""
    runs = tuple(harness.StudyRun(row, lambda seed, row=row: ablation_row_config(
        row, data_dir, seed=seed, **budget)) for row in rows)
    pairs = tuple((ref, row) for ref in REFERENCES for row in rows if row != ref)
    return harness.Study("ablation", runs, pairs)


def _paired(ref: str, row: str, res: dict[str, Any]) -> dict[str, Any]:
    long_rows, summary = [], {"row": row}
    for r in res["rows"]:
        long_rows.append({"row": row, "metric": r["metric"], "n": r["n"], "reference": r[ref],
                          "row value": r[row], "B − A": r["B − A"], "test": r["test"],
                          "p": r["p"], "significant at 0.05": r[f"significant at {stats.ALPHA:g}"]})
        col = PAIRED_METRICS.get(r.get("id", ""))
        if col:
            s = r["stats"]
            scale = 1.0 if "gap" in col else 100.0
            digits = 4 if "gap" in col else 2
            d = scale * s["diff"]
            cell = f"{d:+.3g}" if d and abs(d) < 10 ** -digits else f"{d:+.{digits}f}"
            summary[col] = cell + ("*" if s["p_value"] < stats.ALPHA else "")
    return {"reference": ref, "row": row, "rows": long_rows, "summary": summary,
            "notes": res["notes"], "sentences": [r["sentence"] for r in res["rows"]],
            "markdown": res["markdown"]}


def run_ablation(out: str, rows: Sequence[str] = DEFAULT_ROWS, *, steps: int = 100,
                 seeds: Sequence[int] = (0,), model: str = "minilm", num_passages: int = 2000,
                 test_questions: int = 300, batch: int = 16, lr: float = 5e-5,
                 n_resamples: int = stats.DEFAULT_RESAMPLES) -> dict[str, Any]:
    """Trains and evaluates the rows (``dpr`` and ``picl`` always), writes
    ``out/ablation.{md,json}`` and returns what the JSON holds."""
    rows = _rows(rows)
    seeds = harness.parse_seeds(seeds)
    os.makedirs(out, exist_ok=True)
    data_dir = os.path.join(out, "data")
    kw = {"steps": steps, "batch": batch, "model": model, "lr": lr,
          "num_passages": num_passages, "test_questions": test_questions}
    _prepare_data(data_dir, ablation_row_config(rows[0], data_dir, seed=seeds[0], **kw))
    t_start, started = time.perf_counter(), utc_now()
    study = definition(rows, data_dir, **kw)
    trained = harness.train_study(study, out, seeds)
    results = []
    for seed in seeds:
        for row in rows:
            t = trained[row, seed]
            loss = {k: t.config.loss[k] for k in ("use_dpr", "lam", "tau1", "tau2")}
            results.append({"row": row, "seed": seed, "method": t.config.method,
                            "workdir": t.workdir, "eval_dir": t.eval_dir, "loss": loss,
                            "counterfactual": t.config.data.counterfactual,
                            **run_metrics(t.eval_dir)})
    paired: dict[str, list[dict[str, Any]]] = {ref: [] for ref in REFERENCES}
    for c in harness.compare_study(study, trained, seeds, n_resamples=n_resamples):
        p = _paired(c.a, c.b, c.result)
        p["seed"] = c.seed
        paired[c.a].append(p)
    setup = {"model": model, "steps": steps, "batch": batch, "lr": lr, "seeds": seeds,
             "num_passages": num_passages, "test_questions": test_questions, "rows": rows,
             "out": os.path.abspath(out), "n_resamples": n_resamples,
             "minutes": round((time.perf_counter() - t_start) / 60, 2),
             "stamp": harness.report_stamp(started, {f"{n} (seed {s})": t.workdir
                                                     for (n, s), t in trained.items()})}
    spread = (stats.seed_table(results, ("row",), [m for m in METRICS
                                                   if all(r[m] is not None for r in results)])
              if len(seeds) > 1 else [])
    result = {"setup": setup, "runs": results, "seed_spread": spread, "paired": paired}
    result["markdown"] = markdown(result)
    with atomic_open(os.path.join(out, "ablation.md")) as f:
        f.write(result["markdown"] + "\n" + harness.stamp_markdown(setup["stamp"]) + "\n")
    write_json(os.path.join(out, "ablation.json"), result)
    return result


def markdown(result: dict[str, Any]) -> str:
    """The ablation table, the spread over seeds and the paired tables."""
    s = result["setup"]
    several = len(s["seeds"]) > 1
    table = [_table_row(dict(r, show_seed=several)) for r in result["runs"]]
    parts = [
        "# PiCL ablation (Table 4) with answer-awareness",
        f"{s['model']}, {s['steps']} steps × {s['batch']} questions, lr {s['lr']}, "
        f"{s['num_passages']} synthetic passages, {s['test_questions']} test questions, seeds "
        f"{s['seeds']}; runs in `{s['out']}`.",
        "## Rows\n\n" + report_lib.markdown_table(
            [{"row": r["row"], "method": r["method"], "use_dpr": r["loss"]["use_dpr"],
              "λ": r["loss"]["lam"], "τ1": r["loss"]["tau1"], "τ2": r["loss"]["tau2"],
              "p*": r["counterfactual"], "questions": r["questions"],
              "AAR triplets": r["AAR triplets"], "AA triplets": r["AA triplets"]}
             for r in result["runs"] if r["seed"] == s["seeds"][0]],
            ["row", "method", "use_dpr", "λ", "τ1", "τ2", "p*", "questions", "AAR triplets",
             "AA triplets"]),
        "## Results (95 % intervals)\n\n" + report_lib.markdown_table(table, ["row", *METRICS])
        + "\n\nTop-k and AAR / AA in %, MRR ×100 (Wilson intervals for rates, percentile "
          f"bootstrap for MRR and the gaps). gap = {outcomes.metric('aar.sentence.gap').label}: "
          "p* with the answer sentence removed (AAR's p*); AA gap = "
          f"{outcomes.metric('aar.answer.gap').label}: the answer string removed (the AA "
          "score's p*).",
    ]
    if result["seed_spread"]:
        spread = result["seed_spread"]
        parts.append(harness.spread_section(s["seeds"], spread))
    for ref, pairs in result["paired"].items():
        if not pairs:
            continue
        head = f"## Paired against {ref} (A = {ref}, B = row)"
        summ = [dict(p["summary"], row=p["row"] + (f" (seed {p['seed']})" if several else ""))
                for p in pairs]
        parts.append(head + "\n\nB − A (points; gaps raw), * = significant at 0.05:\n\n"
                     + report_lib.markdown_table(summ, ["row", *METRICS]))
        long_rows = [dict(r, row=r["row"] + (f" (seed {p['seed']})" if several else ""))
                     for p in pairs for r in p["rows"]]
        parts.append(
            report_lib.markdown_table(long_rows, ["row", "metric", "n", "reference",
                                                  "row value", "B − A", "test", "p",
                                                  "significant at 0.05"])
            + f"\n\nPer row: figures over the paired items with 95 % intervals; exact McNemar "
              f"for top-k and AAR / AA outcomes, paired bootstrap ({s['n_resamples']} "
              f"resamples) for MRR and the mean gaps; B − A for means with its paired-bootstrap "
              f"interval.\n\n" + "\n".join(f"- {n}" for n in pairs[0]["notes"]))
    return "\n\n".join(parts) + "\n"


def main(argv: Sequence[str]) -> None:
    del argv
    f = FLAGS
    out = f.out or make_dir("ablation_bench_")
    result = run_ablation(out, f.rows, steps=f.steps, seeds=_F.seed_list(),
                          model=f.model, num_passages=f.num_passages,
                          test_questions=f.test_questions, batch=f.batch, lr=f.lr,
                          n_resamples=f.n_resamples)
    print(result["markdown"])
    print(f"written: {os.path.join(out, 'ablation.md')}, {os.path.join(out, 'ablation.json')}")


FLAGS = flags.FlagValues()  # its own: tests import several studies in one process
_F = harness.define_study_flags(
    FLAGS, out=None, steps=100,
    help={"seeds": "Training seeds (config.seed); with several, the mean and spread over seeds "
                   "too, and paired tables per seed."})
flags.DEFINE_list("rows", list(DEFAULT_ROWS), f"Rows ({', '.join(ROWS)}); dpr and picl are "
                  f"always trained (the paired tables compare against them).", flag_values=FLAGS)
flags.DEFINE_integer("num_passages", 2000, "Synthetic corpus size.", flag_values=FLAGS)
flags.DEFINE_integer("test_questions", 300, "Synthetic test questions.", flag_values=FLAGS)
flags.DEFINE_integer("n_resamples", stats.DEFAULT_RESAMPLES,
                     "Bootstrap resamples of the paired tests.", flag_values=FLAGS)


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
