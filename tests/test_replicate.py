"""``dense_cf.studies.replicate``: the claims registry, verdicts, run configs, and an end-to-end
report on tiny random-BERT runs (2 steps)."""

import json
import math
import os

import numpy as np
import pytest

from dense_cf import methods
from dense_cf.eval import claims, outcomes, stats
from dense_cf.eval import report as report_lib
from dense_cf.methods.contrastive import DPR_LOSS, EADPR_LOSS, PICL_LOSS
from dense_cf.studies import replicate as rep
from dense_cf.synthetic.distractors import HELDOUT_KINDS

# Studies, not sharding, are the subject here: one device (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_device")


def test_check_verdict_refuses_unknown_expectation():
    with pytest.raises(ValueError, match="expect"):
        claims.check_verdict(0.1, 0.01, "better")


def test_evaluate_checks_on_compare_rows():
    from dense_cf.eval import stats
    a = [True] * 40 + [False] * 60
    b = [True] * 70 + [False] * 30
    rows = [{**stats.compare_outcomes("AAR", a, b, names=("x", "y")), "id": "aar.sentence"}]
    got = claims.evaluate_checks(rows, [claims.Check("aar.sentence"),
                                        claims.Check("aar.sentence", "down"),
                                        claims.Check("aar.answer")], ("x", "y"))
    # Holm over the two measured checks (p ~ 1e-7 each): both stay significant.
    assert [g["verdict"] for g in got] == ["reproduced", "reversed", "not measured"]
    # The deciding p is Tango's score test at 0 (McNemar's z); Holm doubles it for reversal.
    assert got[0]["p_holm"] == pytest.approx(2 * got[0]["p_null"])
    assert got[0]["p_null"] == pytest.approx(stats.tango_test(30, 0, 100)["p_value"])
    assert got[0]["diff"] == pytest.approx(0.3) and got[0]["p_value"] < 1e-6
    assert got[0]["A"].startswith("40.00 [") and got[0]["B"].startswith("70.00 [")


def test_registry_is_consistent():
    assert len(set(rep.CLAIM_IDS)) == len(rep.CLAIMS)
    for c in rep.CLAIMS:
        if c.study:  # tested inside one study's report: a, b name its rows, not RUNS
            assert c.study in rep.STUDIES and c.a != c.b, c.id
        else:
            assert c.a in rep.RUNS and c.b in rep.RUNS and c.a != c.b, c.id
        assert c.checks and all(k.expect in claims.EXPECTATIONS for k in c.checks), c.id
    assert rep.plan(["picl-aar", "eadpr-aa"]) == ["dpr", "picl", "eadpr"]
    with pytest.raises(ValueError, match="unknown claims"):
        rep.plan(["no-such-claim"])
    # An evaluation-only run (issue 50: the rule paraphrase kind) is an earlier training run's
    # spec with eval.* overrides added, and plans that run before it.
    names = list(rep.RUNS)
    for name, spec in rep.RUNS.items():
        if spec.eval_of:
            model = rep.RUNS[spec.eval_of]
            assert not model.eval_of and names.index(spec.eval_of) < names.index(name), name
            assert (spec.study, spec.row, spec.method, spec.world, spec.evidence) == (
                model.study, model.row, model.method, model.world, model.evidence), name
            own = spec.overrides[len(model.overrides):]
            assert spec.overrides[:len(model.overrides)] == model.overrides and own, name
            assert all(k.startswith("eval.") for k, _ in own), name
    assert rep.plan(["picl-robust-did-rp-oe"]) == ["dpr_oe", "picl_oe", "dpr_oe_rp",
                                                  "picl_oe_rp"]


def test_run_configs(tmp_path):
    kw = {"steps": 10, "seed": 1}
    def loss(c):  # the weights it trains with (unset: the method's own)
        hp = methods.get(c.method).loss_hparams(c.loss)
        return {k: hp[k] for k in ("lam", "tau1", "tau2")}

    cfgs = {name: rep.run_config(name, str(tmp_path), **kw) for name in rep.RUNS}
    assert loss(cfgs["dpr"]) == DPR_LOSS and loss(cfgs["picl"]) == PICL_LOSS
    assert cfgs["eadpr"].method == "eadpr" and loss(cfgs["eadpr"]) == EADPR_LOSS
    assert cfgs["dpr_h0"].data.num_hard == 0 and cfgs["dpr"].data.num_hard == 1
    for name, c in cfgs.items():
        assert c.train.num_steps == 10 and c.seed == 1, name
        spec = rep.RUNS[name]
        if spec.eval_of:  # the model's config, evaluated at K = 0-4 with four held-out kinds
            model = cfgs[spec.eval_of]
            assert tuple(c.eval.robustness_counts) == (0, 1, 2, 3, 4), name
            assert tuple(c.eval.robustness_heldout_kinds) == rep.RP_KINDS
            assert (c.method, c.model.pooling, c.data.data_dir) == (
                model.method, model.model.pooling, model.data.data_dir), name
        elif spec.study == "synthetic":
            assert tuple(c.eval.robustness_counts) == (0, 1, 2, 5)
            world = "data" if not spec.world else "data_synthetic_" + "_".join(
                f"{k}{v}" for k, v in spec.world)
            assert c.data.data_dir == os.path.join(str(tmp_path), world), name
    # The pre-registered setting (issue 32): other-entity negatives, mean pooling, held-out.
    oe = cfgs["picl_oe"]
    assert (oe.data.synthetic.hard_negatives, oe.model.pooling, oe.eval.robustness_heldout) == (
        "other_entity", "mean", True)
    assert cfgs["dpr_oe_2neg"].data.num_hard == 2 and cfgs["dpr"].model.pooling == "cls"
    assert loss(cfgs["picl_h0_tau02"]) == {**PICL_LOSS, "tau1": 0.2, "tau2": 0.2}
    # Worlds: DCSR's default and many-questions worlds live apart.
    assert cfgs["dcsr_dpr"].data.data_dir == cfgs["dcsr_dcsr"].data.data_dir
    assert cfgs["dcsr_manyq_dpr"].data.data_dir != cfgs["dcsr_dpr"].data.data_dir
    assert cfgs["dcsr_dcsr_bm25"].dcsr.negatives == "bm25"


def test_list_states_the_budget():
    text = rep.list_text(["picl-aar", "dcsr-default"], steps=50, seeds=[0, 1])
    assert "picl-aar" in text and "dcsr-default" in text and "eadpr-aa" not in text
    assert "runs (4 × 2 seeds): dpr, picl, dcsr_dpr, dcsr_dcsr" in text
    total = sum(rep.RUNS[r].minutes for r in ("dpr", "picl", "dcsr_dpr", "dcsr_dcsr"))
    assert f"≈ {total * 50 / 100 * 2:.0f} min at 50 steps" in text


def test_replication_tiny_end_to_end(tmp_path, caplog):
    out = str(tmp_path / "rep")
    kw = {"steps": 2, "model": "tiny", "num_passages": 150, "test_questions": 40,
          "n_resamples": 300}
    ids = ["picl-aar", "picl-type", "dcsr-default"]
    res = rep.run_replication(out, ids, **kw)
    saved = json.load(open(os.path.join(out, "replicate.json")))
    md = open(os.path.join(out, "replicate.md")).read()
    assert [c["id"] for c in saved["claims"]] == ids
    for c in res["claims"]:
        e = c["per_seed"][0]
        assert c["verdict"] == e["verdict"] == claims.claim_verdict(
            [k["verdict"] for k in e["checks"]])
        for k in e["checks"]:
            assert f"| {k['metric']} |" in md
            if k["verdict"] == claims.UNINFORMATIVE:  # reference at 0 or 100 %: not a test
                assert claims.infeasible(k["a_rate"]) and "p_holm" not in k
                continue
            assert k["verdict"] in claims.VERDICTS
            assert k["verdict"] == claims.check_verdict(k["diff_shown"], k["p_null"],
                                                        k["expect"], margin=k["margin"] or 0,
                                                        p_reversed=k["p_holm"])
    by_id = {c["id"]: c for c in res["claims"]}
    assert [k["metric"] for k in by_id["picl-aar"]["per_seed"][0]["checks"]] == ["AAR"]
    assert all(k["metric"].startswith("AAR (") for k in by_id["picl-type"]["per_seed"][0]["checks"])
    # The rows sibling holds each claim's table keyed by metric id, the cells the markdown shows
    # (what tools/rederive_claims.py reads).
    sib = report_lib.read_rows(os.path.join(out, "replicate.md"))
    assert sib["report"] == "replicate.md"
    assert [(t["claim"], t["seed"]) for t in sib["tables"]] == [(i, 0) for i in ids]
    for t, c in zip(sib["tables"], res["claims"]):
        checks = c["per_seed"][0]["checks"]
        assert list(t["rows"]) == [k["id"] for k in checks]
        for k in checks:
            cells = t["rows"][k["id"]]
            assert (cells["A"], cells["B"], cells["verdict"]) == (
                k.get("A", ""), k.get("B", ""), k["verdict"])
            assert f"| {outcomes.family_label(k['id'])} | {cells['expect']} |" in md
    assert set(saved["setup"]["runs"]) == {"dpr", "picl", "dcsr_dpr", "dcsr_dcsr"}
    # The namesake share of the training negatives, per world of the synthetic runs (issue 50).
    (ns,) = saved["namesake_negatives"]
    assert (ns["world"], ns["runs"], ns["in training"]) == ("data", "dpr, picl", True)
    assert ns["namesake"] + ns["same_entity"] + ns["other"] == ns["hard_negatives"] > 0
    assert "## Namesake passages among the training negatives" in md
    assert saved["did_kinds"] == []  # no claim here checks a held-out kind
    assert "| claim | status | paper | what the paper says |" in md and "## Runs" in md
    assert all(isinstance(m, float) for m in saved["setup"]["minutes_per_run"].values())
    # Stamped (issue 50): the commit, the dirty flag, and each run's start and end.
    stamp = saved["setup"]["stamp"]
    assert stamp["started"] <= stamp["finished"] and "dirty" in stamp
    assert f"Commit `{stamp['commit'] or 'unknown (no git checkout)'}`" in md
    times = saved["setup"]["run_times"]
    assert set(times) == {f"{r} (seed 0)" for r in ("dpr", "picl", "dcsr_dpr", "dcsr_dcsr")}
    assert all(t["started"] <= t["finished"] for t in times.values())
    assert all(t["started"] in md for t in times.values())
    # Re-running reuses every finished run.
    caplog.set_level("INFO")
    again = rep.run_replication(out, ids, **kw)
    assert caplog.text.count("finished earlier, read back") == 4
    assert set(again["setup"]["minutes_per_run"].values()) == {"reused"}


def test_pseudo_evidence_run_scores_its_training_file_first(tmp_path):
    # EADPR §3.1: the pseudo run's p* removes the sentence a QA-proxy scorer picks, annotated
    # once for the training file before training (gold: the answer sentence).
    out = str(tmp_path / "rep")
    c = rep.run_config("eadpr_h0_pseudo", out, steps=2, seed=0)
    gold = rep.run_config("eadpr_h0", out, steps=2, seed=0)
    assert (c.data.counterfactual, gold.data.counterfactual) == ("evidence", "sentence")
    assert c.data.evidence_file == os.path.join(out, "data", "evidence-minilm-train.jsonl")
    assert c.data.data_dir == gold.data.data_dir and c.data.num_hard == 0
    res = rep.run_replication(out, ["eadpr-pseudo-gold"], steps=2, model="tiny",
                              num_passages=60, test_questions=20, n_resamples=300)
    n_train = len(json.load(open(os.path.join(c.data.data_dir, c.data.train_file))))
    with open(c.data.evidence_file) as f:
        assert sum(1 for _ in f) == n_train
    saved = json.load(open(os.path.join(out, "eadpr_h0_pseudo", "config.json")))
    assert saved["data"]["evidence_file"] == os.path.abspath(c.data.evidence_file)
    assert [k["metric"] for k in res["claims"][0]["per_seed"][0]["checks"]] == [
        "AA score", "top-1", "top-5", "top-20"]


def test_attribution_claim_is_tested_inside_the_marginalisation_study(tmp_path):
    # The encoder-attribution claim is P_i − Q_i > 0 within one study, per test domain.
    assert rep.plan(["attribution-passage"]) == []
    assert rep.plan_studies(["attribution-passage", "picl-aar"]) == ["attribution"]
    assert "studies (1 × 1 seeds): attribution" in rep.list_text(["attribution-passage"], 100, [0])
    out = str(tmp_path / "rep")
    res = rep.run_replication(out, ["attribution-passage"], steps=2, model="tiny",
                              n_resamples=200, study_params={"domains": 2, "passages": 60,
                                                             "test_questions": 12,
                                                             "worlds": ("entity", "mixed"),
                                                             "qpp": (1, 3)})
    e = res["claims"][0]["per_seed"][0]
    summary = json.load(open(os.path.join(out, "attribution", "summary.json")))
    domains = summary["domains"]
    assert len(domains) == 2 and domains[1].endswith("_mixed_q3")
    assert [k["metric"] for k in e["checks"]] == [f"top-{k}: {d}" for k in (1, 5)
                                                  for d in domains]
    for k in e["checks"]:
        assert k["verdict"] == claims.check_verdict(k["diff_shown"], k["p_holm"], "up")
        row = next(r for r in summary["contrast"] if r["metric"] == k["metric"])
        assert k["diff"] == pytest.approx(row["diff"])     # the study's own P − Q
    md = open(os.path.join(out, "replicate.md")).read()
    assert "## Studies" in md and "| attribution |" in md


def test_data_stats_claims_are_tested_inside_the_data_efficiency_study(tmp_path, caplog):
    # Encoder attribution §10: DPR on nested fractions of one high-overlap world; the 40 %
    # passage encoder against the 100 % one (Table 4) and rank correlations (Fig. 3/4).
    ids = ["attribution-data-40", "attribution-data-trend"]
    assert rep.plan(ids) == [] and rep.plan_studies(ids) == ["data-stats"]
    assert "studies (1 × 1 seeds): data-stats" in rep.list_text(ids, 100, [0])
    out = str(tmp_path / "rep")
    params = {"data-stats": {"fractions": (1.0, 0.4, 0.7), "passages": 150,
                             "test_questions": 12}}
    kw = {"steps": 2, "model": "tiny", "n_resamples": 200, "batch": 8, "study_params": params}
    res = rep.run_replication(out, ids, **kw)
    summary = json.load(open(os.path.join(out, "data-stats", "summary.json")))
    assert summary["fractions"] == [0.4, 0.7, 1.0]
    assert summary["steps"] == {"frac0.40": 1, "frac0.70": 1, "frac1.00": 2}  # epochs-based
    # The table's statistics are mining.stats' on the training file's nested subsets.
    stats_ = {s["fraction"]: s for s in summary["data_stats"]["subsets"]}
    for r in summary["table"]:
        st = stats_[r["fraction"]]
        assert (r["examples"], r["coverage"]) == (st["questions"], st["coverage"])
        assert r["unique coverage"] == pytest.approx(
            st["coverage"] * (1 - st["overlap"]) ** 1.3)
    assert [r["examples"] for r in summary["table"]] == sorted(r["examples"]
                                                               for r in summary["table"])
    by_id = {c["id"]: c["per_seed"][0] for c in res["claims"]}
    forty, trend = by_id["attribution-data-40"], by_id["attribution-data-trend"]
    assert [k["metric"] for k in forty["checks"]] == ["top-5", "top-20"]
    assert [k["metric"] for k in trend["checks"]] == [
        f"top-{k}: ρ({s} marginal, {x})" for k in (5, 20)
        for s, x in (("P", "unique coverage"), ("Q", "#examples"))]
    rows = {r["metric"]: r for r in summary["contrast_rows"]}
    for e, expect in ((forty, "not_worse"), (trend, "up")):
        for k in e["checks"]:
            assert k["expect"] == expect
            assert k["verdict"] == claims.check_verdict(k["diff_shown"], k["p_holm"], expect,
                                                        margin=k["margin"] or 0)
            saved_diff = rows[k["metric"]]["stats"]["diff"]
            if saved_diff is None or math.isnan(k["diff"]):  # ρ of a constant marginal: NaN
                assert saved_diff is None or math.isnan(saved_diff)
                assert math.isnan(k["diff"]) and k["verdict"] == "no difference detected"
            else:
                assert k["diff"] == pytest.approx(saved_diff)
        assert e["verdict"] == claims.claim_verdict([k["verdict"] for k in e["checks"]])
    saved = json.load(open(os.path.join(out, "replicate.json")))
    assert list(saved["study_tables"]) == ["data-stats (seed 0)"]
    md = open(os.path.join(out, "replicate.md")).read()
    assert "## Study data-stats (seed 0)" in md and "| fraction | examples | steps |" in md
    assert "| data-stats |" in md and "## attribution-data-40 (seed 0)" in md
    # Re-running reuses the world, the runs and the exports: no training step runs again.
    caplog.set_level("INFO")
    again = rep.run_replication(out, ids, **kw)
    assert "train: compiling" not in caplog.text
    assert caplog.text.count("checkpoint: restored step") >= 3
    assert again["claims"][0]["per_seed"][0]["checks"] == forty["checks"]


def test_seed_summary_mean_spread_and_verdict_counts():
    def chk(metric, diff, verdict, expect="up"):
        return {"metric": metric, "expect": expect, "diff": diff, "verdict": verdict}

    claims_ = [
        {"id": "c1", "per_seed": {
            0: {"checks": [chk("AAR", 3.0, "reproduced"), chk("top-5", -1.0, "reproduced", "not_worse")]},
            1: {"checks": [chk("AAR", 1.0, "no difference detected"), chk("top-5", 0.0, "reproduced", "not_worse")]},
            2: {"checks": [chk("AAR", 5.0, "reproduced"), chk("top-5", -5.0, "reversed", "not_worse")]}}},
        {"id": "one-seed", "per_seed": {0: {"checks": [chk("AAR", 9.0, "reproduced")]}}},
    ]
    rows = rep.seed_summary(claims_)
    assert [(r["claim"], r["metric"]) for r in rows] == [("c1", "AAR"), ("c1", "top-5")]
    aar, top5 = rows
    # AAR: mean 3, sample std 2 (ddof=1), range [1, 5]
    assert aar["B − A over seeds"] == "+3.00 ± 2.00 [+1.00, +5.00]" and aar["seeds"] == 3
    assert aar["verdicts"] == "reproduced 2/3, no difference detected 1/3"
    assert top5["spread"]["mean"] == pytest.approx(-2.0) and top5["expect"] == "not_worse"
    assert top5["verdicts"] == "reproduced 2/3, reversed 1/3"
    md = rep.markdown({"setup": {"steps": 2, "seeds": [0, 1, 2], "n_resamples": 10, "minutes": 0,
                                 "out": "x", "runs": {}, "minutes_per_run": {}},
                       "claims": [], "over_seeds": rows})
    assert "## Over seeds" in md and "| c1 | AAR | up | 3 | +3.00 ± 2.00 [+1.00, +5.00] |" in md
    assert rep.seed_summary(claims_[1:]) == []


def test_report_has_seed_level_and_mixed_model_rows_after_a_pooled_row():
    """Issue 50 item 2: the claims table gives each pooled row its seed-level t and its
    mixed-effects logistic model (eval.glmm), each with its own word."""
    a = [True] * 150 + [False] * 150

    def seed(b01, b10):
        b = [False] * b10 + [True] * (150 - b10) + [True] * b01 + [False] * (150 - b01)
        row = {**stats.compare_outcomes("top-5", np.asarray(a), np.asarray(b, bool)),
               "id": "retrieval.top5"}
        entries = claims.evaluate_checks([row], [claims.Check("retrieval.top5")], ("A", "B"))
        return {"checks": entries, "verdict_text": claims.verdict_text(entries)}
    per_seed = {0: seed(40, 3), 1: seed(8, 7), 2: seed(3, 5)}
    pooled = claims.pool_claim([v["checks"] for v in per_seed.values()])
    claim = {"id": "c", "status": "exploratory", "paper": "P", "where": "§1", "claim": "up", "note": "",
             "a": "dpr", "b": "picl", "per_seed": per_seed, "pooled": pooled}
    md = rep.markdown({"setup": {"steps": 2, "seeds": [0, 1, 2], "n_resamples": 10,
                                 "minutes": 0, "out": "x", "runs": {}, "minutes_per_run": {}},
                       "claims": [claim], "over_seeds": []})
    (mixed,) = [ln for ln in md.splitlines() if "| mixed model |" in ln]
    assert "top-5 β=+" in mixed and mixed.rstrip(" |").endswith("no difference detected")
    assert "| seed-level |" in md and "*fragile*: the seed-level t-test says" in md
    assert "'mixed model' rows" in md


def test_seed_summary_uses_the_units_of_the_b_minus_a_column():
    # Rates are fractions in "diff" but points in "B − A": the summary follows the column.
    def chk(diff):
        return {"metric": "AAR", "expect": "up", "diff": diff, "diff_shown": 100 * diff,
                "verdict": "reproduced"}
    (row,) = rep.seed_summary([{"id": "c", "per_seed": {0: {"checks": [chk(0.5)]},
                                                        1: {"checks": [chk(0.3)]}}}])
    assert row["spread"]["mean"] == pytest.approx(40.0)
    assert row["B − A over seeds"].startswith("+40.00 ± 14.14 [+30.00, +50.00]")


def test_seed_summary_counts_an_undefined_rho_instead_of_failing():
    """A Spearman ρ over a constant series is nan: the spread is of the seeds with a number,
    the others counted (the equal-steps study's report failed here after its training)."""
    def chk(diff):
        return {"metric": "ρ", "expect": "up", "diff": diff, "verdict": "no difference detected"}
    per_seed = {0: {"checks": [chk(0.8)]}, 1: {"checks": [chk(float("nan"))]},
                2: {"checks": [chk(0.4)]}}
    (row,) = rep.seed_summary([{"id": "c", "per_seed": per_seed}])
    assert row["B − A over seeds"] == "+0.60 ± 0.28 [+0.40, +0.80] (1 of 3 undefined)"
    assert row["undefined"] == 1 and row["seeds"] == 3
    (flat,) = rep.seed_summary([{"id": "c", "per_seed": {s: {"checks": [chk(float("nan"))]}
                                                         for s in (0, 1)}}])
    assert flat["B − A over seeds"] == "— (2 of 2 undefined)" and flat["spread"] is None


@pytest.mark.optimized  # MiniLM forward passes: 63 -> 38 s with XLA's optimisations
def test_untrained_baseline_scores_the_checkpoint_once_per_world_and_pooling(tmp_path):
    """One row per (world, pooling) naming every run that shares it; MiniLM at step 0 on a
    small world scores the AAR report's own figures."""
    budget = {"steps": 2, "num_passages": 150, "test_questions": 40}
    # The grouping, with a random model (no checkpoint worth scoring, so nothing is evaluated).
    tiny = rep.untrained_baselines(["dpr", "picl", "dpr_oe", "picl_oe", "dcsr_dpr"],
                                   str(tmp_path / "t"), model="tiny", **budget)
    assert [(r["world"], r["pooling"], r["runs"]) for r in tiny] == [
        ("data", "cls", "dpr, picl"),
        ("data_synthetic_hard_negativesother_entity", "mean", "dpr_oe, picl_oe")]
    assert all(r["AAR (%)"] is None and "random model" in r["note"] for r in tiny)
    # MiniLM on one of the two worlds (the registered rows' mean pooling): scored once.
    out = str(tmp_path / "rep")
    rows = rep.untrained_baselines(["dpr_oe", "picl_oe"], out, model="minilm", **budget)
    assert [(r["pooling"], r["runs"]) for r in rows] == [("mean", "dpr_oe, picl_oe")]
    r = rows[0]
    assert 0 <= r["AAR (%)"] <= 100 and 0 <= r["AA score (%)"] <= 100, r
    report = json.load(open(os.path.join(out, "untrained", r["world"], os.listdir(
        os.path.join(out, "untrained", r["world"]))[0], "eval", "step_0", "aar.json")))
    assert round(100 * report["strategies"]["sentence"]["aar"], 2) == r["AAR (%)"]
    assert round(100 * report["strategies"]["answer"]["aar"], 2) == r["AA score (%)"]


def test_vary_world_seeds_the_world_with_the_training_seed(tmp_path):
    kw = dict(steps=2, model="tiny", num_passages=150, test_questions=40)
    same = rep.run_config("dpr_oe", str(tmp_path), seed=2, **kw)
    varied = rep.run_config("dpr_oe", str(tmp_path), seed=2, vary_world=True, **kw)
    zero = rep.run_config("dpr_oe", str(tmp_path), seed=0, vary_world=True, **kw)
    assert same.data.synthetic.seed == zero.data.synthetic.seed == 0
    assert varied.data.synthetic.seed == 2 and varied.seed == 2
    assert varied.data.data_dir == same.data.data_dir + "_w2"
    assert zero.data.data_dir == same.data.data_dir       # seed 0's world is today's
    assert tuple(varied.eval.robustness_counts) == (0, 1, 2, 3, 5)
    assert rep.run_config("dcsr_dpr", str(tmp_path), seed=1, vary_world=True,
                          **kw).data.synthetic.seed == 1


def test_did_rows_measure_the_drop_per_kind():
    """B beats A by the same margin with and without distractors: the level differs at K = 5,
    the drop does not (review 3 §2.5 A); per kind, only the namesake step differs."""
    from types import SimpleNamespace
    n = 60
    qs = [f"q{i}" for i in range(n)]
    a0 = [1] * 40 + [None] * 20
    b0 = [1] * 50 + [None] * 10
    held_a = {0: a0, 1: [1] * 20 + [None] * 40, 2: [1] * 20 + [None] * 40,
              3: [1] * 10 + [None] * 50, 5: [1] * 10 + [None] * 50}
    held_b = {0: b0, 1: [1] * 30 + [None] * 30, 2: [1] * 30 + [None] * 30,
              3: [1] * 30 + [None] * 30, 5: [1] * 30 + [None] * 30}

    def run(clean, held):
        return SimpleNamespace(robustness={
            "questions": qs, "first_hit_rank": {0: clean, 5: clean},
            "heldout": {"questions": qs, "first_hit_rank": held}})
    rows = {r["id"]: r for r in rep.did_rows(run(a0, held_a), run(b0, held_b), ("A", "B"),
                                             n_resamples=500)}
    assert set(rows) == {rep.did_id(*spec, k) for spec in rep.DID_SPECS for k in (1, 5)}
    swap = rows[rep.did_id("heldout", 0, 1, 1)]
    assert swap["metric"] == "drop DiD value swap (control) K=0→1: top-1"
    assert swap["A"] == "-33.33" and swap["B"] == "-33.33" and swap["stats"]["diff"] == 0
    name = rows[rep.did_id("heldout", 2, 3, 1)]
    assert name["stats"]["diff"] == pytest.approx(10 / 60)       # A loses 10 more items
    assert name["stats"]["p_value"] == pytest.approx(2 / 2 ** 10)  # 10 of 10 one way
    total = rows[rep.did_id("heldout", 0, 5, 1)]
    assert total["stats"]["diff"] == pytest.approx((-20 / 60) - (-30 / 60))
    (e,) = claims.evaluate_checks(list(rows.values()),
                                  [claims.Check(rep.did_id("heldout", 2, 3, 1))], ("A", "B"))
    assert e["verdict"] == "reproduced" and e["did_hist"] == [0, 0, 50, 10, 0]
    pooled = claims.pool_seed_checks([[e], [e]], [claims.Check(e["id"])])[0]
    assert pooled["n"] == 2 * n and pooled["p_null"] == pytest.approx(2 / 2 ** 20)


def test_did_rows_label_each_step_by_the_runs_recorded_kinds():
    """With the opt-in fourth kind (eval.robustness_heldout_kinds), K 3→4 adds a rule
    paraphrase, not a value swap: the row's label and id follow the kinds the runs recorded,
    a check registered for that selection gets the row, and one registered for the default
    selection does not (it is not measured rather than fed another kind)."""
    from types import SimpleNamespace
    four = ("value_swap", "paraphrase", "namesake", "rule_paraphrase")
    n = 40
    qs = [f"q{i}" for i in range(n)]
    clean = [1] * 30 + [None] * 10
    held_a = {k: [1] * (30 - 5 * k) + [None] * (10 + 5 * k) for k in range(1, 5)}
    held_b = {k: [1] * (30 - 2 * k) + [None] * (10 + 2 * k) for k in range(1, 5)}

    def run(held, kinds):
        return SimpleNamespace(robustness={
            "questions": qs, "first_hit_rank": {0: clean},
            "heldout": {"questions": qs, "kinds": kinds, "first_hit_rank": held}})
    rows = {r["id"]: r for r in rep.did_rows(run(held_a, four), run(held_b, four), ("A", "B"),
                                             specs=[("heldout", 3, 4)], n_resamples=200)}
    rp = rep.did_id("heldout", 3, 4, 5, kinds=four)
    assert set(rows) == {rep.did_id("heldout", 3, 4, k, kinds=four) for k in (1, 5)}
    assert rows[rp]["metric"] == "drop DiD rule paraphrase K=3→4: top-5"
    assert outcomes.metric(rp).label == rows[rp]["metric"]
    assert rp != rep.did_id("heldout", 3, 4, 5)  # the default id means a value swap there
    assert outcomes.metric(rep.did_id("heldout", 3, 4, 5)).label.startswith(
        "drop DiD value swap (control)")
    assert rows[rp]["stats"]["diff"] == pytest.approx(3 / 40)  # A loses 5 items, B 2
    e_rp, e_default = claims.evaluate_checks(
        list(rows.values()), [claims.Check(rp), claims.Check(rep.did_id("heldout", 3, 4, 5))],
        ("A", "B"))
    assert e_rp["metric"] == "drop DiD rule paraphrase K=3→4: top-5" and "diff" in e_rp
    assert e_default["verdict"] == "not measured"
    # One kind alone: K 0→1 is that kind.
    one = ("rule_paraphrase",)
    (r,) = rep.did_rows(run(held_a, one), run(held_b, one), ("A", "B"), ks=(5,),
                        specs=[("heldout", 0, 1)], n_resamples=200)
    assert r["metric"] == "drop DiD rule paraphrase K=0→1: top-5"
    # Runs whose selections differ give no held-out row (their distractors differ).
    assert rep.did_rows(run(held_a, four), run(held_b, one), ("A", "B"),
                        specs=[("heldout", 0, 1)], n_resamples=200) == []


def test_did_metric_ids_round_trip_and_refuse_unknown_kinds():
    four = ("value_swap", "paraphrase", "namesake", "rule_paraphrase")
    for spec in [("heldout", 0, 5), ("heldout", 3, 4), ("pstar", 0, 5)]:
        for kinds in (None, four):
            m = outcomes.did_metric(*spec, 5, kinds)
            assert outcomes.metric(m.id) == m
            fam, got, *_ = outcomes.did_spec(m.id)
            assert got == (four if kinds and fam == "heldout" else HELDOUT_KINDS)
    assert outcomes.did_metric("heldout", 0, 5, 1, four).label == (
        "drop DiD held-out (value swap (control), paraphrase, namesake, rule paraphrase) "
        "K=0→5: top-1")
    assert outcomes.did_metric("heldout", 0, 5, 1).id == "robustness.did.heldout.k0_5.top1"
    with pytest.raises(KeyError, match="unknown metric id"):
        claims.Check("robustness.did.heldout:value_swap+typo.k0_1.top1")


def test_picl_claims_scored_by_eadprs_metrics_are_labelled_extrapolations():
    """PiCL measures neither the AA score (EADPR Eq. 9) nor robustness to inserted distractors
    (EADPR Fig. 5): a PiCL claim with such a check is an extrapolation (review 3 §2.3 item 3,
    issue 50 item 1), and the status column says so."""
    eadpr_metrics = ("aar.answer", "robustness.")
    for c in rep.CLAIMS:
        borrowed = [k.metric for k in c.checks if k.metric.startswith(eadpr_metrics)]
        if c.paper.startswith("PiCL") and borrowed:
            assert c.scope == "extrapolation" and c.scope_status.endswith(", extrapolation"), (
                c.id, borrowed)
        if c.paper.startswith("EADPR"):
            assert c.scope == "", c.id
    assert {c.id for c in rep.CLAIMS if c.scope} >= {"picl-aa", "picl-robust", "picl-robust-oe"}


def test_every_registered_run_has_a_valid_config():
    """Registered before any run (issue 50): each run's config, with and without
    --vary_world, passes the trainer's validation (files aside)."""
    from dense_cf.train import validate
    for name in rep.RUNS:
        for vary in (False, True):
            c = rep.run_config(name, "/nonexistent", steps=2, seed=1, model="tiny",
                               vary_world=vary)
            assert not validate.problems(c, check_files=False), name
    assert set(rep.VARY_WORLD_ORDER) <= set(rep.CLAIM_IDS)
    t4 = rep.run_config("t4_dpr_cpp", "/nonexistent", steps=2, seed=0, model="tiny")
    assert t4.data.synthetic.hard_negatives == "random" and t4.loss.tau2 == 0.2
    assert t4.loss.tau1 == 0.0 and t4.data.num_hard == 1


def test_aa_against_the_untrained_checkpoint():
    """Issue 50: where DPR ends below the untrained model on AA, B's AA is also reported
    against the untrained model (the other-entity world's seed 0: 34.33, 69.33, untrained 53.67)."""
    claim = {"id": "picl-robust-oe", "per_seed": {
        0: {"checks": [{"metric": "AA score", "id": "aar.answer", "A": "34.33 [29.19, 39.87]",
                        "B": "69.33 [63.90, 74.28]"}]},
        1: {"checks": [{"metric": "AA score", "id": "aar.answer", "A": "57.33 [51.68, 62.80]",
                        "B": "85.00 [80.52, 88.60]"}]}}}
    rows = rep.aa_against_untrained([claim], {("picl-robust-oe", 0): 53.67,
                                              ("picl-robust-oe", 1): 53.67})
    assert rows == [{"claim": "picl-robust-oe", "seed": 0, "untrained": 53.67, "A": 34.33,
                     "B": 69.33, "B − untrained": 15.66, "A − untrained": -19.34}]
    assert rep.aa_against_untrained([claim], {}) == []   # no untrained figure: nothing said


def test_overrides_apply_at_any_depth(monkeypatch, tmp_path):
    """A run's overrides reach a field at any depth (review 3 §3.2: two levels only before);
    a path that names no field fails, naming it."""
    spec = rep.RunSpec("synthetic", "dpr", overrides=(
        ("data.synthetic.world", "mixed"), ("eval.robustness_heldout", True), ("seed", 7)))
    monkeypatch.setitem(rep.RUNS, "deep", spec)
    c = rep.run_config("deep", str(tmp_path), steps=2, seed=0, model="tiny")
    assert (c.data.synthetic.world, c.eval.robustness_heldout, c.seed) == ("mixed", True, 7)
    monkeypatch.setitem(rep.RUNS, "bad", rep.RunSpec("synthetic", "dpr",
                                                     overrides=(("data.synthetic.nope", 1),)))
    with pytest.raises(KeyError, match="data.synthetic.nope"):
        rep.run_config("bad", str(tmp_path), steps=2, seed=0, model="tiny")
    monkeypatch.setitem(rep.RUNS, "bad", rep.RunSpec("synthetic", "dpr",
                                                     overrides=(("nope.field", 1),)))
    with pytest.raises(KeyError, match="no section nope"):
        rep.run_config("bad", str(tmp_path), steps=2, seed=0, model="tiny")


def test_runs_trained_before_the_harness_move_are_finished(tmp_path, caplog):
    """Run directories written the way studies.replicate trained runs before it moved onto the
    harness (its own loop: the world generated, then the run's config trained and evaluated in
    ``run_dir(out, name, seed)``; finished when summary.json has the steps and the eval
    directory holds report.json and aar.json) are read back by the harness's loop without
    training: a background replication started with the old code keeps its finished runs."""
    from dense_cf.eval import outcomes as outcomes_lib
    from dense_cf.experiment import train_and_evaluate
    out = str(tmp_path / "rep")
    budget = {"steps": 2, "model": "tiny", "num_passages": 150, "test_questions": 40,
              "vary_world": True}
    for name in ("dpr_h0", "dpr"):  # the runs of dpr-hardneg, at seed 1 (world _w1)
        cfg = rep.run_config(name, out, seed=1, **budget)
        rep._prepare_world(rep.RUNS[name], cfg)
        old_dir = os.path.join(out, f"{name}_seed1")  # the old loop's harness.run_dir
        train_and_evaluate(cfg, old_dir).pop("run", None)
        eval_dir = os.path.join(old_dir, "eval", "step_2")
        assert outcomes_lib.evaluated(eval_dir, ["report.json", "aar.json"])  # the old check

    def boom(config, workdir):
        raise AssertionError(f"{workdir} was trained again")

    caplog.set_level("INFO")
    done, minutes, times = rep.train_runs(out, ["dpr-hardneg"], [1], train=boom, **budget)
    assert done == {("dpr_h0", 1): (os.path.join(out, "dpr_h0_seed1"), 2),
                    ("dpr", 1): (os.path.join(out, "dpr_seed1"), 2)}
    assert set(minutes.values()) == {"reused"}
    assert caplog.text.count("finished earlier, read back") == 2
    # And the report is built from them with nothing trained.
    res = rep.run_replication(out, ["dpr-hardneg"], seeds=(1,), n_resamples=200, **budget)
    assert res["claims"][0]["per_seed"][1]["checks"][0]["id"] == "aar.sentence"
    assert set(res["setup"]["minutes_per_run"].values()) == {"reused"}
