"""The README's main command: synthetic benchmark → train DPR and PiCL (MiniLM) → compare →
end-to-end QA with a small extractive reader.

``python -m dense_cf.demo --workdir=runs/demo`` (``make demo``). Re-running resumes finished or
interrupted runs from their checkpoints. The report compares retrieval (top-k, MRR),
answer-awareness (AAR, AA score) and robustness to near-duplicate distractors, each figure with
its 95 % interval, and pairs the first method with each other one on the same test items
(``dense_cf.analysis.compare``), saying whether each difference is significant at 0.05.
``--seeds 0,1,2`` trains every method once per seed (seed N > 0 in ``<method>_seedN``) and adds
the mean ± std [min, max] over seeds; the paired tables are then per seed.

Then (``--reader``, default on; docs/readers.md, "Demo") the first method's run retrieves for
train and dev questions (``reader_data``), a small MiniLM-initialised extractive reader
(``presets.reader_demo_config``) trains on those results in ``WORKDIR/reader``, and reads every
method's (first seed's) test top-k: EM@1/5/20 per retriever with 95 % intervals and McNemar
tests of the EM differences (``dense_cf.eval.e2e``; ``WORKDIR/reader/e2e/step_N/``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Any

import jax
from absl import flags, logging

from dense_cf import app as _app
from dense_cf.analysis import compare as compare_lib
from dense_cf.configs.presets import DEMO_READER, demo_config, reader_demo_config
from dense_cf.console import quiet_library_logs
from dense_cf.eval import aar_math, outcomes, stats
from dense_cf.eval import claims as claims_lib
from dense_cf.eval import e2e as e2e_lib
from dense_cf.eval import report as report_lib
from dense_cf.eval.claims import Check
from dense_cf.eval.robustness import plot_runs, robustness_table
from dense_cf.experiment import train_and_evaluate as train
from dense_cf.files import UserError, utc_now
from dense_cf.mining.reader_data import split_files
from dense_cf.studies import harness
from dense_cf.train.preemption import PREEMPTED_EXIT, Preempted
from dense_cf.train.run import RunDir

FLAGS = flags.FlagValues()  # its own, as every binary (dense_cf.app): --help exits 0
_WORKDIR = flags.DEFINE_string("workdir", "runs/demo", "Where data, runs and the report go.",
                               flag_values=FLAGS)
_METHODS = flags.DEFINE_list(
    "methods", ["dpr", "picl"], "Methods to train on the demo set-up (configs/demo.py:METHOD, "
    "i.e. dense_cf.configs.presets.demo_config): dpr, picl, eadpr, dcsr; the first is the "
    "baseline every other one is compared with.", flag_values=FLAGS)
_STEPS = flags.DEFINE_integer("num_steps", 0, "Override the demo's number of steps (0 = config).",
                              flag_values=FLAGS)
_MATMUL = flags.DEFINE_enum(
    "matmul_dtype", "", ["", "float32", "bfloat16"],
    "model.matmul_dtype of every run, the reader's included ('' = the config's, float32). "
    "bfloat16 is faster on a CPU with AVX512_BF16 and changes the metrics within their intervals "
    "(docs/scale.md \"bfloat16 operands on the CPU\").", flag_values=FLAGS)
_SEEDS = harness.define_seeds(FLAGS, "Training seeds (config.seed): each method is trained "
                              "once per seed; with several, the mean and spread over seeds too.")
_READER = flags.DEFINE_bool("reader", True, "Also train the small extractive reader on the first "
                            "method's results and report end-to-end EM per retriever.",
                            flag_values=FLAGS)


def load_demo_config(method: str):
    return demo_config(method)


def definition(methods: list[str], data_dir: str, num_steps: int = 0,
               matmul_dtype: str = "") -> harness.Study:
    """The demo as a study: a run per method (``presets.demo_config``) on the synthetic data in
    ``data_dir``, ``num_steps`` steps if set; the first method (the baseline) paired with each
    other one."""
    def config(method: str, seed: int):
        cfg = load_demo_config(method)
        cfg.data.data_dir = data_dir
        cfg.seed = seed
        if num_steps:
            cfg.train.num_steps = num_steps
        if matmul_dtype:
            cfg.model.matmul_dtype = matmul_dtype
        return cfg
    runs = tuple(harness.StudyRun(m, lambda seed, m=m: config(m, seed)) for m in methods)
    return harness.Study("demo", runs, tuple((methods[0], m) for m in methods[1:]))


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
        rows.append({**row, **_aar_cells(ev.get("aar", {}))})
    return rows


def _ci_column(metric_id: str) -> str:
    """A report column: the metric's label (eval.outcomes) and its 95 % interval."""
    return f"{outcomes.metric(metric_id).label} [95% CI]"


def _aar_cells(aar: dict[str, Any]) -> dict[str, Any]:
    """An AAR report's cells: AAR and the mean gap (sentence p*), the AA score (answer removed)."""
    strategies, cells = aar.get("strategies", {}), {}
    if "sentence" in strategies:
        e = strategies["sentence"]
        cells[_ci_column("aar.sentence")] = _with_ci(100 * e.get("aar", float("nan")),
                                                     e.get("aar_ci"), 100.0)
        cells[_ci_column("aar.sentence.gap")] = _with_ci(
            e["score_diff"]["all"]["mean"], e.get("score_diff_ci"), digits=4)
    if "answer" in strategies:
        e = strategies["answer"]
        cells[_ci_column("aar.answer")] = _with_ci(100 * e.get("aar", float("nan")),
                                                   e.get("aar_ci"), 100.0)
    return cells


UNTRAINED = "untrained checkpoint (step 0)"


def untrained_row(aar: dict[str, Any]) -> dict[str, Any]:
    """The report's row for the checkpoint every run starts from (issue 32 item 6): its AAR and
    AA score on the same triplets with the same pooling, so a run that training degraded shows."""
    return {"method": UNTRAINED, "steps": 0, **_aar_cells(aar)}


def seed_rows(results: dict[str, dict], method_seed: dict[str, tuple[str, int]]) -> list[dict]:
    """Numeric figures per run for the spread over seeds: method, seed, top-k (%), MRR ×100,
    AAR and AA score (%)."""
    rows = []
    for name, s in results.items():
        method, seed = method_seed[name]
        ev = s.get("eval", {})
        ret = ev.get("retrieval", {})
        row = {"method": method, "seed": seed,
               **{f"top-{k}": v for k, v in ret.get("top_k", {}).items()}}
        if ret:
            row["MRR"] = 100 * ret["mrr"]
        strategies = ev.get("aar", {}).get("strategies", {})
        for strategy in ("sentence", "answer"):
            if "aar" in strategies.get(strategy, {}):
                row[outcomes.metric(f"aar.{strategy}").label] = 100 * strategies[strategy]["aar"]
        rows.append(row)
    return rows


# What the PiCL paper claims against DPR (issue 16 §2, docs/replication.md), as paired checks
# keyed by metric id (eval.outcomes). The robustness check is at the largest distractor count K
# the runs were evaluated with (filled in per comparison; K = 5 when there is none).
PICL_CLAIMS = (("AAR up (PiCL §3.3, Fig. 2)", Check("aar.sentence")),
               ("gap sim(q,p+) − sim(q,p*) wider (PiCL App. B, Table 5)",
                Check("aar.sentence.gap")),
               ("AA score up (PiCL §6)", Check("aar.answer")),
               ("robust to near-duplicate distractors (PiCL §6)", Check("robustness.k5.top1")),
               ("top-1 not worse by > 2 points", claims_lib.not_worse("retrieval.top1")),
               ("top-5 not worse by > 2 points", claims_lib.not_worse("retrieval.top5")),
               ("top-20 not worse by > 2 points", claims_lib.not_worse("retrieval.top20")),
               ("MRR not worse by > 2 points (×100)", claims_lib.not_worse("retrieval.mrr")))
_ROBUST = ("robustness.k", ".top1")  # robustness.k<K>.top1: top-1 with K distractors


def _robust_k(metric_id: str) -> int | None:
    head, tail = _ROBUST
    k = metric_id[len(head):-len(tail)]
    return int(k) if metric_id.startswith(head) and metric_id.endswith(tail) and k.isdigit() \
        else None


def paired_sections(compared: list[tuple[str, str, dict[str, Any] | Exception]]) -> str:
    """Markdown: each compared ``(A, B, result or error)`` (``harness.compare_study`` with
    ``catch``, its runs labelled) on the same test items (``dense_cf.analysis.compare``: McNemar on
    top-k hits and AAR / AA outcomes, paired bootstrap on MRR and the mean score gap), each row
    saying whether the difference is significant at 0.05; a pair that could not be compared
    says why."""
    parts = []
    for base, other, res in compared:
        if isinstance(res, Exception):
            parts.append(f"## Paired comparison: {base} vs {other}\n\nnot compared: {res}")
            continue
        parts.append(f"## Paired comparison: {base} (A) vs {other} (B) on the same test items\n\n"
                     + compare_lib.markdown(res, title=False))
    return "\n\n".join(parts)


def claims_section(compared: list[tuple[str, str, dict[str, Any] | Exception]]) -> str:
    """Markdown: for each compared pair, PiCL's claims (:data:`PICL_CLAIMS`) with B − A, p and
    a verdict (``eval.claims``: reproduced / no difference detected / not reproduced /
    reversed), and one line saying
    which claims hold."""
    parts = []
    for base, other, res in compared:
        if isinstance(res, Exception):
            continue
        rows = res["rows"]
        ks = sorted(k for k in (_robust_k(r.get("id", "")) for r in rows) if k is not None)
        checks = [dataclasses.replace(c, metric=f"{_ROBUST[0]}{ks[-1]}{_ROBUST[1]}")
                  if _robust_k(c.metric) is not None and ks else c for _, c in PICL_CLAIMS]
        entries = claims_lib.evaluate_checks(rows, checks, (base, other))
        table = [{"claim": label, **e, base: e.get("A", ""), other: e.get("B", "")}
                 for (label, _), e in zip(PICL_CLAIMS, entries)]
        parts.append(
            f"## PiCL's claims: {other} (B) against {base} (A)\n\n"
            + report_lib.markdown_table(table, ["claim", "metric", base, other, "B − A",
                                                "95% CI", "p at δ0", "p (Holm)", "verdict"])
            + f"\n\n**{claims_lib.verdict_text(entries)}.** Verdicts (eval.claims, "
              "docs/replication.md Method): 'p at δ0' is the p of the test that decides (Tango's "
              "score test for rates, the paired bootstrap for MRR and the gap) at 0, or at "
              "−margin for 'not worse'; the 95 % interval inverts the same test. 'p (Holm)' is "
              "its Holm-adjusted value over the claims. reproduced = p at δ0 < 0.05 on the "
              "claimed side (every check must hold: an intersection–union test, no "
              "correction); reversed = Holm-adjusted p < 0.05 on the other side; no difference "
              "detected / not reproduced ('not worse', its interval reaches −margin) = "
              "neither; uninformative = the reference run is at or above 97 % (or at or below "
              "3 %), so the check cannot test the claim.")
    return "\n\n".join(parts)


def reader_stage(workdir: str, retrievers: dict[str, tuple[str, Any]], *, config=None,
                 seed: int = 0, settings: dict[str, Any] | None = None,
                 matmul_dtype: str = "") -> dict[str, Any]:
    """The demo's end-to-end QA (module docstring): ``retrievers`` maps a label to ``(run
    directory, trained Run)``, the first being the one whose train/dev results the reader learns
    from. Reuses results files and a trained reader already there. Returns
    :func:`dense_cf.eval.e2e.evaluate_e2e`'s result plus ``reader_summary`` and ``stages``
    (``[(stage, seconds)]``: retrieval for the reader's data, its training, its evaluation)."""
    settings = {**DEMO_READER, **(settings or {})}
    label, (base_dir, base_run) = next(iter(retrievers.items()))
    logging.info("=== demo: %s retrieves for the reader's train / dev questions ===", label)
    t0 = time.perf_counter()
    files = split_files(base_dir, base_run, {"train": settings["train_questions"],
                                             "dev": settings["dev_questions"]}, k=settings["k"])
    cfg = config or reader_demo_config()
    if matmul_dtype:
        cfg.model.matmul_dtype = matmul_dtype
    cfg.reader.train_file, cfg.reader.dev_file = files["train"], files["dev"]
    cfg.seed = seed
    reader_dir = os.path.join(workdir, "reader")
    stages = [("reader: retrieval for its train / dev questions", time.perf_counter() - t0)]
    logging.info("=== demo: training the reader ===")
    t0 = time.perf_counter()
    summary = train(cfg, reader_dir)
    stages.append((f"reader: training ({summary['step']} steps)", time.perf_counter() - t0))
    run = summary.pop("run")
    result_files = [os.path.join(d, "eval", f"step_{r.step}", e2e_lib.RESULTS_FILE)
                    for d, r in retrievers.values()]
    logging.info("=== demo: reading every retriever's top-k ===")
    t0 = time.perf_counter()
    result = e2e_lib.evaluate_e2e(result_files, reader_dir, ks=settings["eval_ks"],
                                  names=list(retrievers), run=run)
    stages.append(("reader: evaluation (every retriever's top-k)", time.perf_counter() - t0))
    result["reader_summary"], result["stages"] = summary, stages
    return result


def stage_rows(results: dict[str, dict], extra: list[tuple[str, float]],
               wall: float) -> list[dict[str, Any]]:
    """The demo's stage table (issue 46): seconds per stage of this command, from each run's
    summary (training ``timing.train_s``; evaluation ``eval.wall_s``, the retrieval export from
    ``eval.retrieval.timing.export_s``) and the ``extra`` stages the demo timed itself (untrained
    AAR, reader stages), then the rest of ``wall`` (data generation, restores, compiles outside
    the stages, comparisons, the report). A resumed run shows the time of this command."""
    timed: list[tuple[str, float]] = []
    for name, s in results.items():
        train_s = s.get("timing", {}).get("train_s")
        if train_s is not None:
            timed.append((f"{name}: training ({s.get('step')} steps)", float(train_s)))
        ev = s.get("eval", {})
        wall_s = ev.get("wall_s", {})
        export_s = ev.get("retrieval", {}).get("timing", {}).get("export_s")
        if "retrieval" in wall_s:
            if export_s is not None:
                timed.append((f"{name}: retrieval export", float(export_s)))
                timed.append((f"{name}: retrieval index + search + report",
                              float(wall_s["retrieval"]) - float(export_s)))
            else:
                timed.append((f"{name}: retrieval evaluation", float(wall_s["retrieval"])))
        for stage, label in (("aar", outcomes.metric("aar.sentence").label),
                             ("robustness", "robustness")):
            if stage in wall_s:
                timed.append((f"{name}: {label}", float(wall_s[stage])))
    timed += [(stage, float(sec)) for stage, sec in extra]
    timed.append(("other (data generation, restores, comparisons, report)",
                  max(wall - sum(sec for _, sec in timed), 0.0)))
    return [{"stage": stage, "seconds": round(sec, 1),
             "share of wall (%)": round(100 * sec / wall, 1) if wall > 0 else float("nan")}
            for stage, sec in timed]


def stage_section(rows: list[dict[str, Any]], wall: float) -> str:
    """Markdown: the stage table and the command's wall time."""
    return (f"## Where the time went (this command: {wall / 60:.1f} min wall)\n\n"
            + report_lib.markdown_table(rows, ["stage", "seconds", "share of wall (%)"]))


def _em_rows(p: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """A reader comparison's EM rows and the columns of its table."""
    return ([r for r in p["rows"] if r.get("id", "").startswith("e2e.em@")],
            ["metric", "n", p["a"], p["b"], "B − A", "test", "p", f"significant at {stats.ALPHA:g}"])


def em_tables(result: dict[str, Any]) -> dict[str, dict[str, dict[str, str]]]:
    """The EM tables of :func:`reader_section` keyed by metric id (``"em: B vs A"``; the report's
    rows sibling, which tools/rederive_claims.py reads)."""
    return {f"em: {p['b']} vs {p['a']}": report_lib.keyed_rows(*_em_rows(p))
            for p in result["paired"] if "error" not in p}


def reader_section(result: dict[str, Any]) -> str:
    """Markdown: the reader's set-up, EM per retriever and k (PiCL Table 3 layout) and the
    McNemar tests of the EM differences."""
    ks = result["ks"]
    s = result["reader_summary"]
    rows = [{"retriever": r["retriever"],
             **{f"answer in top-{k}": r["answer_in_top_k"].get(k) for k in ks},
             **{f"EM@{k} [95% CI]": _with_ci(r["em"][k], r["em_ci"][k])
                for k in ks}} for r in result["retrievers"]]
    parts = [f"## End-to-end QA: one extractive reader over each retriever's top-k (PiCL Table 3)\n\n"
             f"Reader: MiniLM's first layers, {s['step']} steps on the first retriever's results "
             f"({s['data'].get('kept')} train questions kept of {s['data'].get('questions')}; "
             f"dev selection accuracy {s['dev'].get('rank_acc', float('nan')):.2f}), reading the "
             f"saved test lists (docs/readers.md). Reports: `{result['out_dir']}/e2e.md`.\n\n"
             + report_lib.markdown_table(rows, list(rows[0]))]
    for p in result["paired"]:
        if "error" in p:
            parts.append(f"{p['a']} vs {p['b']}: not compared: {p['error']}")
            continue
        em_rows, cols = _em_rows(p)
        parts.append(f"### EM: {p['b']} (B) against {p['a']} (A), McNemar on the same questions\n\n"
                     + report_lib.markdown_table(em_rows, cols) + "\n\n"
                     + "\n".join(f"- {r['sentence']}" for r in em_rows))
    return "\n\n".join(parts)


def compilation_cache() -> str | None:
    """Turns on XLA's persistent compilation cache for this process, in
    ``harness.cache_root()/jax`` (unless ``JAX_COMPILATION_CACHE_DIR`` already chose one):
    a re-run, another ``--seeds`` or ``--methods`` call reuses the compiled train steps, encoders
    and reader programs (identical executables, so nothing computed changes). Returns the
    directory, or None with ``DENSE_CF_CACHE=off``."""
    chosen = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    root = harness.cache_root()
    if chosen or root is None:
        return chosen or None
    path = os.path.join(root, "jax")
    jax.config.update("jax_compilation_cache_dir", path)
    return path


def main(argv) -> None:
    del argv
    quiet_library_logs()
    compilation_cache()
    try:
        run_demo(os.path.abspath(_WORKDIR.value))
    except _app.USER_ERRORS as e:  # a bad path, a full disk, a bad data file: one line
        sys.exit(_app.report_user_error(e))
    except Preempted as e:  # SIGTERM/SIGINT: the step saved; the same command resumes
        sys.stderr.write(f"preempted: {e}\n")
        sys.exit(PREEMPTED_EXIT)


def run_demo(workdir: str) -> None:
    """Trains every ``--methods`` run under ``workdir`` and writes the comparison report."""
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise UserError(f"--workdir {workdir} is a file, expected a directory (made if absent)")
    t_start, started = time.perf_counter(), utc_now()

    seeds = harness.parse_seeds(_SEEDS.value)
    methods = list(_METHODS.value)
    study = definition(methods, os.path.join(workdir, "synthetic"), num_steps=_STEPS.value,
                       matmul_dtype=_MATMUL.value)
    # reuse=False: every run goes through train (a finished one resumes at its last step and is
    # evaluated again) and its trained model stays for the reader stage.
    trained = harness.train_study(study, workdir, seeds, reuse=False, train=train)

    def label(method: str, seed: int) -> str:  # one seed: a run is named by its method
        return method if len(seeds) == 1 else f"{method} (seed {seed})"

    results, run_dirs, method_seed, runs = {}, {}, {}, {}
    for (method, seed), t in trained.items():
        name = label(method, seed)
        results[name], run_dirs[name], runs[name] = t.summary, t.workdir, t.run
        method_seed[name] = (method, seed)
    rows = report_rows(results)
    # The checkpoint the runs start from, read as they are (the demo's [CLS] pooling; the
    # decision and why: docs/replication.md, "Pooling").
    t0 = time.perf_counter()
    untrained = harness.untrained_aar(study.runs[0].config(seeds[0]),
                                      os.path.join(workdir, "untrained"))
    stages = [("untrained checkpoint: AAR", time.perf_counter() - t0)] if untrained else []
    if untrained:
        rows.append(untrained_row(untrained))
    columns = list(dict.fromkeys(k for r in rows for k in r))
    table = report_lib.markdown_table(rows, columns)
    if len(seeds) > 1:
        numeric = seed_rows(results, method_seed)
        spread = stats.seed_table(numeric, ("method",),
                                  [c for c in dict.fromkeys(k for r in numeric for k in r)
                                   if c not in ("method", "seed")])
        table += "\n\n" + harness.spread_section(seeds, spread)
    diffs = {}
    for name in results:
        z = outcomes.read_aar_scores(RunDir(run_dirs[name]).eval(results[name]["step"]),
                                     "sentence", dtype=None)
        if z is not None:
            diffs[name] = aar_math.score_diffs(z["pos"], z["cf"])
    if diffs:
        aar_math.histogram_plot(diffs, os.path.join(workdir, "aar_hist.png"),
                                title="sim(q,p+) - sim(q,p*) on the synthetic test triplets")
        table += "\n\nAAR triplets: " + ", ".join(f"{m}: {len(d)}" for m, d in diffs.items())
        table += "\n\n![histogram of sim(q,p+) − sim(q,p*) per method](aar_hist.png)"
    compared = [(label(c.a, c.seed), label(c.b, c.seed), c.result)
                for c in harness.compare_study(study, trained, seeds, label=label, catch=True)]
    claims = claims_section(compared)
    if claims:
        table += "\n\n" + claims
    paired = paired_sections(compared)
    if paired:
        table += "\n\n" + paired
    robust = {m: r["eval"]["robustness"] for m, r in results.items()
              if "robustness" in r.get("eval", {})}
    if robust:
        table += ("\n\n## Top-k vs. near-duplicate distractors per question (EADPR Fig. 5)\n\n"
                  + robustness_table(robust))
        plot_runs(robust, os.path.join(workdir, "robustness.png"))
        table += "\n\n![top-k vs. distractors per question](robustness.png)"
    columns = ["train loss", "train l_dpr", "dev loss", "dev rank_acc", "top-k", "MRR",
               outcomes.metric("aar.sentence").label, "mean diff",
               outcomes.metric("aar.answer").label, "95% CI", "K"]
    rows_tables: dict[str, Any] = {}
    if _READER.value:
        seed0 = [n for n in results if method_seed[n][1] == seeds[0]]  # the reader reads these
        e2e = reader_stage(workdir, {method_seed[n][0]: (run_dirs[n], runs[n]) for n in seed0},
                           seed=seeds[0], matmul_dtype=_MATMUL.value)
        table += "\n\n" + reader_section(e2e)
        rows_tables = em_tables(e2e)
        stages += e2e["stages"]
        columns.append("EM@k")
    heading, legend = report_lib.columns_section(columns)
    table += f"\n\n## {heading}\n\n{legend}"
    first = load_demo_config(_METHODS.value[0])
    wall = time.perf_counter() - t_start
    intro = (f"{first.train.num_steps if not _STEPS.value else _STEPS.value} steps × "
             f"{first.train.global_batch} questions per method, "
             f"{first.data.num_hard} BM25 hard negative(s) per question "
             "(in-batch negatives only by default: docs/replication.md explains why), seeds "
             f"{seeds}. Wall time of this command: {wall / 60:.1f} min (runs already trained "
             "are reused, so a re-run is faster).")
    table += "\n\n" + stage_section(stage_rows(results, stages, wall), wall)
    stamp = harness.report_stamp(started, run_dirs)
    intro += "\n\n" + harness.stamp_markdown(stamp)
    with report_lib.atomic_open(os.path.join(workdir, "report.md")) as f:
        f.write("# dense_cf demo: synthetic QA benchmark, all-MiniLM-L6-v2\n\n" + intro
                + "\n\n" + table + "\n")
    report_lib.write_rows(os.path.join(workdir, "report.md"), rows_tables)
    # The demo's own report, named as a run's (report.md beside it).
    report_lib.write_json(os.path.join(workdir, outcomes.REPORT), results)
    print(intro + "\n\n" + table)
    print(f"\nreport: {os.path.join(workdir, 'report.md')}", file=sys.stderr)


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
