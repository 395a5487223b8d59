"""The papers' claims, each checked on the synthetic benchmark with paired statistics.

``python -m dense_cf.studies.replicate --out runs/replicate [--claims ID,...] [--steps 100]
[--seeds 0] [--list]``

Every claim of docs/replication.md is a :class:`Claim` in :data:`CLAIMS` (data, not code, in
``studies.registry`` with the runs and studies; re-exported here): the
paper, where it says so, what it says, the two runs compared (A = the reference, B = the
method) and the checks (a paired metric, named by its ``eval.outcomes`` metric id, and the
expected direction). Runs are
:class:`RunSpec` entries of :data:`RUNS`, each trained once under ``--out`` and shared by the
claims that use it; :func:`definition` makes them a ``harness.Study`` (a config per run and
seed) trained by the harness's seed × run loop (``harness.train_study``):

* ``synthetic`` runs: the ablation benchmark (``configs.studies.ablation_row_config``: MiniLM, 2,000
  passages, 300 test questions, batch 16, lr 5e-5) with robustness at K = 0, 1, 2, 5
  near-duplicate distractors, plus the spec's overrides;
* ``dcsr`` runs: ``configs.studies.dcsr_config`` on a synthetic world (one question per passage,
  or ``questions_per_passage`` = 3 for DCSR's "many questions" setting).

For each check the paired comparison (``dense_cf.analysis.compare``: exact McNemar on
top-k hits and AAR / AA outcomes, paired bootstrap on MRR and the mean gaps) gives B − A, its
interval and p; the verdicts follow :mod:`dense_cf.eval.claims` (Tango's score test and
interval, non-inferiority margins, "reproduced" as an intersection–union test and Holm within
a claim for "reversed", infeasible checks "uninformative", seeds pooled by a stratified test
with the seed-level t-test beside it; docs/replication.md "Method"). ``--vary_world`` draws
one world per seed (issue 50). The command writes
``replicate.md``, ``replicate.json`` and ``replicate.rows.json`` (each claim's table keyed by
metric id, for tools/rederive_claims.py) to ``--out``; finished runs are reused (resumable) and
``--claims`` runs only the runs those claims need. ``--list`` prints the claims, the runs each
needs and the estimated budget, and trains nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
from typing import Any, Sequence

import ml_collections
from absl import flags, logging

from dense_cf import app as _app
from dense_cf.analysis import compare as compare_lib
from dense_cf.configs.presets import with_method
from dense_cf.configs.studies import ablation_row_config, dcsr_config
from dense_cf.datasets import formats
from dense_cf.eval import outcomes, stats
from dense_cf.eval import report as report_lib
from dense_cf.eval.claims import claim_verdict, evaluate_checks, expand, pool_claim, verdict_text
from dense_cf.experiment import train_and_evaluate
from dense_cf.files import atomic_open, code_version, stamp_line, utc_now, write_json
from dense_cf.mining.evidence import annotate as evidence_lib
from dense_cf.mining.evidence.scorer import make_scorer
from dense_cf.progress import format_duration
from dense_cf.studies import data_stats as data_stats_lib
from dense_cf.studies import harness
from dense_cf.studies import marginalize as marginalize_lib
from dense_cf.studies.registry import (
    BUDGET_KEYS,
    CLAIM_IDS,
    CLAIMS,
    CLAIMS_BY_ID,
    DID_ID_PREFIX,
    DID_SPECS,
    RP_KINDS,
    RUNS,
    STUDIES,
    VARY_WORLD_ORDER,
    Claim,
    RunSpec,
    StudySpec,
    did_id,
)
from dense_cf.synthetic import generate as synthetic
from dense_cf.synthetic.distractors import HELDOUT_KINDS, namesake_negative_counts

# The registry's names are re-exported: callers know them as studies.replicate's.
__all__ = ["CLAIMS", "CLAIMS_BY_ID", "CLAIM_IDS", "DID_SPECS", "RP_KINDS", "RUNS", "STUDIES",
           "VARY_WORLD_ORDER", "Claim", "RunSpec", "StudySpec", "apply_override", "definition",
           "did_id", "plan", "plan_studies", "prepared_config", "run_replication", "train_runs"]

STUDY_RUNNERS = {"marginalize": marginalize_lib.run_study,
                 "data_stats": data_stats_lib.run_study}


AA = "aar.answer"  # the AA score's metric id (the untrained-checkpoint comparison)
# The untrained checkpoint's columns: each strategy's label, in percent.
UNTRAINED_COLS = {s: f"{outcomes.metric(f'aar.{s}').label} (%)" for s in ("sentence", "answer")}

def plan(claim_ids: Sequence[str]) -> list[str]:
    """The runs the claims need, in :data:`RUNS` order."""
    bad = [c for c in claim_ids if c not in CLAIM_IDS]
    if bad:
        raise ValueError(f"unknown claims {bad}; claims: {', '.join(CLAIM_IDS)}")
    need = {r for c in CLAIMS if c.id in claim_ids and not c.study for r in (c.a, c.b)}
    need |= {RUNS[r].eval_of for r in need if RUNS[r].eval_of}  # the model it evaluates
    return [r for r in RUNS if r in need]


def plan_studies(claim_ids: Sequence[str]) -> list[str]:
    """The studies the claims need, in :data:`STUDIES` order."""
    need = {c.study for c in CLAIMS if c.id in claim_ids and c.study}
    return [s for s in STUDIES if s in need]


def run_study(name: str, out: str, seed: int, *, steps: int, model: str = "minilm",
              batch: int = 16, lr: float = 5e-5, params: dict[str, Any] | None = None,
              **_: Any) -> tuple[dict[str, Any], float]:
    """Runs study ``name`` (resumable: finished runs and exports are reused); returns its
    summary and the minutes spent here. ``params`` override the study's own (tests)."""
    t0 = time.perf_counter()
    study = STUDIES[name]
    res = STUDY_RUNNERS[study.runner](harness.seed_out(os.path.join(out, name), seed),
                                      steps=steps, model=model, batch=batch, lr=lr, seed=seed,
                                      verbose=False, **{**dict(study.params), **(params or {})})
    return res, (time.perf_counter() - t0) / 60


def evaluate_study_claim(claim: Claim, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The verdicts of ``claim``'s checks on a study's report rows (names ``claim.a``/``b``;
    rows of the study's other claims, without those names, are left out)."""
    rows = [r for r in rows if claim.a in r and claim.b in r]
    entries = evaluate_checks(rows, expand(claim.checks, [r["id"] for r in rows if "id" in r]),
                              (claim.a, claim.b))
    verdict = claim_verdict([c["verdict"] for c in entries])
    return {"checks": entries, "verdict": verdict, "verdict_text": verdict_text(entries),
            "paired_markdown": report_lib.markdown_table(
                list(rows), ["metric", "n", claim.a, claim.b, "B − A", "test", "p"])}


def _world_dir(out: str, spec: RunSpec, world_seed: int = 0) -> str:
    """``out/data`` for the ablation's world (studies.ablation's layout), else one per world;
    a world seed other than 0 (``vary_world``) gets its own directory (``_w<seed>``)."""
    suffix = f"_w{world_seed}" if world_seed else ""
    if spec.study == "synthetic" and not spec.world:
        return os.path.join(out, "data" + suffix)
    name = "_".join(f"{k}{v}" for k, v in spec.world) or "default"
    return os.path.join(out, f"data_{spec.study}_{name}{suffix}")


# Robustness counts of a vary_world run: K = 3 adds the namesake (kinds alternate value swap,
# paraphrase, namesake), so each held-out kind's drop is one step of K (DID_SPECS).
_VARY_WORLD_COUNTS = (0, 1, 2, 3, 5)


def run_config(name: str, out: str, *, steps: int, seed: int, model: str = "minilm",
               num_passages: int = 2000, test_questions: int = 300, batch: int = 16,
               lr: float = 5e-5, vary_world: bool = False) -> ml_collections.ConfigDict:
    """The config of run ``name`` (:data:`RUNS`) with this report's budget. ``vary_world``
    (issue 50): the synthetic world's seed follows the training seed (``data.synthetic.seed``
    = ``seed``), so seeds vary the world draw as well as the training. An evaluation-only run
    (``RunSpec.eval_of``) has the config of the run it evaluates plus its own overrides."""
    spec = RUNS[name]
    if spec.eval_of:
        c = run_config(spec.eval_of, out, steps=steps, seed=seed, model=model,
                       num_passages=num_passages, test_questions=test_questions, batch=batch,
                       lr=lr, vary_world=vary_world)
        for key, value in spec.overrides:
            apply_override(c, key, value)
        return c
    data_dir = _world_dir(out, spec, seed if vary_world else 0)
    if spec.study == "synthetic":
        c = ablation_row_config(spec.row, data_dir, steps=steps, batch=batch, model=model,
                                lr=lr, seed=seed, num_passages=num_passages,
                                test_questions=test_questions)
        c.eval.robustness_counts = (0, 1, 2, 5)
    elif spec.study == "dcsr":
        c = dcsr_config(spec.row, data_dir, steps=steps, batch=batch, model=model, lr=lr)
        c.seed = seed
        c.data.synthetic.num_passages = num_passages
        c.data.synthetic.test_questions = test_questions
    else:
        raise ValueError(f"run {name}: unknown study {spec.study!r}")
    for key, value in spec.world:  # the config records the world it was trained in
        if key in c.data.synthetic:
            c.data.synthetic[key] = value
    if spec.method:
        with_method(c, spec.method)
    if spec.evidence:
        c.data.counterfactual = "evidence"
        c.data.evidence_file = _evidence_path(data_dir, spec.evidence)
    if vary_world:
        c.data.synthetic.seed = seed
        if spec.study == "synthetic":
            c.eval.robustness_counts = _VARY_WORLD_COUNTS
    for key, value in spec.overrides:
        apply_override(c, key, value)
    return c


def apply_override(config: ml_collections.ConfigDict, key: str, value: Any) -> None:
    """Sets ``config``'s field ``key`` (a dotted path of any depth, e.g. ``eval.jax.dtype``)
    to ``value``; a path that names no field fails, naming it."""
    *path, leaf = key.split(".")
    node = config
    for i, part in enumerate(path):
        if part not in node or not isinstance(node[part], ml_collections.ConfigDict):
            raise KeyError(f"override {key}: the config has no section {'.'.join(path[:i + 1])}")
        node = node[part]
    if leaf not in node:
        raise KeyError(f"override {key}: the config has no field {key}")
    node[leaf] = value


def _prepare_world(spec: RunSpec, cfg: ml_collections.ConfigDict) -> None:
    """Generates the run's synthetic world once (shared by the runs of the same world)."""
    syn = cfg.data.synthetic
    synthetic.generate_or_check(cfg.data.data_dir, int(syn.num_passages), int(syn.seed),
                                test_questions=int(syn.test_questions),
                                **{k: v for k, v in spec.world if k not in BUDGET_KEYS})


def _evidence_path(data_dir: str, scorer: str) -> str:
    return os.path.join(data_dir, f"evidence-{scorer.replace(':', '_').replace('/', '_')}"
                                  "-train.jsonl")


def _prepare_evidence(spec: RunSpec, cfg: ml_collections.ConfigDict) -> None:
    """Pseudo-evidence for the run's training file (EADPR §3.1; resumable: a finished file is
    read back and nothing is scored again)."""
    if not spec.evidence:
        return
    train = os.path.join(cfg.data.data_dir, cfg.data.train_file)
    stats_ = evidence_lib.annotate(train, cfg.data.evidence_file, make_scorer(spec.evidence),
                                   answer_mode=cfg.data.answer_mode)
    logging.info("replicate: pseudo-evidence (%s) for %s: %s", spec.evidence, train, stats_)


def _required(cfg: ml_collections.ConfigDict) -> tuple[str, ...]:
    """The evaluators whose reports make a run finished: retrieval, and AAR where the world
    has gold triplets (their report files are the ones runs trained before the move onto the
    harness were checked for, so those directories stay finished)."""
    return ("retrieval",) + (("aar",) if cfg.data.gold_file else ())


def prepared_config(name: str, out: str, seed: int, budget: dict[str, Any]
                    ) -> ml_collections.ConfigDict:
    """Run ``name``'s config at ``seed`` (:func:`run_config`), after generating its synthetic
    world and pseudo-evidence (each once; reused when there), so the run can train."""
    cfg = run_config(name, out, seed=seed, **budget)
    spec = RUNS[RUNS[name].eval_of or name]  # an evaluation-only run: its model's world
    _prepare_world(spec, cfg)
    _prepare_evidence(spec, cfg)
    return cfg


def definition(claim_ids: Sequence[str], out: str, **budget: Any) -> harness.Study:
    """The runs the claims need as a harness study: each run a config per seed
    (:func:`prepared_config`) in ``harness.run_dir(out, name, seed)``, the claims' ``(A, B)``
    its pairs."""
    runs = plan(claim_ids)
    study_runs = tuple(harness.StudyRun(
        name, functools.partial(prepared_config, name, out, budget=budget),
        required=_required(run_config(name, out, seed=0, **budget)),
        trained_by=RUNS[name].eval_of) for name in runs)
    pairs = tuple(dict.fromkeys((c.a, c.b) for c in CLAIMS if c.id in claim_ids and not c.study))
    return harness.Study("replicate", study_runs, pairs)


def train_runs(out: str, claim_ids: Sequence[str], seeds: Sequence[int], *,
               train: harness.Trainer = train_and_evaluate, **budget: Any
               ) -> tuple[dict[tuple[str, int], tuple[str, int]], dict[str, float | str],
                          dict[str, dict[str, Any]]]:
    """Trains (or reuses) every run the claims need at every seed with the harness's seed ×
    run loop (``harness.train_study``): ``({(run, seed): (workdir, step)}, minutes per
    "run (seed N)" — "reused" for a run an earlier invocation finished —, run times)``."""
    trained = harness.train_study(definition(claim_ids, out, **budget), out, seeds, train=train)
    done, minutes, times = {}, {}, {}
    for (name, seed), t in trained.items():
        done[name, seed] = (t.workdir, t.step)
        times[f"{name} (seed {seed})"] = harness.run_times(t.workdir)
        # Not read off the time: a tiny run trains in seconds.
        minutes[f"{name} (seed {seed})"] = round(t.seconds / 60, 2) if t.trained else "reused"
    return done, minutes, times


def _baseline_key(cfg: ml_collections.ConfigDict) -> tuple[str, str, bool]:
    return (os.path.basename(cfg.data.data_dir), str(cfg.model.pooling),
            bool(cfg.model.get("normalize", False)))


def untrained_baselines(runs: Sequence[str], out: str, seeds: Sequence[int] = (0,),
                        **budget: Any) -> list[dict[str, Any]]:
    """AAR and AA score of the untrained checkpoint, once per (world, pooling) of the
    ``synthetic`` runs that measure AAR, on their test triplets (issue 32: a trained row below
    the untrained model's own score shows that training degraded it); with ``vary_world``,
    once per world seed too. A random ``tiny`` model has no untrained checkpoint: its rows say
    so."""
    seen: dict[tuple[str, str, bool], dict[str, Any]] = {}
    worlds = list(seeds) if budget.get("vary_world") else [0]
    for seed, name in ((s, n) for s in worlds for n in runs):
        if RUNS[name].study != "synthetic":
            continue
        cfg = run_config(name, out, seed=seed, **budget)
        key = _baseline_key(cfg)
        if not cfg.data.gold_file:  # no AAR triplets in this run's world
            continue
        if key in seen:
            seen[key]["runs"] += f", {name}"
            continue
        row = {"world": key[0], "pooling": key[1] + (" + normalize" if key[2] else ""),
               "runs": name, **dict.fromkeys(UNTRAINED_COLS.values())}
        if cfg.model.name_or_path == "tiny":
            row["note"] = "random model: no untrained checkpoint"
        else:
            _prepare_world(RUNS[name], cfg)
            rep = harness.untrained_aar(cfg, os.path.join(out, "untrained", key[0]))
            for strategy, label in UNTRAINED_COLS.items():
                aar = rep["strategies"].get(strategy, {}).get("aar")
                row[label] = None if aar is None else round(100 * aar, 2)
            row["note"] = f"{cfg.model.name_or_path}, step 0"
        seen[key] = row
    return list(seen.values())


def world_namesake_negatives(cfg: ml_collections.ConfigDict) -> dict[str, Any]:
    """The share of namesake passages among the hard negatives of ``cfg``'s training file, read
    with its world's corpus (``distractors.namesake_negative_counts``)."""
    d = cfg.data.data_dir
    train = formats.read_biencoder(os.path.join(d, cfg.data.train_file), skip_bad=False)
    titles = [t for _, _, t in formats.read_corpus_tsv(os.path.join(d, cfg.data.corpus_file),
                                                       skip_bad=False)]
    return namesake_negative_counts(
        ((ex.positive_ctxs[0].title, [h.title for h in ex.hard_negative_ctxs]) for ex in train),
        titles)


def namesake_negatives(runs: Sequence[str], out: str, seeds: Sequence[int] = (0,),
                       **budget: Any) -> list[dict[str, Any]]:
    """Issue 50 item 1: per world of the ``synthetic`` runs (with ``vary_world``, per world
    seed too), how many of the training hard negatives are namesake passages
    (:func:`world_namesake_negatives`), the passages the held-out ``namesake`` kind imitates;
    where there are some, that kind is not fully held out. Runs that train on in-batch
    negatives only (``data.num_hard`` = 0) get a row of their own whose ``in training`` is
    False. Generates a world that is not there yet. Rows: ``{world, world seed, hard negatives,
    in training, runs, counts}``."""
    seen: dict[tuple[str, bool], dict[str, Any]] = {}
    worlds = list(seeds) if budget.get("vary_world") else [0]
    for seed, name in ((s, n) for s in worlds for n in runs):
        if RUNS[name].study != "synthetic":
            continue
        cfg = run_config(name, out, seed=seed, **budget)
        key = (cfg.data.data_dir, int(cfg.data.num_hard) > 0)
        if key in seen:
            seen[key]["runs"] += f", {name}"
            continue
        _prepare_world(RUNS[name], cfg)
        seen[key] = {"world": os.path.basename(key[0]),
                     "world seed": int(cfg.data.synthetic.seed),
                     "hard negatives": str(cfg.data.synthetic.hard_negatives),
                     "in training": key[1], "runs": name, **world_namesake_negatives(cfg)}
    return list(seen.values())


def namesake_cell(row: dict[str, Any] | None) -> str:
    """A world's namesake share as the report prints it next to the ``namesake`` kind."""
    if row is None:
        return "not measured"
    if not row.get("in training", True):
        return f"none: in-batch negatives only ({row['world']})"
    if not row["hard_negatives"]:
        return f"no hard negatives in training ({row['world']})"
    return (f"{100 * row['namesake_share']:.1f} % of the training hard negatives are namesake "
            f"passages ({row['namesake']} of {row['hard_negatives']}, {row['world']})"
            + (": not fully held out" if row["namesake"] else ": held out"))


def did_kind_rows(claims: Sequence[dict[str, Any]],
                  namesake_by: dict[tuple[str, int], dict[str, Any]]) -> list[dict[str, Any]]:
    """The held-out drop per distractor kind: one row per claim, seed (and ``pooled``) and
    one-step held-out check (``outcomes.did_kind``); the ``namesake`` kind's row carries the
    share of namesake passages among the training negatives of the claim's world at that seed
    (``namesake_by``: ``{(claim id, seed): namesake_negatives row}``)."""
    rows = []
    for c in claims:
        seeds = list(c["per_seed"])
        blocks = [(str(seed), e["checks"], [seed]) for seed, e in c["per_seed"].items()]
        if c.get("pooled"):
            blocks.append(("pooled", c["pooled"]["checks"], seeds))
        for label, checks, its_seeds in blocks:
            for e in checks:
                kind = outcomes.did_kind(e.get("id", ""))
                if kind is None:
                    continue
                share = "—"
                if kind == NAMESAKE_KIND:
                    share = "; ".join(
                        (f"seed {s}: " if len(its_seeds) > 1 else "")
                        + namesake_cell(namesake_by.get((c["id"], s))) for s in its_seeds)
                rows.append({"claim": c["id"], "seed": label, "kind": kind,
                             "check": e["metric"], "expect": e.get("expect", ""),
                             "B − A": (f"{e['diff_shown']:+.2f}" if "diff_shown" in e else "—"),
                             "95% CI": e.get("95% CI", "—"), "p at δ0": e.get("p at δ0", "—"),
                             "verdict": e["verdict"], "training negatives of this kind": share})
    return rows


# The held-out kind whose passages the training negatives can contain (namesake_negatives).
NAMESAKE_KIND = "namesake"
NAMESAKE_COLUMNS = ["world", "world seed", "hard negatives", "in training", "runs", "examples",
                    "hard_negatives", "namesake", "namesake share (%)", "same_entity", "other",
                    "examples_with_namesake_negative", "positives_with_world_namesake"]
DID_KIND_COLUMNS = ["claim", "seed", "kind", "check", "expect", "B − A", "95% CI", "p at δ0",
                    "verdict", "training negatives of this kind"]


def evaluate_claim(claim: Claim, a: tuple[str, int], b: tuple[str, int], *,
                   n_resamples: int = stats.DEFAULT_RESAMPLES) -> dict[str, Any]:
    """The paired rows of ``claim``'s checks between runs ``a`` and ``b`` ((workdir, step)) and
    the verdicts. ``AAR by type`` expands to one check per question type (PiCL Table 6)."""
    names = (claim.a, claim.b)
    oa, ob = compare_lib.load_outcomes(a[0], a[1]), compare_lib.load_outcomes(b[0], b[1])
    res = compare_lib.compare_outcome_sets(oa, ob, names=names, n_resamples=n_resamples)
    rows, checks = list(res["rows"]), []
    for check in claim.checks:
        prefix = outcomes.family_prefix(check.metric)
        if prefix is not None and prefix.startswith("aar."):  # aar.<strategy>.by_type
            typed = compare_lib.aar_by_type_rows(oa, ob, prefix.split(".")[1],
                                                 n_resamples=n_resamples, names=names)
            rows += typed
            checks += expand([check], [r["id"] for r in typed])
        else:
            checks.append(check)
    if any(c.metric.startswith(DID_ID_PREFIX) for c in checks):
        # The registered drops and any other step a check names (e.g. K 3→4 of a 4-kind run).
        wanted = [outcomes.did_spec(c.metric) for c in checks]
        rows += did_rows(oa, ob, names, n_resamples=n_resamples, specs=[
            *DID_SPECS, *((w[0], w[2], w[3]) for w in wanted if w is not None)])
    entries = evaluate_checks(rows, checks, names)
    verdict = claim_verdict([c["verdict"] for c in entries])
    return {"checks": entries, "verdict": verdict, "verdict_text": verdict_text(entries),
            "paired_markdown": compare_lib.markdown(res)}


def did_rows(oa: Any, ob: Any, names: tuple[str, str], *, ks: Sequence[int] = (1, 5),
             specs: Sequence[tuple[str, int, int]] = DID_SPECS,
             n_resamples: int = stats.DEFAULT_RESAMPLES) -> list[dict[str, Any]]:
    """One report row per ``specs`` entry (family, K from, K to; default :data:`DID_SPECS`)
    and k that both runs' robustness outcomes hold on the same questions (``stats.did_test``):
    each run's drop hit@k(K_to) − hit@k(K_from) in points, B − A with its bootstrap interval,
    the exact sign-flip p. K = 0 of the held-out family is the clean retrieval, read from the
    p* family (the same run, no distractor). A held-out row's id and label follow the kinds the
    runs recorded (``outcomes.did_metric``); runs with different kind selections give no
    held-out row (logged), as their distractors differ."""
    if not (oa.robustness and ob.robustness):
        return []
    out = []
    for family, k0, k1 in dict.fromkeys(specs):
        fam = [r if family == "pstar" else r.get("heldout") for r in (oa.robustness, ob.robustness)]
        if not all(fam) or fam[0]["questions"] != fam[1]["questions"]:
            continue
        kinds = [tuple(f.get("kinds") or HELDOUT_KINDS) for f in fam]
        if family == "heldout" and kinds[0] != kinds[1]:
            logging.warning("replicate: no held-out drop rows for %s vs %s: their held-out kinds "
                            "differ (%s vs %s)", *names, *kinds)
            continue
        clean = [r if k0 == 0 else f for r, f in zip((oa.robustness, ob.robustness), fam)]
        if not all(k0 in c["first_hit_rank"] and k1 in f["first_hit_rank"]
                   for c, f in zip(clean, fam)) \
                or clean[0]["questions"] != fam[0]["questions"]:
            continue
        for k in ks:
            def hits(ranks: Sequence[int | None]) -> list[bool]:
                return [r is not None and r <= k for r in ranks]
            a0, b0 = (hits(c["first_hit_rank"][k0]) for c in clean)
            a1, b1 = (hits(f["first_hit_rank"][k1]) for f in fam)
            t = stats.did_test([a0], [a1], [b0], [b1], n_resamples=n_resamples)
            drop_a = 100 * (sum(a1) - sum(a0)) / len(a0)
            drop_b = 100 * (sum(b1) - sum(b0)) / len(b0)
            m = outcomes.did_metric(family, k0, k1, k, kinds[0] if family == "heldout" else None)
            out.append({"metric": m.label, "id": m.id, "n": t["n"],
                        names[0]: f"{drop_a:+.2f}", names[1]: f"{drop_b:+.2f}",
                        "B − A": f"{100 * t['diff']:+.2f} [{100 * t['lo']:+.2f}, "
                                 f"{100 * t['hi']:+.2f}]",
                        # the counts of d = −2..+2: what pools the seeds exactly, from the
                        # stored row too (claims.rejudge)
                        "test": f"difference-in-differences, exact sign-flip "
                                f"({t['n1']} items ±1, {t['n2']} ±2; d = −2..+2: "
                                f"{', '.join(map(str, t['hist']))})",
                        "p": f"{t['p_value']:.3g}", "scale": 100.0,
                        "stats": {"kind": "did", **t}})
    return out


def _study_overrides(study_params: dict[str, Any] | None, name: str) -> dict[str, Any]:
    if not study_params:
        return {}
    if any(k in STUDIES for k in study_params):
        return dict(study_params.get(name, {}))
    return dict(study_params)


def run_replication(out: str, claim_ids: Sequence[str] = CLAIM_IDS, *, steps: int = 100,
                    seeds: Sequence[int] = (0,), n_resamples: int = stats.DEFAULT_RESAMPLES,
                    study_params: dict[str, Any] | None = None, **budget: Any
                    ) -> dict[str, Any]:
    """Trains what the claims need, evaluates every claim per seed, writes
    ``out/replicate.{md,json}`` and returns what the JSON holds. ``study_params`` override
    the studies' own parameters (tests): ``{study name: {...}}``, or one flat dict for all."""
    runs = plan(claim_ids)
    os.makedirs(out, exist_ok=True)
    t_start, started = time.perf_counter(), utc_now()
    logging.info("replicate: %d runs × %d seeds, estimated ≈ %s on the 2-core CPU", len(runs),
                 len(seeds), format_duration(60 * len(seeds) * steps / 100
                                             * sum(RUNS[r].minutes for r in runs)))
    done, minutes, times = train_runs(out, claim_ids, seeds, steps=steps, **budget)
    studies: dict[tuple[str, int], dict[str, Any]] = {}
    for seed in seeds:
        for name in plan_studies(claim_ids):
            logging.info("replicate: study %s (seed %d); elapsed %s", name, seed,
                         format_duration(time.perf_counter() - t_start))
            studies[name, seed], spent = run_study(
                name, out, seed, steps=steps, params=_study_overrides(study_params, name),
                **budget)
            minutes[f"{name} (seed {seed})"] = round(spent, 2)
    claims = []
    for claim in CLAIMS:
        if claim.id not in claim_ids:
            continue
        if claim.study:
            per_seed = {seed: evaluate_study_claim(claim, studies[claim.study, seed]["contrast_rows"])
                        for seed in seeds}
        else:
            per_seed = {seed: evaluate_claim(claim, done[claim.a, seed], done[claim.b, seed],
                                             n_resamples=n_resamples) for seed in seeds}
        # Several seeds: one pooled test per check (claims.pool_claim), not a vote over seeds.
        pooled = pool_claim([v["checks"] for v in per_seed.values()]) if len(seeds) > 1 else None
        claims.append({**dataclasses.asdict(claim), "per_seed": per_seed, "pooled": pooled,
                       "verdict": (pooled or per_seed[seeds[0]])["verdict"]})
    baselines = untrained_baselines(runs, out, seeds, steps=steps, **budget)
    setup = {"steps": steps, "seeds": list(seeds), "n_resamples": n_resamples, **budget,
             "runs": {r: dataclasses.asdict(RUNS[r]) for r in runs},
             "studies": {n: dataclasses.asdict(STUDIES[n]) for n in plan_studies(claim_ids)},
             "minutes_per_run": minutes, "run_times": times,
             "minutes": round((time.perf_counter() - t_start) / 60, 2),
             "out": os.path.abspath(out),
             "stamp": {**code_version(), "started": started, "finished": utc_now()}}
    # A study's own table (e.g. data-stats: statistics and marginals per fraction).
    tables = {f"{name} (seed {seed})": res["table_markdown"]
              for (name, seed), res in studies.items() if res.get("table_markdown")}
    result = {"setup": setup, "claims": claims, "study_tables": tables,
              "over_seeds": seed_summary(claims), "untrained": baselines}
    untrained_aa: dict[tuple[str, int], float | None] = {}
    for c in claims:
        if c.get("study") or not any(k.metric == AA for k in CLAIMS_BY_ID[c["id"]].checks):
            continue
        for seed in c["per_seed"]:
            world, pooling, norm = _baseline_key(run_config(c["a"], out, seed=seed, steps=steps,
                                                            **budget))
            untrained_aa[c["id"], seed] = next(
                (b[UNTRAINED_COLS["answer"]] for b in baselines if b["world"] == world
                 and b["pooling"] == pooling + (" + normalize" if norm else "")), None)
    result["aa_vs_untrained"] = aa_against_untrained(claims, untrained_aa)
    # The namesake kind's share of the training negatives, per world (issue 50 item 1).
    result["namesake_negatives"] = namesake_negatives(runs, out, seeds, steps=steps, **budget)
    by_world = {(r["world"], r["in training"]): r for r in result["namesake_negatives"]}
    namesake_by = {}
    for c in claims:
        for seed in ([] if c.get("study") else c["per_seed"]):
            cfg = run_config(c["a"], out, seed=seed, steps=steps, **budget)
            namesake_by[c["id"], seed] = by_world.get(
                (os.path.basename(cfg.data.data_dir), int(cfg.data.num_hard) > 0))
    result["did_kinds"] = did_kind_rows(claims, namesake_by)
    result["markdown"] = markdown(result)
    with atomic_open(os.path.join(out, "replicate.md")) as f:
        f.write(result["markdown"])
    write_json(os.path.join(out, "replicate.json"), result)
    # Each claim's table keyed by metric id: what tools/rederive_claims.py reads.
    report_lib.write_rows(os.path.join(out, "replicate.md"), [
        {"claim": c["id"], "seed": seed, "rows": report_lib.keyed_rows(e["checks"], CHECK_COLUMNS)}
        for c in claims for seed, e in c["per_seed"].items()])
    return result


def aa_against_untrained(claims: Sequence[dict[str, Any]],
                         untrained_aa: dict[tuple[str, int], float | None]
                         ) -> list[dict[str, Any]]:
    """Issue 50 item 1: where the reference run A ends below the untrained checkpoint on the
    AA score, B's AA relative to the untrained model (not only to A), per claim and seed:
    rows ``{claim, seed, untrained, A, B, "B − untrained", "A − untrained"}`` in points.
    ``untrained_aa``: the untrained AA (%) of the claim's world and pooling at that seed."""
    rows = []
    for c in claims:
        for seed, e in c["per_seed"].items():
            u = untrained_aa.get((c["id"], seed))
            aa = next((k for k in e["checks"] if k.get("id") == AA and "A" in k), None)
            if u is None or aa is None:
                continue
            a, b = (float(str(aa[x]).split()[0]) for x in ("A", "B"))
            if a < u:
                rows.append({"claim": c["id"], "seed": seed, "untrained": u, "A": a, "B": b,
                             "B − untrained": round(b - u, 2), "A − untrained": round(a - u, 2)})
    return rows


def seed_summary(claims: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per claim and check over its seeds (claims with two or more): B − A as ``mean ± std
    [min, max]`` (``stats.seed_spread``; points for rates, raw for gaps) and how many seeds
    gave each verdict. Empty when every claim has one seed."""
    rows = []
    for c in claims:
        if len(c["per_seed"]) < 2:
            continue
        by_metric: dict[str, list[dict[str, Any]]] = {}
        for e in c["per_seed"].values():
            for chk in e["checks"]:
                by_metric.setdefault(chk["metric"], []).append(chk)
        for metric, checks in by_metric.items():
            # In the units of the "B − A" column: points for rates, x100 for MRR, raw gaps.
            shown = [chk.get("diff_shown", chk.get("diff")) for chk in checks if "diff" in chk]
            # A seed whose B − A is undefined (a Spearman ρ over a constant series) is counted,
            # not spread over: the spread is of the seeds that have a number.
            diffs = [d for d in shown if d is not None and math.isfinite(float(d))]
            undefined = len(shown) - len(diffs)
            sp = stats.seed_spread(diffs) if diffs else None
            counts = {v: sum(chk["verdict"] == v for chk in checks)
                      for v in dict.fromkeys(chk["verdict"] for chk in checks)}
            rows.append({"claim": c["id"], "metric": metric, "expect": checks[0]["expect"],
                         "seeds": len(checks),
                         "B − A over seeds": (f"{sp['mean']:+.2f} ± {sp['std']:.2f} "
                                              f"[{sp['min']:+.2f}, {sp['max']:+.2f}]"
                                              if sp else "—")
                                             + (f" ({undefined} of {len(shown)} undefined)"
                                                if undefined else ""),
                         "verdicts": ", ".join(f"{v} {n}/{len(checks)}"
                                               for v, n in counts.items()),
                         "spread": sp, "undefined": undefined})
    return rows


def _summary_cell(checks: Sequence[dict[str, Any]]) -> str:
    cells = []
    for c in checks:
        if "diff_shown" not in c:
            cells.append(f"{c['metric']}: {c['verdict']}")
            continue
        # The p of the test that decides at the check's null, and its Holm-adjusted value.
        cells.append(f"{c['metric']} {c['diff_shown']:+.2f} {c.get('95% CI', '')} "
                     f"(p={c.get('p at δ0', '—')}, Holm {c.get('p (Holm)', '—')})")
    return "; ".join(cells)


# A claim's table (replicate.md and its rows sibling).
CHECK_COLUMNS = ["metric", "expect", "margin", "A", "B", "B − A", "95% CI", "test", "p", "p at δ0",
                 "p (Holm)", "verdict"]


def markdown(result: dict[str, Any]) -> str:
    """The claims table (one row per claim and seed) and each claim's paired table."""
    s = result["setup"]
    rows = []
    for c in result["claims"]:
        for seed, e in c["per_seed"].items():
            rows.append({"claim": c["id"], "status": c.get("status", ""),
                         "paper": f"{c['paper']} {c['where']}",
                         "what the paper says": c["claim"], "A vs B": f"{c['a']} vs {c['b']}",
                         "seed": seed, "B − A (95% CI, p)": _summary_cell(e["checks"]),
                         "verdict": e["verdict_text"]})
        if c.get("pooled"):
            rows.append({**rows[-1], "seed": "pooled",
                         "B − A (95% CI, p)": _summary_cell(c["pooled"]["checks"]),
                         "verdict": c["pooled"]["verdict_text"]})
            rows.append({**rows[-1], "seed": "seed-level",
                         "B − A (95% CI, p)": c["pooled"].get("seed_cell", "—"),
                         "verdict": c["pooled"].get("seed_verdict", "—")})
            rows.append({**rows[-1], "seed": "mixed model",
                         "B − A (95% CI, p)": c["pooled"].get("mixed_cell", "—"),
                         "verdict": c["pooled"].get("mixed_verdict") or "—"})
    parts = [
        "# Replication: the papers' claims on the synthetic benchmark",
        f"{s['steps']} steps per run, seeds {s['seeds']}, {s['n_resamples']} bootstrap "
        f"resamples; {s['minutes']} min; runs in `{s['out']}`."
        + (f" {stamp_line(s['stamp'])}" if s.get("stamp") else ""),
        report_lib.markdown_table(rows, list(rows[0]) if rows else ["claim"]),
        "Verdicts (docs/replication.md, Method; alpha 0.05): **reproduced** = every check "
        "significant on the claimed side of its null (0, or −margin for 'not worse'), "
        "unadjusted (an intersection–union test); **reversed** = a check significant on the "
        "other side after Holm within the claim; **no difference detected** = an up/down "
        "check that is neither; **not reproduced** = a 'not worse' check whose interval "
        "reaches −margin; **uninformative** = a rate check whose reference run A is at or "
        "above 97 % (or at or below 3 %). p is the test that decides: Tango's score test for "
        "rates (its inversion is the 95 % interval), the paired bootstrap for MRR ×100 and "
        "score gaps. 'pooled' rows test all seeds at once (CMH over seed strata for rates, "
        "inverse-variance pooling for means, the mean Spearman ρ by a stratified permutation "
        "test): conditional on the trained models and the world. 'seed-level' rows: the "
        "t-test of the per-seed differences (df = seeds − 1) and their signs. 'mixed model' "
        "rows: a logistic model of the binary checks with item, seed and seed × method "
        "random effects (eval.glmm, maximum likelihood): β is B's log-odds ratio over A with "
        "its Wald interval and p at 0; 'not worse' checks and non-binary rows are not fitted, "
        "and then the row has no claim word. A claim whose pooled word differs from the "
        "seed-level or the mixed model's word is *fragile*.",
        "## Runs\n\n" + report_lib.markdown_table(
            [{"run": r, "study": v["study"], "row": v["row"], "method preset": v["method"] or "—",
              "overrides": ", ".join(f"{k}={x}" for k, x in v["overrides"]) or "—",
              "world": ", ".join(f"{k}={x}" for k, x in v["world"]) or "default",
              "minutes": ", ".join(f"{m}" for k, m in s["minutes_per_run"].items()
                                   if k.startswith(r + " ")),
              "trained (UTC, per seed)": "; ".join(
                  harness.format_run_times(t)
                  for k, t in s.get("run_times", {}).items() if k.startswith(r + " ")) or "—",
              "note": v["note"]} for r, v in s["runs"].items()],
            ["run", "study", "row", "method preset", "overrides", "world", "minutes",
             "trained (UTC, per seed)", "note"]),
    ]
    if result.get("untrained"):
        parts.append("## The untrained checkpoint\n\nAAR and AA score of the checkpoint the runs "
                     "start from, before any training, with the same pooling on the same test "
                     "triplets: a trained run below it was degraded by training.\n\n"
                     + report_lib.markdown_table(result["untrained"], [
                         "world", "pooling", "runs", *UNTRAINED_COLS.values(), "note"]))
    if result.get("aa_vs_untrained"):
        parts.append("## AA score against the untrained checkpoint\n\nWhere DPR (A) ends below "
                     "the untrained checkpoint, part of B − A is B undoing a degradation that A's "
                     "training caused: B's AA relative to the untrained model (points).\n\n"
                     + report_lib.markdown_table(result["aa_vs_untrained"], [
                         "claim", "seed", "untrained", "A", "B", "A − untrained",
                         "B − untrained"]))
    if result.get("did_kinds"):
        parts.append("## Held-out drop per distractor kind\n\nEach held-out kind is one step "
                     "of K (the kinds alternate in the order the runs recorded): B − A of the "
                     "drop hit@k(K+1) − hit@k(K), points (> 0: B loses less). A value swap "
                     "cannot be told from p+ (a tie control). Where training negatives are "
                     "namesake passages, the namesake kind is not fully held out: the share is "
                     "printed beside it, for the claim's world at that seed.\n\n"
                     + report_lib.markdown_table(result["did_kinds"], DID_KIND_COLUMNS))
    if result.get("namesake_negatives"):
        parts.append("## Namesake passages among the training negatives\n\nPer world of the "
                     "runs: the training file's hard negatives that are passages of a "
                     "same-named other entity (`distractors.namesake_negative_counts`), the "
                     "passages the held-out namesake kind imitates.\n\n"
                     + report_lib.markdown_table(
                         [{**r, "namesake share (%)": (None if r["namesake_share"] is None
                                                       else round(100 * r["namesake_share"], 2))}
                          for r in result["namesake_negatives"]], NAMESAKE_COLUMNS))
    if result.get("over_seeds"):
        parts.append("## Over seeds\n\nB − A per check over the training seeds: mean ± sample "
                     "std [min, max] (points for rates, raw for score gaps), and the verdicts "
                     "the seeds gave (each seed tested on its own, as in the table above).\n\n"
                     + report_lib.markdown_table(
                         result["over_seeds"], ["claim", "metric", "expect", "seeds",
                                                "B − A over seeds", "verdicts"]))
    if s.get("studies"):
        parts.append("## Studies\n\n" + report_lib.markdown_table(
            [{"study": n, "parameters": ", ".join(f"{k}={x}" for k, x in v["params"]),
              "minutes": ", ".join(f"{m}" for k, m in s["minutes_per_run"].items()
                                   if k.startswith(n + " ")),
              "note": v["note"]} for n, v in s["studies"].items()],
            ["study", "parameters", "minutes", "note"]))
    for title, table in result.get("study_tables", {}).items():
        parts.append(f"## Study {title}\n\n{table.strip()}")
    for c in result["claims"]:
        for seed, e in c["per_seed"].items():
            parts.append(f"## {c['id']} (seed {seed}): {c['claim']}\n\n"
                         + (f"{c['note']}\n\n" if c["note"] else "")
                         + report_lib.markdown_table(e["checks"], CHECK_COLUMNS))
    return "\n\n".join(parts) + "\n"


def list_text(claim_ids: Sequence[str], steps: int, seeds: Sequence[int]) -> str:
    """``--list``: the claims, their runs and the estimated budget."""
    lines = [f"{c.id:<22} {c.paper} {c.where}: {c.claim}  [{c.a} vs {c.b}]"
             for c in CLAIMS if c.id in claim_ids]
    runs, studies = plan(claim_ids), plan_studies(claim_ids)
    total = (sum(RUNS[r].minutes for r in runs) + sum(STUDIES[s].minutes for s in studies)
             ) * steps / 100 * len(seeds)
    lines.append(f"\nruns ({len(runs)} × {len(seeds)} seeds): {', '.join(runs)}")
    if studies:
        lines.append(f"studies ({len(studies)} × {len(seeds)} seeds): {', '.join(studies)}")
    lines.append(f"estimated budget on the 2-core CPU: ≈ {total:.0f} min at {steps} steps "
                 f"(finished runs are reused)")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> None:
    del argv
    f = FLAGS
    ids = list(f.claims or CLAIM_IDS)
    seeds = harness.parse_seeds(f.seeds)
    if f.list:
        print(list_text(ids, f.steps, seeds))
        return
    result = run_replication(f.out, ids, steps=f.steps, seeds=seeds, n_resamples=f.n_resamples,
                             model=f.model, num_passages=f.num_passages,
                             test_questions=f.test_questions, batch=f.batch, lr=f.lr,
                             vary_world=f.vary_world)
    print(result["markdown"])
    print(f"written: {os.path.join(f.out, 'replicate.md')}, {os.path.join(f.out, 'replicate.json')}")


FLAGS = flags.FlagValues()  # its own: tests import several studies in one process
harness.define_study_flags(FLAGS, out="runs/replicate", steps=100,
                           help={"out": "Directory for data, runs and the report.",
                                 "seeds": "Training seeds; verdicts per seed."})
flags.DEFINE_list("claims", None, f"Claims to check (default all): {', '.join(CLAIM_IDS)}.", flag_values=FLAGS)
flags.DEFINE_bool("list", False, "Print the claims, runs and budget; train nothing.", flag_values=FLAGS)
flags.DEFINE_integer("num_passages", 2000, "Synthetic corpus size.", flag_values=FLAGS)
flags.DEFINE_integer("test_questions", 300, "Synthetic test questions.", flag_values=FLAGS)
flags.DEFINE_integer("n_resamples", stats.DEFAULT_RESAMPLES, "Bootstrap resamples.", flag_values=FLAGS)
flags.DEFINE_bool("vary_world", False, "The synthetic world's seed follows the training seed "
                  "(issue 50: seeds vary the world draw; K = 0, 1, 2, 3, 5 distractors); use a "
                  "new --out.", flag_values=FLAGS)


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
