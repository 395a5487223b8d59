"""Data-efficiency study of encoder attribution: data statistics vs each encoder's marginal.

``python -m dense_cf.studies.data_stats [--fractions 0.1,0.25,0.4,0.7,1.0] [--steps 100]
[--passages 2000] [--test_questions 300] [--world mixed] [--qpp 3] [--model minilm]
[--seeds 0] [--out runs/bench_data_stats]``

The attribution paper's §10 (Fig. 3/4, Tables 3/4) on one synthetic world:

1. generates one world with high positive-passage overlap (``--world mixed``: SQuAD-like
   paragraphs; ``--qpp 3``: up to three questions per positive passage, as SQuAD asks per
   paragraph);
2. trains DPR on nested random fractions of its training set (``config.data.train_fraction``,
   the study's seed; ``configs.studies.domain_config``'s lengths and optimiser). Epochs as in
   the paper: fraction f trains ``round(f × --steps)`` steps, so every run sees the same number
   of epochs of its own subset;
3. computes the training-data statistics of every fraction (``mining.stats.file_stats`` on the
   same subsets: #examples, corpus coverage, positive passage overlap, unique passage coverage
   = coverage × (1 − overlap)^α, docs/method.md §7);
4. marginalises on the world's test set (``eval.marginalize``): every fraction's passage
   encoder over all fractions' question encoders (its P marginal, eq. 7) and every question
   encoder over all passage encoders (its Q marginal). The paper marginalises over five 100 %
   models of other domains; here all encoders come from the one world;
5. the claims' rows (``contrast_rows``): passage encoder 40 % vs 100 %, both with the 100 %
   question encoder (exact McNemar per k; Table 4), and Spearman's ρ of the P marginal with
   unique coverage and of the Q marginal with #examples over the fractions (exact permutation
   p-value; Fig. 3/4). With five fractions only ρ = ±1 reaches p < 0.05.

Resumable: the world, finished runs (checkpoints), exports and indexes are reused when the
command is run again with the same ``--out``. Writes ``summary.json`` and ``report.md``.

``--seeds`` runs the study once per seed (the world's, the subsets' and the training seed):
seed 0 in ``--out``, seed N > 0 in ``<out>_seedN`` beside it (``studies.harness.seed_out``, the
layout of a study over seeds). With several seeds it then prints, and writes to
``<out>/over_seeds.{json,md}``, the per-fraction table and the claim rows' B − A (40 % vs 100 %
in points, ρ) as mean ± std [min, max] over the seeds.
"""

from __future__ import annotations

import os
import time
from typing import Any, Sequence

import ml_collections
import numpy as np
from absl import flags

from dense_cf import app as _app
from dense_cf.configs.studies import domain_config
from dense_cf.eval import marginalize as mg
from dense_cf.eval import report as report_lib
from dense_cf.eval import stats
from dense_cf.eval.stats import ALPHA
from dense_cf.experiment import train_and_evaluate as train
from dense_cf.files import atomic_open, utc_now, write_json
from dense_cf.mining import stats as data_stats
from dense_cf.studies import harness
from dense_cf.synthetic import generate as synthetic

DEFAULT_FRACTIONS = (0.1, 0.25, 0.4, 0.7, 1.0)
FULL, REDUCED = 1.0, 0.4  # Table 4: the passage encoder of 40 % against that of 100 %
SWAP_NAMES = ("P 100 %", "P 40 %")
TREND_NAMES = ("data statistic", "encoder marginal")

FLAGS = flags.FlagValues()  # its own: tests import several studies in one process
_F = harness.define_study_flags(
    FLAGS, out="runs/bench_data_stats", steps=100,
    help={"steps": "Training steps of the 100 % run; fraction f trains round(f * steps).",
          "batch": "Global training batch.",
          "model": "minilm, a local HF dir, or 'tiny' (random).",
          "seeds": "Data, subset and training seeds: the study once per seed (seed N > 0 in "
                   "<out>_seedN); with several, the mean and spread over seeds too."})
_FRACTIONS = flags.DEFINE_list("fractions", [str(f) for f in DEFAULT_FRACTIONS],
                               "Training-set fractions (nested subsets).", flag_values=FLAGS)
_PASSAGES = flags.DEFINE_integer("passages", 2000, "Passages in the world.", flag_values=FLAGS)
_TEST = flags.DEFINE_integer("test_questions", 300, "Test questions.", flag_values=FLAGS)
_WORLD = flags.DEFINE_string("world", "mixed", "Synthetic world (entity | mixed).",
                             flag_values=FLAGS)
_QPP = flags.DEFINE_integer("qpp", 3, "Questions per positive passage.", flag_values=FLAGS)
_KS = flags.DEFINE_list("k", ["1", "5", "20"], "Top-k cut-offs.", flag_values=FLAGS)
_THRESHOLD = flags.DEFINE_integer("threshold", 2, "Overlap: positives of >= this many questions.",
                                  flag_values=FLAGS)
_ALPHA = flags.DEFINE_float("alpha", 1.3, "Unique coverage exponent.", flag_values=FLAGS)


def fraction_steps(steps: int, fraction: float, equal_steps: bool = False) -> int:
    """Training steps of fraction ``fraction`` at ``steps`` for the full set: equal epochs
    (steps × fraction), or ``equal_steps`` (issue 50's control: every fraction trains
    ``steps``, so optimisation length no longer grows with the data)."""
    return int(steps) if equal_steps else max(1, int(round(steps * fraction)))


def fraction_label(fraction: float) -> str:
    return f"frac{fraction:.2f}"


def _index_of(fractions: Sequence[float], value: float) -> int | None:
    hits = [i for i, f in enumerate(fractions) if np.isclose(f, value)]
    return hits[0] if hits else None


def study_rows(fractions: Sequence[float], data: Sequence[dict[str, Any]],
               rep: dict[str, Any], ks: Sequence[int], *, seed: int = 0
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(per-fraction table rows, claim rows) from the data statistics of each fraction (in
    ``fractions`` order) and the marginalisation report over the fractions' runs (same order)."""
    table = []
    for i, (f, st) in enumerate(zip(fractions, data)):
        row = {"fraction": f, "examples": st["questions"], "coverage": st["coverage"],
               "overlap (%)": 100 * st["overlap"], "unique coverage": st["unique_coverage"]}
        for k in ks:
            a = rep["attribution"][k]
            row[f"tandem top-{k}"] = float(a["tandem"][i])
            row[f"P marginal top-{k}"] = float(a["p_marginal"][i])
            row[f"Q marginal top-{k}"] = float(a["q_marginal"][i])
        table.append(row)
    claim_rows = []
    full, reduced = _index_of(fractions, FULL), _index_of(fractions, REDUCED)
    if full is not None and reduced is not None:
        claim_rows += mg.passage_swap_rows(rep["first_hit_rank"], full, full, reduced, ks,
                                           SWAP_NAMES)
    # A rank correlation needs >= 3 fractions; with fewer the trend checks are "not measured".
    for k in ks if len(fractions) >= 3 else ():
        for side, stat, label, tail in (("P", "unique coverage", "unique coverage", "p_coverage"),
                                        ("Q", "examples", "#examples", "q_examples")):
            claim_rows.append(mg.trend_row(
                f"attribution.rho.top{k}.{tail}", [r[stat] for r in table],
                [r[f"{side} marginal top-{k}"] for r in table], TREND_NAMES,
                (label, f"{side} marginal top-{k}"), seed=seed))
    return table, claim_rows


def _claim_tables(result: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The swap rows and the trend rows (ρ as its own cell) of the report."""
    swap = [r for r in result["contrast_rows"] if SWAP_NAMES[0] in r]
    trend = [{**r, "ρ": r["B − A"].removeprefix("ρ = ")} for r in result["contrast_rows"]
             if TREND_NAMES[0] in r]
    return swap, trend


def rows_tables(result: dict[str, Any]) -> dict[str, Any]:
    """The report's claim tables keyed by metric id (``eval.report.keyed_rows``; the trend's ρ
    as ``B − A``, the cell the claims read) and the per-fraction figures behind the ρ rows:
    the rows sibling tools/rederive_claims.py reads."""
    swap, trend = _claim_tables(result)
    sig = f"significant at {ALPHA:g}"
    return {"fractions": result["table"], "fractions_from": "summary.json",
            "tables": {"swap": report_lib.keyed_rows(swap, ["metric", "n", *SWAP_NAMES, "B − A",
                                                            "test", "p", sig]),
                       "trend": report_lib.keyed_rows([{**r, "B − A": r["ρ"]} for r in trend],
                                                      ["metric", "n", "B − A", "test", "p",
                                                       sig])}}


def markdown(result: dict[str, Any]) -> str:
    """The per-fraction table and the claim rows."""
    ks = result["params"]["ks"]
    cols = ["fraction", "examples", "steps", "coverage", "overlap (%)", "unique coverage",
            *[f"{s} top-{k}" for k in ks for s in ("tandem", "P marginal", "Q marginal")]]
    rows = [{**r, "fraction": f"{r['fraction']:.2f}",
             "steps": result["steps"][fraction_label(r["fraction"])]} for r in result["table"]]
    p = result["params"]
    sig = f"significant at {ALPHA:g}"
    swap, trend = _claim_tables(result)
    # Summaries written before issue 50's control have no equal_steps: they scaled the steps.
    steps = (f"{p['steps']} steps at every fraction (equal steps)" if p.get("equal_steps")
             else f"{p['steps']} steps at 100 % (round(f × steps) at fraction f)")
    parts = [f"Data-efficiency study: DPR on nested fractions of one {p['world']} world "
             f"({p['passages']} passages, {p['qpp']} questions per positive, "
             f"{p['test_questions']} test questions); {steps}, model {p['model']}, "
             f"batch {p['batch']}, "
             f"seed {p['seed']}. Overlap = share of positives of >= {p['threshold']} training "
             f"questions; unique coverage = coverage × (1 − overlap)^{p['alpha']}. P/Q marginal: "
             "mean top-k (%) over all fractions' encoders of the other side (eq. 7).",
             report_lib.markdown_table(rows, cols, floatfmt=".1f")]
    if swap:
        parts.append("Passage encoder 40 % vs 100 %, both with the 100 % question encoder "
                     "(Table 4; exact McNemar on per-question hits):\n\n"
                     + report_lib.markdown_table(swap, ["metric", "n", *SWAP_NAMES, "B − A",
                                                        "test", "p", sig]))
    parts.append("Rank correlation over the fractions (Fig. 3/4; Spearman, two-sided "
                 "permutation p-value, exact up to 8 fractions):\n\n"
                 + report_lib.markdown_table(trend, ["metric", "n", "ρ", "test", "p", sig]))
    return "\n\n".join(parts) + "\n"


def run_study(out: str, *, fractions: Sequence[float] = DEFAULT_FRACTIONS, steps: int = 100,
              passages: int = 2000, test_questions: int = 300, world: str = "mixed",
              qpp: int = 3, model: str = "minilm", batch: int = 16, lr: float = 5e-5,
              ks: Sequence[int] = (1, 5, 20), seed: int = 0, threshold: int = 2,
              alpha: float = 1.3, equal_steps: bool = False,
              verbose: bool = True) -> dict[str, Any]:
    """Steps 1-5 of the module docstring into ``out``; returns what ``summary.json`` holds.
    ``equal_steps``: every fraction trains ``steps`` (:func:`fraction_steps`)."""
    out = os.path.abspath(out)
    say = print if verbose else (lambda *a, **k: None)
    fractions = sorted({float(f) for f in fractions})
    if not fractions or not all(0.0 < f <= 1.0 for f in fractions):
        raise ValueError(f"fractions must lie in (0, 1], got {fractions}")
    ks = tuple(sorted({int(k) for k in ks}))
    t0 = time.perf_counter()
    data_dir = os.path.join(out, "data")
    synthetic.generate_or_check(data_dir, passages, seed, test_questions=test_questions,
                                num_hard_negatives=1, world=world, questions_per_passage=qpp)
    train_file = os.path.join(data_dir, synthetic.FILES["train"])
    st = data_stats.file_stats(train_file, fractions=fractions, seed=seed, threshold=threshold,
                               alpha=alpha)
    by_fraction = {s["fraction"]: s for s in st["subsets"]}
    small = [f for f in fractions if by_fraction[f]["questions"] < batch]
    if small:  # refuse before any training, not after the first runs
        raise ValueError(f"{train_file}: fractions {small} hold fewer than one batch of {batch} "
                         f"of its {st['valid_records']} valid records; use more --passages")

    def config(f: float, run_seed: int) -> ml_collections.ConfigDict:
        cfg = domain_config(data_dir, model=model, steps=fraction_steps(steps, f, equal_steps),
                            batch=batch, lr=lr, seed=run_seed)
        cfg.data.train_fraction, cfg.data.train_fraction_seed = f, run_seed
        return cfg

    # A run per fraction; this seed's runs live in this seed's out (harness.seed_out).
    study = harness.Study("data_stats", tuple(
        harness.StudyRun(fraction_label(f), lambda s, f=f: config(f, s)) for f in fractions))
    started = utc_now()
    trained = harness.train_study(study, out, [seed], reuse=False, train=train,
                                  workdir=lambda name, _: os.path.join(out, "runs", name))
    workdirs, train_s, steps_of = [], {}, {}
    for n, f in enumerate(fractions, 1):
        t = trained[fraction_label(f), seed]
        train_s[t.name], steps_of[t.name] = round(t.seconds, 1), t.step
        say(f"run {n} of {len(fractions)}: {t.name} ({by_fraction[f]['questions']} examples), "
            f"step {t.step}, train loss "
            f"{t.summary['train'].get('train/loss', float('nan')):.4f} ({train_s[t.name]} s)",
            flush=True)
        workdirs.append(t.workdir)

    t1 = time.perf_counter()
    rep = mg.marginalize_many(
        workdirs, [mg.TestSet(os.path.join(data_dir, synthetic.FILES["test_qa"]),
                              os.path.join(data_dir, synthetic.FILES["corpus"]),
                              in_domain=_index_of(fractions, FULL),
                              out_dir=os.path.join(out, "marginalize"),
                              title="data-efficiency study: fractions of one world")], ks=ks)[0]
    marg_s = round(time.perf_counter() - t1, 1)
    say(mg.summary_text(rep), flush=True)
    table, claim_rows = study_rows(fractions, [by_fraction[f] for f in fractions], rep, ks,
                                   seed=seed)
    result = {"fractions": fractions, "table": table, "contrast_rows": claim_rows,
              "steps": steps_of, "train_s": train_s, "marginalize_s": marg_s,
              "total_s": round(time.perf_counter() - t0, 1), "data_stats": st,
              "params": {"model": model, "steps": steps, "equal_steps": equal_steps,
                         "world": world, "qpp": qpp,
                         "passages": passages, "test_questions": test_questions,
                         "batch": batch, "lr": lr, "seed": seed, "ks": list(ks),
                         "threshold": threshold, "alpha": alpha},
              "report": mg.report_path(os.path.join(out, "marginalize"))}
    result["table_markdown"] = markdown(result)
    say("\n" + result["table_markdown"])
    for r in claim_rows:
        say(f"- {r['sentence']}")
    say(f"timing: training {train_s}, marginalisation {marg_s}s, total {result['total_s']}s")
    result["stamp"] = harness.report_stamp(started, {n: t.workdir for (n, _), t in trained.items()})
    write_json(os.path.join(out, "summary.json"), result)
    with atomic_open(os.path.join(out, "report.md")) as f:
        f.write("# Encoder attribution: data statistics\n\n"
                + harness.stamp_markdown(result["stamp"]) + "\n\n" + result["table_markdown"])
    tables = rows_tables(result)
    report_lib.write_rows(os.path.join(out, "report.md"), tables.pop("tables"), **tables)
    return result


def over_seeds(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean ± std [min, max] over the seeds' :func:`run_study` results: the per-fraction table
    (``seed_spread``) and the claim rows' B − A (``seed_diff``: 40 % − 100 % in points, ρ);
    ``markdown`` holds both tables."""
    seeds = [r["params"]["seed"] for r in results]
    rows = [{**row, "seed": r["params"]["seed"]} for r in results for row in r["table"]]
    metrics = [m for m in rows[0] if m not in ("fraction", "seed")]
    spread = stats.seed_table(rows, ("fraction",), metrics)
    diff = stats.seed_diff_table([row for r in results for row in r["contrast_rows"]])
    md = (f"## Mean ± std [min, max] over seeds {seeds}\n\n"
          "Per fraction: the data statistics and the tandem, P and Q marginal top-k (%) of the "
          "seed's world and runs.\n\n"
          + report_lib.markdown_table(spread, ["fraction", "seeds", *metrics])
          + f"\n\n## Claim rows over seeds {seeds}\n\n"
          f"top-k: B − A = {SWAP_NAMES[1]} − {SWAP_NAMES[0]} passage encoder in points (both "
          "with the 100 % question encoder); ρ rows: B − A = Spearman's ρ. Each seed tested on "
          "its own.\n\n"
          + report_lib.markdown_table(diff, ["metric", "seeds", "B − A",
                                             f"significant at {ALPHA:g}"]) + "\n")
    return {"seeds": seeds, "seed_spread": spread, "seed_diff": diff, "markdown": md}


def run_seeds(out: str, seeds: Sequence[int] = (0,), **kw: Any) -> dict[str, Any]:
    """:func:`run_study` once per seed, summarised by :func:`over_seeds`
    (``harness.study_over_seeds``: seed N > 0 in ``<out>_seedN``)."""
    return harness.study_over_seeds(run_study, over_seeds, out, seeds, **kw)


def main(argv) -> None:
    del argv
    seeds = _F.seed_list()
    res = run_seeds(_F.out.value, seeds, fractions=[float(f) for f in _FRACTIONS.value],
                    steps=_F.steps.value, passages=_PASSAGES.value, test_questions=_TEST.value,
                    world=_WORLD.value, qpp=_QPP.value, model=_F.model.value,
                    batch=_F.batch.value, lr=_F.lr.value, ks=[int(k) for k in _KS.value],
                    threshold=_THRESHOLD.value, alpha=_ALPHA.value)
    harness.print_over_seeds(_F.out.value, seeds, res)


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
