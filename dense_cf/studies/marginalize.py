"""Encoder-marginalisation benchmark on the multi-domain synthetic world (docs/method.md §7).

``python -m dense_cf.studies.marginalize [--domains 3] [--steps 100] [--passages 1000]
[--worlds entity,mixed,entity] [--qpp 1,3,1] [--model minilm] [--seeds 0]
[--out runs/bench_marginalize]``

1. generates ``--domains`` template-disjoint synthetic domains (``synthetic.generate_domains``:
   different entity types, passage styles and question templates), each in DPR layout;
   ``--worlds``/``--qpp`` give domain i its own world (``entity``: NQ-like, every sentence about
   the title entity; ``mixed``: SQuAD-like, a passage's sentences about different entities) and
   questions per positive passage (SQuAD asks several per paragraph), so domains can differ as
   NQ, SQuAD and TriviaQA do, not only in vocabulary;
2. trains one DPR bi-encoder per domain (``dense_cf.train.loop.train``; MiniLM or a random
   "tiny" BERT, the demo's lengths and optimiser, ``--steps`` steps);
3. runs ``dense_cf.eval.marginalize`` on each domain's test set over all K runs (K×K
   question × passage encoder matrix, eq. 7 contributions, the domain's own run = in-domain);
4. prints every matrix and a summary: per test domain, the in-domain question and passage
   encoders' marginalised top-k in % of the in-domain tandem model (the paper's Fig. 2), and
   the paired test of the in-domain run's P − Q over the test questions (``encoder_contrast``).

Everything is resumable: existing data, finished runs (checkpoints), exports and indexes are
reused when the command is run again with the same ``--out``.

``--seeds`` runs the study once per seed (the domains' data, the training and the bootstrap
seed): seed 0 in ``--out``, seed N > 0 in ``<out>_seedN`` beside it (``studies.harness.seed_out``,
the layout of a study over seeds). With several seeds it then prints, and writes to
``<out>/over_seeds.{json,md}``, the summary figures and the in-domain P − Q as mean ± std
[min, max] over the seeds.
"""

from __future__ import annotations

import os
import time
from typing import Any, Sequence

import numpy as np
from absl import flags

from dense_cf import app as _app
from dense_cf.configs.studies import domain_config
from dense_cf.eval import marginalize as mg
from dense_cf.eval import stats
from dense_cf.eval.report import markdown_table, write_json
from dense_cf.experiment import train_and_evaluate as train
from dense_cf.files import utc_now
from dense_cf.studies import harness
from dense_cf.synthetic import generate as synthetic

FLAGS = flags.FlagValues()  # its own: tests import several studies in one process
_F = harness.define_study_flags(
    FLAGS, out="runs/bench_marginalize", steps=100,
    help={"steps": "Training steps per domain model.", "batch": "Global training batch.",
          "model": "minilm, a local HF dir, or 'tiny' (random).",
          "seeds": "Data and training seeds: the study once per seed (seed N > 0 in "
                   "<out>_seedN); with several, the mean and spread over seeds too."})
_DOMAINS = flags.DEFINE_integer("domains", 3, "Number of synthetic domains (1-3).", flag_values=FLAGS)
_PASSAGES = flags.DEFINE_integer("passages", 1000, "Passages per domain.", flag_values=FLAGS)
_TEST = flags.DEFINE_integer("test_questions", 200, "Test questions per domain.", flag_values=FLAGS)
_WORLDS = flags.DEFINE_list("worlds", [], "Per-domain synthetic world (entity | mixed); empty: "
                            "entity for all.", flag_values=FLAGS)
_QPP = flags.DEFINE_list("qpp", [], "Per-domain questions per positive passage; empty: 1 for all.",
                         flag_values=FLAGS)
_KS = flags.DEFINE_list("k", ["1", "5", "20"], "Top-k cut-offs.", flag_values=FLAGS)


def per_domain(values: list[str], n: int, default: str, flag: str) -> list[str]:
    """One value per domain: empty means ``default`` for all; otherwise exactly ``n`` values."""
    if not values:
        return [default] * n
    if len(values) != n:
        raise ValueError(f"{flag} gives {len(values)} values for {n} domains: {values}")
    return list(values)


def domain_label(types, world: str, qpp: int) -> str:
    """The domain's directory/run name: its entity types, plus its world and questions per
    passage when they are not the defaults."""
    return (synthetic.domain_name(types) + ("" if world == "entity" else f"_{world}")
            + ("" if qpp == 1 else f"_q{qpp}"))


def run_study(out: str, *, domains: int = 3, steps: int = 100, passages: int = 1000,
              test_questions: int = 200, worlds: Sequence[str] = (), qpp: Sequence[int] = (),
              model: str = "minilm", batch: int = 16, lr: float = 5e-5,
              ks: Sequence[int] = (1, 5, 20), seed: int = 0, verbose: bool = True
              ) -> dict[str, Any]:
    """Steps 1-4 of the module docstring into ``out``; returns what ``summary.json`` holds.

    ``contrast_rows`` are the in-domain P − Q report rows (``stats.compare_outcomes``, names
    ``Q marginal`` / ``P marginal``), one per test domain and k, metric ``top-k: <domain>``.
    """
    out = os.path.abspath(out)
    say = print if verbose else (lambda *a, **k: None)
    ks = tuple(int(k) for k in ks)
    t0 = time.perf_counter()
    groups = synthetic.domain_types(domains)
    worlds = per_domain(list(worlds), len(groups), "entity", "--worlds")
    qpps = [int(q) for q in per_domain([str(q) for q in qpp], len(groups), "1", "--qpp")]
    names = [domain_label(g, w, q) for g, w, q in zip(groups, worlds, qpps)]
    data_root = os.path.join(out, "data")
    for g, name, w, q in zip(groups, names, worlds, qpps):
        # Refuses a directory generated with other settings (meta.json), reuses a matching one.
        synthetic.generate_or_check(os.path.join(data_root, name), passages, seed,
                                    entity_types=g, test_questions=test_questions,
                                    num_hard_negatives=1, world=w, questions_per_passage=q)
    t_data = time.perf_counter() - t0

    # A run per domain; this seed's runs live in this seed's out (harness.seed_out).
    study = harness.Study("marginalize", tuple(
        harness.StudyRun(name, lambda seed, name=name: domain_config(
            os.path.join(data_root, name), model=model, steps=steps, batch=batch, lr=lr,
            seed=seed)) for name in names))
    started = utc_now()
    trained = harness.train_study(study, out, [seed], reuse=False, train=train,
                                  workdir=lambda name, _: os.path.join(out, "runs", name))
    workdirs, train_s = [], {}
    for name in names:
        t = trained[name, seed]
        train_s[name] = round(t.seconds, 1)
        say(f"trained {name}: step {t.step}, train loss "
            f"{t.summary['train'].get('train/loss', float('nan')):.4f} ({train_s[name]} s)",
            flush=True)
        workdirs.append(t.workdir)

    # Every run is loaded once; each domain's corpus is exported once per passage encoder.
    t1 = time.perf_counter()
    tests = [mg.TestSet(os.path.join(data_root, n, synthetic.FILES["test_qa"]),
                        os.path.join(data_root, n, synthetic.FILES["corpus"]), in_domain=di,
                        out_dir=os.path.join(out, "marginalize", n), title=f"test domain: {n}")
             for di, n in enumerate(names)]
    reps = mg.marginalize_many(workdirs, tests, ks=ks)
    marg_s = round(time.perf_counter() - t1, 1)
    rows, contrast_rows = [], []
    for di, (name, rep) in enumerate(zip(names, reps)):
        say(f"\n=== test domain {name} ===")
        say(mg.summary_text(rep), flush=True)
        for k in ks:
            a = rep["attribution"][k]
            rows.append({"test_domain": name, "k": k, "tandem": float(a["tandem"][di]),
                         "Q_in_domain_%": float(a["q_rel_in_domain"][di]),
                         "P_in_domain_%": float(a["p_rel_in_domain"][di]),
                         "mean_off_diagonal": float(np.mean(
                             np.asarray(rep["matrix"][k])[~np.eye(len(names), dtype=bool)]))
                         if len(names) > 1 else float("nan")})
        contrast_rows += mg.encoder_contrast_rows(names, rep["first_hit_rank"], ks, only=di)
    contrast = [{"test_domain": name, **c} for di, (name, rep) in enumerate(zip(names, reps))
                for c in rep["encoder_contrast"] if c["metric"].endswith(f": {name}")]
    total = time.perf_counter() - t0
    say("\nIn-domain P − Q per test domain (paired bootstrap over its test questions):")
    for c in contrast:
        say(f"  {c['metric']}: P − Q = {100 * c['diff']:+.2f} [{100 * c['lo']:.2f}, "
            f"{100 * c['hi']:.2f}], p = {c['p_value']:.3g}")
    say("\nIn-domain marginalised accuracy in % of the in-domain tandem model (Fig. 2 style):")
    say(f"{'test domain':<28}{'k':>4}{'tandem':>9}{'Q (%)':>9}{'P (%)':>9}{'off-diag':>10}")
    for r in rows:
        say(f"{r['test_domain']:<28}{r['k']:>4}{r['tandem']:>9.1f}{r['Q_in_domain_%']:>9.1f}"
            f"{r['P_in_domain_%']:>9.1f}{r['mean_off_diagonal']:>10.1f}")
    say(f"\ntiming: data {t_data:.1f}s, training {train_s}, marginalisation {marg_s}s, "
        f"total {total:.1f}s; model={model}, steps={steps}, passages/domain={passages}")
    result = {"domains": names, "summary": rows, "contrast": contrast,
              "contrast_rows": contrast_rows, "train_s": train_s, "marginalize_s": marg_s,
              "total_s": total,
              "params": {"model": model, "steps": steps, "worlds": worlds, "qpp": qpps,
                         "passages": passages, "test_questions": test_questions,
                         "batch": batch, "lr": lr, "seed": seed},
              "reports": {n: mg.report_path(os.path.join(out, "marginalize", n)) for n in names},
              "stamp": harness.report_stamp(started, {n: t.workdir
                                                      for (n, _), t in trained.items()})}
    write_json(os.path.join(out, "summary.json"), result)
    return result


SUMMARY_METRICS = ("tandem", "Q_in_domain_%", "P_in_domain_%", "mean_off_diagonal")


def over_seeds(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean ± std [min, max] over the seeds' :func:`run_study` results: the summary figures per
    test domain and k (``seed_spread``) and the in-domain P − Q in points (``seed_diff``);
    ``markdown`` holds both tables."""
    seeds = [r["params"]["seed"] for r in results]
    rows = [{**row, "seed": r["params"]["seed"]} for r in results for row in r["summary"]]
    spread = stats.seed_table(rows, ("test_domain", "k"), SUMMARY_METRICS)
    diff = stats.seed_diff_table([row for r in results for row in r["contrast_rows"]])
    md = (f"## Mean ± std [min, max] over seeds {seeds}\n\n"
          "Top-k (%) of the in-domain tandem model, the in-domain question (Q) and passage (P) "
          "encoders' marginals in % of it, the mean off-diagonal cell (%); n/a where a seed's "
          "figure is not finite (a tandem of 0, or one domain).\n\n"
          + markdown_table(spread, ["test_domain", "k", "seeds", *SUMMARY_METRICS])
          + f"\n\n## In-domain P − Q over seeds {seeds}\n\n"
          "B − A = P marginal − Q marginal in points, each seed tested on its own (paired "
          "bootstrap over its test questions).\n\n"
          + markdown_table(diff, ["metric", "seeds", "B − A",
                                  f"significant at {stats.ALPHA:g}"]) + "\n")
    return {"seeds": seeds, "seed_spread": spread, "seed_diff": diff, "markdown": md}


def run_seeds(out: str, seeds: Sequence[int] = (0,), **kw: Any) -> dict[str, Any]:
    """:func:`run_study` once per seed, summarised by :func:`over_seeds`
    (``harness.study_over_seeds``: seed N > 0 in ``<out>_seedN``)."""
    return harness.study_over_seeds(run_study, over_seeds, out, seeds, **kw)


def main(argv) -> None:
    del argv
    seeds = _F.seed_list()
    res = run_seeds(_F.out.value, seeds, domains=_DOMAINS.value, steps=_F.steps.value,
                    passages=_PASSAGES.value, test_questions=_TEST.value, worlds=_WORLDS.value,
                    qpp=[int(q) for q in _QPP.value], model=_F.model.value, batch=_F.batch.value,
                    lr=_F.lr.value, ks=[int(k) for k in _KS.value])
    harness.print_over_seeds(_F.out.value, seeds, res)


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
