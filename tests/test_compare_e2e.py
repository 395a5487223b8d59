"""``eval.compare`` on two tiny trained runs (DPR and PiCL, 3 steps, tiny random BERT): the
evaluations save per-item outcomes and single-run intervals, and the two runs pair up."""

import json
import os

import numpy as np
import pytest
from helpers import compare_pairs, tiny_synthetic_config

from dense_cf.analysis import compare as compare_lib
from dense_cf.synthetic import generate as synthetic


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    from dense_cf.experiment import train_and_evaluate as train
    data_dir = tmp_path_factory.mktemp("synth")
    synthetic.generate(str(data_dir), num_passages=200, seed=1, test_questions=60)
    common = {"train.num_steps": 3, "eval.after_training": True,
              "eval.robustness_counts": (0, 2)}
    base = tmp_path_factory.mktemp("runs")  # the demo's layout: <workdir>/<method>
    runs = {}
    for method in ("dpr", "picl"):  # each with its own loss weights
        cfg = tiny_synthetic_config(data_dir, **common)
        cfg.method = method
        workdir = str(base / method)
        summary = train(cfg, workdir)
        summary.pop("run")
        runs[method] = (workdir, summary)
    return runs


def test_single_run_intervals_and_saved_outcomes(two_runs):
    workdir, summary = two_runs["picl"]
    ret = summary["eval"]["retrieval"]
    for k, v in ret["top_k"].items():
        lo, hi = ret["top_k_ci"][k]
        assert 0.0 <= lo <= v <= hi <= 100.0
    assert ret["mrr_ci"][0] <= ret["mrr"] <= ret["mrr_ci"][1]
    out = os.path.join(workdir, "eval", "step_3")
    rep = json.load(open(os.path.join(out, "report.json")))
    assert len(rep["questions"]) == len(rep["first_hit_rank"]) == ret["n_questions"]
    assert "95 % intervals" in open(os.path.join(out, "report.md")).read()
    for strategy, e in summary["eval"]["aar"]["strategies"].items():
        assert e["aar_ci"][0] <= e["aar"] <= e["aar_ci"][1]
        assert e["score_diff_ci"][0] <= e["score_diff"]["all"]["mean"] <= e["score_diff_ci"][1]
        with np.load(os.path.join(out, f"aar_scores_{strategy}.npz")) as z:
            assert len(z["questions"]) == len(z["pos"]) == len(z["gold_index"]) == e["triplets"]
    assert "AAR 95% CI (Wilson)" in open(os.path.join(out, "aar.md")).read()
    table = summary["eval"]["robustness"]["table"]
    assert set(table[2]["top_k_ci"]) == set(table[2]["top_k"])


def test_compare_two_trained_runs(two_runs):
    (a, sa), (b, sb) = two_runs["dpr"], two_runs["picl"]
    res = compare_lib.compare(a, b, n_resamples=2000, verbose=False)
    print(res["markdown"])
    rows = {r["metric"]: r for r in res["rows"]}
    n_q = sa["eval"]["retrieval"]["n_questions"]
    assert list(rows)[:4] == ["top-1", "top-5", "top-20", "MRR (×100)"]
    assert {"AAR", "AA score", "K=2 distractors: top-5",
            "K=2 distractors: MRR (×100)"} <= set(rows)
    for k in (1, 5, 20):  # each run's figure over the paired questions is its reported top-k
        r = rows[f"top-{k}"]
        assert r["n"] == n_q and r["test"].startswith("McNemar exact")
        assert 100 * r["stats"]["a"] == pytest.approx(sa["eval"]["retrieval"]["top_k"][k])
        assert 100 * r["stats"]["b"] == pytest.approx(sb["eval"]["retrieval"]["top_k"][k])
        assert r["significant at 0.05"] == ("yes" if r["stats"]["p_value"] < 0.05 else "no")
    assert rows["MRR (×100)"]["stats"]["a"] == pytest.approx(sa["eval"]["retrieval"]["mrr"])
    for label, strategy in (("AAR", "sentence"), ("AA score", "answer")):
        ea, eb = (s["eval"]["aar"]["strategies"][strategy] for s in (sa, sb))
        assert rows[label]["n"] <= min(ea["triplets"], eb["triplets"])
        if ea["triplets"] == eb["triplets"] == rows[label]["n"]:
            assert rows[label]["stats"]["a"] == pytest.approx(ea["aar"])
            assert rows[label]["stats"]["b"] == pytest.approx(eb["aar"])
    assert len(res["markdown"].split("\n- ")) > len(res["rows"])  # one sentence per row
    # A run against itself: nothing differs, nothing is significant.
    same = compare_lib.compare(b, b, n_resamples=500, verbose=False)
    assert all(r["significant at 0.05"] == "no" and float(r["p"]) == 1.0 for r in same["rows"])


def test_demo_report_on_trained_runs(two_runs):
    from dense_cf import demo
    results = {m: s for m, (_, s) in two_runs.items()}
    rows = demo.report_rows(results)
    for row, (method, s) in zip(rows, results.items()):
        assert row["method"] == method
        top5, ci = row["top-5 [95% CI]"], s["eval"]["retrieval"]["top_k_ci"][5]
        assert top5 == f"{s['eval']['retrieval']['top_k'][5]:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"
        for col in ("MRR [95% CI]", "AAR [95% CI]", "AA score [95% CI]",
                    "mean sim(q,p+) − sim(q,p*) (sentence) [95% CI]"):
            assert isinstance(row[col], str) and "[" in row[col]
    md = demo.paired_sections(compare_pairs({m: d for m, (d, _) in two_runs.items()},
                                            {m: s["step"] for m, s in results.items()},
                                            [("dpr", "picl")]))
    assert md.startswith("## Paired comparison: dpr (A) vs picl (B) on the same test items")
    for metric in ("top-1", "top-20", "MRR (×100)", "AAR", "AA score"):
        assert f"| {metric} |" in md and f"- {metric}: " in md
    assert md.count("significant at 0.05") >= 10


def test_aar_by_type_rows_partition_the_triplets(two_runs):
    (a, _), (b, _) = two_runs["dpr"], two_runs["picl"]
    oa, ob = compare_lib.load_outcomes(a), compare_lib.load_outcomes(b)
    rows = compare_lib.aar_by_type_rows(oa, ob, "sentence", n_resamples=500,
                                        names=("dpr", "picl"))
    overall = next(r for r in compare_lib.compare(a, b, n_resamples=500, verbose=False)["rows"]
                   if r["metric"] == "AAR")
    assert rows and all(r["metric"].startswith("AAR (") for r in rows)
    assert sum(r["n"] for r in rows) == overall["n"]  # every paired triplet in one type
    # The per-type rates recombine into the overall rates.
    for side in ("a", "b"):
        total = sum(r["n"] * r["stats"][side] for r in rows) / overall["n"]
        assert total == pytest.approx(overall["stats"][side])
    for r in rows:
        assert r["test"].startswith("McNemar exact") and 0.0 <= r["stats"]["p_value"] <= 1.0
    oa.aar["sentence"]["questions"] = None  # no question texts: no type, no rows
    assert compare_lib.aar_by_type_rows(oa, ob) == []


def test_pivot_check_on_a_trained_run(two_runs, tmp_path):
    from dense_cf.cli import eval_pivot
    from dense_cf.datasets.formats import read_biencoder
    from dense_cf.eval import pivot
    from dense_cf.train.run import load_run
    workdir, _ = two_runs["picl"]
    run = load_run(workdir)
    path = os.path.join(run.config.data.data_dir, "biencoder-synth-dev.json")
    examples = read_biencoder(path)
    res = pivot.pivot_check(run, examples + [examples[0].__class__("q?", ["x"], [], [], [])])
    assert res["records"] == len(examples) + 1 and res["no_negatives"] >= 1
    assert res["scored"] == res["fates"]["scored"] > 0
    assert sum(res["fates"].values()) == res["records"] - res["no_negatives"]
    ms = res["mean_scores"]
    for label, (hi, lo) in pivot.COMPARISONS.items():
        c = res["comparisons"][label]
        assert c["n"] == res["scored"]
        assert c["rate_ci"][0] <= c["rate"] <= c["rate_ci"][1]
        assert c["mean_diff"] == pytest.approx(ms[hi] - ms[lo], abs=1e-5)
    # The command writes the same figures next to the run's evaluation.
    out = eval_pivot.run_cli([f"--workdir={workdir}", f"--file={path}", f"--out={tmp_path}"])
    saved = json.load(open(tmp_path / "pivot_sentence.json"))
    assert saved["comparisons"]["p* > hard negative"]["rate"] == pytest.approx(
        out["comparisons"]["p* > hard negative"]["rate"])
    assert "| p* > random negative |" in open(tmp_path / "pivot_sentence.md").read()


def test_demo_claims_section(two_runs):
    from dense_cf import demo
    from dense_cf.eval import claims
    results = {m: s for m, (_, s) in two_runs.items()}
    compared = compare_pairs({m: d for m, (d, _) in two_runs.items()},
                             {m: s["step"] for m, s in results.items()}, [("dpr", "picl")])
    md = demo.claims_section(compared)
    assert md.startswith("## PiCL's claims: picl (B) against dpr (A)")
    lines = [ln for ln in md.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert len(lines) == len(demo.PICL_CLAIMS)
    for (label, check), line in zip(demo.PICL_CLAIMS, lines):
        assert line.startswith(f"| {label} |")
        # every claim measured here (a reference at 0 or 100 % makes it uninformative)
        assert any(v in line for v in (*claims.VERDICTS, claims.UNINFORMATIVE))
    assert "| K=2 distractors: top-1 |" in md  # the largest K the runs were evaluated with
    aar_row = next(r for r in compared[0][2]["rows"] if r["metric"] == "AAR")
    assert f"| AAR | {aar_row['dpr']} | {aar_row['picl']} | {aar_row['B − A']} |" in md
    rows = {r["metric"]: r for r in compared[0][2]["rows"]}
    aar = rows["AAR"]["stats"]
    # One column pair: the p of the test that decides, then its Holm-adjusted value (never
    # below it); the word follows the two (claims.check_verdict).
    p_decides, holm_p = (float(x) for x in lines[0].split(" | ")[-3:-1])
    assert holm_p >= p_decides
    a_rate = 100 * aar["a"]
    assert claims.check_verdict(aar["diff"], p_decides, "up", p_reversed=holm_p) in lines[0] \
        or claims.infeasible(a_rate)
    # A failed comparison is left out of the claims (paired_sections says why).
    assert demo.claims_section([("dpr", "picl", ValueError("no outcomes"))]) == ""
