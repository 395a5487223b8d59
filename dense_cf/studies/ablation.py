"""PiCL's ablation (Table 4) on the synthetic benchmark, with answer-awareness beside top-k.

``python -m dense_cf.bench.ablation --out DIR [--rows dpr,picl,dpr_cpp,dpr_chn,cpp_chn,answer,
window] [--steps 100] [--seeds 0] [--model minilm] [--num_passages 2000] [--test_questions 300]``

Generates the synthetic benchmark once (``DIR/data``), trains every row of
``dense_cf.configs.ablation`` (the rows of ``configs/picl_ablation.py:ROW,demo``, with the
budget set here) into ``DIR/<row>`` (``DIR/<row>_seedN`` for seed N > 0) through
``dense_cf.experiment.train_and_evaluate`` (retrieval, AAR with sentence p* and the AA score
with answer p*; robustness off), then writes ``DIR/ablation.md`` and ``DIR/ablation.json``:

* one table: row | top-1 | top-5 | top-20 | MRR | AAR | gap | AA | AA gap, each with the
  95 % interval saved in the run's ``report.json`` / ``aar.json`` (Wilson for rates, percentile
  bootstrap for MRR and the mean gap sim(q,p+) − sim(q,p*); ``gap`` with sentence p*,
  ``AA gap`` with answer p*);
* with several seeds, mean ± std [min, max] over seeds;
* two paired tables from ``dense_cf.eval.compare`` (every row against ``dpr`` and against
  ``picl``, which are always trained): exact McNemar on top-k hits and AAR / AA outcomes, paired
  bootstrap on MRR and the mean gaps, "significant at 0.05" in words; and a compact B − A
  summary of each.

Resumable: a row whose run finished and was evaluated with the same config is not touched again
(its reports are read back); an interrupted row resumes from its checkpoint. A run directory
trained with another config is refused (use another ``--out``). A row whose config equals an
earlier row's (``sentence`` = ``picl``) reuses that run.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Sequence

import ml_collections
from absl import flags, logging

from dense_cf import app as _app
from dense_cf import methods
from dense_cf.configs.ablation import ROWS, ablation_config
from dense_cf.configs.base import base_config, resolve_paths
from dense_cf.console import tensorflow_for_host
from dense_cf.eval import compare as compare_lib
from dense_cf.eval import report as report_lib
from dense_cf.eval import stats
from dense_cf.experiment import train_and_evaluate
from dense_cf.files import atomic_open, make_dir, write_json
from dense_cf.progress import format_duration
from dense_cf.synthetic import generate as synthetic
from dense_cf.train.run import RunDir

__all__ = ["DEFAULT_ROWS", "METRICS", "REFERENCES", "row_config", "run_ablation", "run_metrics"]

DEFAULT_ROWS = ("dpr", "picl", "dpr_cpp", "dpr_chn", "cpp_chn", "answer", "window")
REFERENCES = ("dpr", "picl")  # every paired table compares against these; always trained
METRICS = ("top-1", "top-5", "top-20", "MRR", "AAR", "gap", "AA", "AA gap")
# compare_lib row label -> table column
PAIRED_METRICS = {"top-1": "top-1", "top-5": "top-5", "top-20": "top-20", "MRR (×100)": "MRR",
                  "AAR": "AAR", "mean sim(q,p+) − sim(q,p*) (sentence)": "gap",
                  "AA score": "AA", "mean sim(q,p+) − sim(q,p*) (answer)": "AA gap"}


def row_config(row: str, data_dir: str, *, steps: int, batch: int, model: str, lr: float,
               seed: int, num_passages: int, test_questions: int) -> ml_collections.ConfigDict:
    """``ablation_config(row, "demo")`` with this benchmark's data, budget and evaluation."""
    c = ablation_config(row, "demo")
    c.seed = seed
    c.model.name_or_path = model
    c.data.data_dir = data_dir
    c.data.dev_file = ""                        # no dev evaluation: the test set decides
    c.data.synthetic.generate = True
    c.data.synthetic.num_passages = num_passages
    c.data.synthetic.test_questions = test_questions
    c.eval.after_training = True
    c.eval.aar_strategies = ("sentence", "answer")
    c.eval.robustness_counts = ()
    c.train.global_batch = batch
    c.train.num_steps = steps
    c.train.log_every = max(steps // 5, 1)
    c.train.checkpoint_every = max(steps // 2, 1)
    c.train.eval_every = 0
    c.optim.learning_rate = lr
    c.optim.warmup_steps = max(steps // 10, 1)
    return c


def _as_json(c: ml_collections.ConfigDict) -> dict[str, Any]:
    return json.loads(c.to_json_best_effort())


def _diff_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [k for key in sorted(set(a) | set(b))
                for k in _diff_keys(a.get(key), b.get(key), f"{prefix}{key}.")]
    return [] if a == b else [prefix.rstrip(".")]


# Fields that choose how the same math is computed, not what is computed: a finished run that
# differs only in them is reused. model.attention_impl: the einsum and jax.nn.dot_product_attention
# paths agree within float tolerance (tests/test_attention.py), training under attention
# dropout takes the einsum path either way, and the demo's figures came out the same with both.
IMPLEMENTATION_FIELDS = ("model.attention_impl",)
# Fields that only initialise rows of tokens a method adds (dcsr.sent_init: DCSR's <sent>): for
# a method that adds no token they change nothing, so a finished run is reused across them (DPR
# runs saved before sent_init's default changed from cls to normal).
ADDED_TOKEN_FIELDS = ("dcsr.sent_init",)


def _ignored_fields(config: ml_collections.ConfigDict) -> tuple[str, ...]:
    """Config fields whose difference does not change ``config``'s run."""
    unused = () if methods.get(config.method).added_tokens else ADDED_TOKEN_FIELDS
    return IMPLEMENTATION_FIELDS + unused


def with_new_defaults(saved: Any, defaults: Any) -> Any:
    """``saved`` (a run's config as JSON) plus every field of ``defaults`` it lacks.

    Config fields are added with defaults that keep the behaviour from before them (e.g.
    ``data.synthetic.world = "entity"``, the ``reader`` and ``multihop`` blocks), so a run saved
    before a field existed was trained as if it had the default."""
    if not (isinstance(saved, dict) and isinstance(defaults, dict)):
        return saved
    out = dict(saved)
    for key, value in defaults.items():
        out[key] = with_new_defaults(saved[key], value) if key in saved else value
    return out


def finished_eval_dir(workdir: str, config: ml_collections.ConfigDict,
                      required: Sequence[str] = ("report.json", "aar.json")) -> str | None:
    """The eval directory of a run in ``workdir`` that finished ``config``'s steps and was
    evaluated (the ``required`` reports are there); None when it must (still) be trained or
    evaluated. Raises when ``workdir`` holds a run of another config."""
    rd = RunDir(workdir)
    if not os.path.exists(rd.config):
        return None
    with open(rd.config) as f:
        saved = json.load(f)
    # The run saved its config with absolute paths (resolve_paths): compare like with like, so
    # a relative --out finds its own finished runs. Fields added since it was saved count at
    # their defaults, so finished runs stay reusable when the config grows.
    saved = with_new_defaults(saved, _as_json(base_config()))
    # Unset loss weights are the method's, on both sides (training saves them filled in).
    saved = _as_json(methods.with_loss_defaults(ml_collections.ConfigDict(saved)))
    # Unset loss weights are the method's (training saves them filled in).
    diff = [k for k in _diff_keys(saved, _as_json(resolve_paths(methods.with_loss_defaults(config))))
            if k not in _ignored_fields(config)]
    if diff:
        raise ValueError(f"{workdir} holds a run trained with another config (differs in "
                         f"{', '.join(diff)}); use another --out")
    if not os.path.exists(rd.summary):
        return None
    with open(rd.summary) as f:
        summary = json.load(f)
    if summary.get("step") != config.train.num_steps or "eval" not in summary:
        return None
    d = rd.eval(summary["step"])
    ok = all(os.path.exists(os.path.join(d, f)) for f in required)
    return d if ok else None


def run_metrics(eval_dir: str) -> dict[str, Any]:
    """One run's figures and 95 % intervals from its saved reports: ``{metric: value}`` and
    ``{metric + " ci": [lo, hi]}`` (percent for rates, ×100 for MRR, raw for the gaps)."""
    with open(os.path.join(eval_dir, "report.json")) as f:
        rep = json.load(f)
    out: dict[str, Any] = {}
    for k in (1, 5, 20):
        out[f"top-{k}"] = float(rep["top_k"][str(k)])
        out[f"top-{k} ci"] = [float(x) for x in rep["top_k_ci"][str(k)]]
    out["MRR"] = 100 * float(rep["mrr"])
    out["MRR ci"] = [100 * float(x) for x in rep["mrr_ci"]]
    out["questions"] = int(rep["n_questions"])
    with open(os.path.join(eval_dir, "aar.json")) as f:
        aar = json.load(f)
    for strategy, rate, gap in (("sentence", "AAR", "gap"), ("answer", "AA", "AA gap")):
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


def _paired(ref: str, row: str, ref_run: tuple[str, int], row_run: tuple[str, int], *,
            n_resamples: int) -> dict[str, Any]:
    res = compare_lib.compare(ref_run[0], row_run[0], step_a=ref_run[1], step_b=row_run[1],
                              names=(ref, row), n_resamples=n_resamples, verbose=False)
    long_rows, summary = [], {"row": row}
    for r in res["rows"]:
        long_rows.append({"row": row, "metric": r["metric"], "n": r["n"], "reference": r[ref],
                          "row value": r[row], "B − A": r["B − A"], "test": r["test"],
                          "p": r["p"], "significant at 0.05": r[f"significant at {stats.ALPHA:g}"]})
        col = PAIRED_METRICS.get(r["metric"])
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
    seeds = [int(s) for s in seeds]
    os.makedirs(out, exist_ok=True)
    data_dir = os.path.join(out, "data")
    kw = {"steps": steps, "batch": batch, "model": model, "lr": lr,
          "num_passages": num_passages, "test_questions": test_questions}
    _prepare_data(data_dir, row_config(rows[0], data_dir, seed=seeds[0], **kw))
    jobs = [(s, r) for s in seeds for r in rows]
    runs: dict[tuple[str, int], tuple[str, int]] = {}
    by_config: dict[str, tuple[str, str]] = {}
    results, trained_s, n_trained = [], 0.0, 0
    t_start = time.perf_counter()
    for i, (seed, row) in enumerate(jobs, 1):
        cfg = row_config(row, data_dir, seed=seed, **kw)
        workdir = os.path.join(out, row + (f"_seed{seed}" if seed else ""))
        key = json.dumps(_as_json(cfg), sort_keys=True)
        elapsed = time.perf_counter() - t_start
        left = len(jobs) - i + 1
        eta = format_duration(trained_s / n_trained * left) if n_trained else "unknown"
        logging.info("ablation row %d of %d: %s (seed %d) -> %s; elapsed %s, ETA %s", i,
                     len(jobs), row, seed, workdir, format_duration(elapsed), eta)
        if key in by_config:
            same, workdir = by_config[key]
            logging.info("ablation row %s: same config as %s, reusing %s", row, same, workdir)
            eval_dir = finished_eval_dir(workdir, cfg)
        else:
            eval_dir = finished_eval_dir(workdir, cfg)
            if eval_dir is not None:
                logging.info("ablation row %s: finished run found, reusing its evaluation %s",
                             row, eval_dir)
            else:
                t0 = time.perf_counter()
                summary = train_and_evaluate(cfg, workdir)
                summary.pop("run", None)
                trained_s += time.perf_counter() - t0
                n_trained += 1
                eval_dir = RunDir(workdir).eval(summary["step"])
                logging.info("ablation row %s trained and evaluated in %s", row,
                             format_duration(time.perf_counter() - t0))
            by_config[key] = (row, workdir)
        if eval_dir is None:
            raise RuntimeError(f"{workdir}: no evaluation after training")
        runs[row, seed] = (workdir, steps)
        loss = {k: cfg.loss[k] for k in ("use_dpr", "lam", "tau1", "tau2")}
        results.append({"row": row, "seed": seed, "method": cfg.method, "workdir": workdir,
                        "eval_dir": eval_dir, "loss": loss,
                        "counterfactual": cfg.data.counterfactual, **run_metrics(eval_dir)})
    paired: dict[str, list[dict[str, Any]]] = {ref: [] for ref in REFERENCES}
    for seed in seeds:
        for ref in REFERENCES:
            for row in rows:
                if row == ref:
                    continue
                if runs[row, seed][0] == runs[ref, seed][0]:  # the same run (sentence = picl)
                    continue
                p = _paired(ref, row, runs[ref, seed], runs[row, seed], n_resamples=n_resamples)
                p["seed"] = seed
                paired[ref].append(p)
    setup = {"model": model, "steps": steps, "batch": batch, "lr": lr, "seeds": seeds,
             "num_passages": num_passages, "test_questions": test_questions, "rows": rows,
             "out": os.path.abspath(out), "n_resamples": n_resamples,
             "minutes": round((time.perf_counter() - t_start) / 60, 2)}
    spread = (stats.seed_table(results, ("row",), [m for m in METRICS
                                                   if all(r[m] is not None for r in results)])
              if len(seeds) > 1 else [])
    result = {"setup": setup, "runs": results, "seed_spread": spread, "paired": paired}
    result["markdown"] = markdown(result)
    with atomic_open(os.path.join(out, "ablation.md")) as f:
        f.write(result["markdown"])
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
          "bootstrap for MRR and the gaps). gap = mean sim(q,p+) − sim(q,p*) with the answer "
          "sentence removed (AAR's p*); AA gap = the same with the answer string removed (the AA "
          "score's p*).",
    ]
    if result["seed_spread"]:
        spread = result["seed_spread"]
        parts.append(f"## Mean ± std [min, max] over seeds {s['seeds']}\n\n"
                     + report_lib.markdown_table(spread, list(spread[0])))
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
    tensorflow_for_host()
    f = FLAGS
    out = f.out or make_dir("ablation_bench_")
    result = run_ablation(out, f.rows, steps=f.steps, seeds=[int(s) for s in f.seeds],
                          model=f.model, num_passages=f.num_passages,
                          test_questions=f.test_questions, batch=f.batch, lr=f.lr,
                          n_resamples=f.n_resamples)
    print(result["markdown"])
    print(f"written: {os.path.join(out, 'ablation.md')}, {os.path.join(out, 'ablation.json')}")


FLAGS = flags.FlagValues()  # its own: tests import several benchmarks in one process


def define_flags() -> None:
    """The command's flags (defined only when run as a program: the module is also a library)."""
    flags.DEFINE_string("out", None, "Directory for data and runs (default: a temp dir).", flag_values=FLAGS)
    flags.DEFINE_list("rows", list(DEFAULT_ROWS), f"Rows ({', '.join(ROWS)}); dpr and picl are "
                      f"always trained (the paired tables compare against them).", flag_values=FLAGS)
    flags.DEFINE_integer("steps", 100, "Training steps per run.", flag_values=FLAGS)
    flags.DEFINE_integer("batch", 16, "Global batch (questions).", flag_values=FLAGS)
    flags.DEFINE_float("lr", 5e-5, "Learning rate.", flag_values=FLAGS)
    flags.DEFINE_list("seeds", ["0"], "Training seeds (config.seed); with several, the mean and "
                      "spread over seeds too, and paired tables per seed.", flag_values=FLAGS)
    flags.DEFINE_string("model", "minilm", "model.name_or_path (minilm, tiny, a HF dir).", flag_values=FLAGS)
    flags.DEFINE_integer("num_passages", 2000, "Synthetic corpus size.", flag_values=FLAGS)
    flags.DEFINE_integer("test_questions", 300, "Synthetic test questions.", flag_values=FLAGS)
    flags.DEFINE_integer("n_resamples", stats.DEFAULT_RESAMPLES,
                         "Bootstrap resamples of the paired tests.", flag_values=FLAGS)


if __name__ == "__main__":
    define_flags()
    _app.run(main, FLAGS, __doc__)
