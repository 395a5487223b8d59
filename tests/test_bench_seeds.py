"""``--seeds`` on studies.multihop, studies.marginalize and studies.data_stats (issue 16 §1): one set
of runs per seed, the spread tables' mean ± std [min, max] against the per-seed figures, and a
single seed's output as before. Tiny random models, a few steps."""

import json
import os

import numpy as np
import pytest

from dense_cf.eval import stats
from dense_cf.studies import data_stats as data_stats_bench
from dense_cf.studies import marginalize as marginalize_bench
from dense_cf.studies import multihop as multihop_bench

# Studies, not sharding, are the subject here: one device (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_device")


def _cell(values, signed=False):
    """``stats.seed_table`` / ``seed_diff_table``'s cell, computed here with numpy."""
    x = np.asarray(values, np.float64)
    if not np.isfinite(x).all():
        return "n/a"
    sign = "+" if signed else ""
    return (f"{x.mean():{sign}.2f} ± {x.std(ddof=1):.2f} "
            f"[{x.min():{sign}.2f}, {x.max():{sign}.2f}]")


def _shown(row):
    return row["stats"]["diff"] * row.get("scale", 1.0)


def test_seed_diff_table_spread_in_shown_units_and_significance_counts():
    t, f = True, False
    rows = [stats.compare_outcomes("top-1", [t, f, f, f], [t, t, t, f]),   # +50 points
            stats.compare_outcomes("top-1", [t, t, f, f], [t, t, t, f]),   # +25 points
            {"metric": "rho", "stats": {"diff": 0.5, "p_value": 0.01}},
            {"metric": "rho", "stats": {"diff": 0.9, "p_value": 0.04}},
            {"metric": "nan", "stats": {"diff": float("nan"), "p_value": 1.0}},
            {"metric": "nan", "stats": {"diff": 0.5, "p_value": 0.01}},
            {"metric": "none", "stats": {"diff": None, "p_value": 1.0}}]
    top, rho, nan, none = stats.seed_diff_table(rows)
    assert (top["metric"], top["seeds"]) == ("top-1", 2)
    assert top["B − A"] == "+37.50 ± 17.68 [+25.00, +50.00]" == _cell([50.0, 25.0], signed=True)
    assert top["significant at 0.05"] == "0 of 2"
    assert top["spread"]["mean"] == pytest.approx(37.5)
    # Rows without a scale (ρ) are shown raw.
    assert (rho["seeds"], rho["B − A"], rho["significant at 0.05"]) == (
        2, "+0.70 ± 0.28 [+0.50, +0.90]", "2 of 2") and rho["B − A"] == _cell([0.5, 0.9], True)
    # A seed without a finite difference (ρ of a constant series): no spread, still counted.
    assert (nan["seeds"], nan["B − A"], nan["significant at 0.05"]) == (2, "n/a", "1 of 2")
    assert none["B − A"] == "n/a" and none["spread"] is None


def test_seed_table_says_na_for_a_missing_or_non_finite_figure():
    rows = [{"run": "a", "seed": 0, "x": 1.0, "y": float("nan")},
            {"run": "a", "seed": 1, "x": 2.0, "y": 3.0},
            {"run": "b", "seed": 0, "x": 5.0}]
    assert stats.seed_table(rows, ("run",), ("x", "y")) == [
        {"run": "a", "seeds": 2, "x": "1.50 ± 0.71 [1.00, 2.00]", "y": "n/a"},
        {"run": "b", "seeds": 1, "x": "5.00 ± 0.00 [5.00, 5.00]", "y": "n/a"}]


# ------------------------------------------------------------------ studies.multihop
MULTIHOP_KEYS = {"setup", "table", "paired", "train", "runs", "reader"}  # before --seeds


def test_multihop_bench_two_seeds(tmp_path, capsys):
    out = str(tmp_path / "mh")
    kw = dict(steps=2, batch=8, num_questions=80, beam_size=4, hop2_k=4, reader=False,
              model="tiny")
    res = multihop_bench.run_seeds(out, [0, 1], **kw)
    assert res["seeds"] == [0, 1]
    for name in ("mdr", "mdr-eadpr", "mdr_seed1", "mdr-eadpr_seed1", "data"):
        assert os.path.isdir(os.path.join(out, name)), name
    assert not os.path.exists(os.path.join(out, "mdr_seed0"))
    per = {r["seed"]: r for r in res["per_seed"]}
    for seed, suffix in ((0, ""), (1, "_seed1")):
        saved = json.load(open(os.path.join(out, f"bench_multihop{suffix}.json")))
        assert set(saved) == MULTIHOP_KEYS | {"seed", "figures", "stamp"} and saved["seed"] == seed
        # Stamped (issue 50): the commit, the dirty flag, each run's start and end.
        assert set(saved["stamp"]["runs"]) == {"mdr", "mdr-eadpr"}
        assert all(t["started"] <= t["finished"] for t in saved["stamp"]["runs"].values())
        assert saved["runs"]["mdr"].startswith(os.path.join(out, f"mdr{suffix}", ""))
        md = open(os.path.join(out, f"bench_multihop{suffix}.md")).read()
        assert f"seed {seed}," in md and "## Paired on the same test questions" in md
        assert md == per[seed]["markdown"]
    # Another seed initialises other weights: another loss after the same steps.
    assert per[0]["train"]["mdr"]["loss"] != per[1]["train"]["mdr"]["loss"]

    spread = {r["run"]: r for r in res["seed_spread"]}
    assert list(spread) == ["MDR+DPR", "MDR+EADPR"]
    for run, row in spread.items():
        assert row["seeds"] == 2
        for metric in ("chain R@2", "chain R@10", "AAR hop1", "AAR hop2"):
            assert row[metric] == _cell([per[s]["figures"][run][metric] for s in (0, 1)])
    # A per-seed figure is the table's rate over the test questions.
    rep = json.load(open(os.path.join(per[1]["runs"]["mdr"], "report.json")))
    ranks = rep["per_question"]["chain_rank"]
    assert per[1]["figures"]["MDR+DPR"]["chain R@2"] == pytest.approx(
        100 * np.mean([r is not None and r <= 2 for r in ranks]))
    diff = {r["metric"]: r for r in res["seed_diff"]}
    for metric in ("chain R@2", "AAR hop1"):
        shown = [_shown(next(p for p in per[s]["paired"] if p["metric"] == metric))
                 for s in (0, 1)]
        assert diff[metric]["B − A"] == _cell(shown, signed=True)
    saved = json.load(open(os.path.join(out, "bench_multihop_over_seeds.json")))
    assert saved["seeds"] == [0, 1] and saved["seed_spread"] == res["seed_spread"]
    assert set(saved["stamp"]) == {"commit", "dirty", "written"}  # issue 50
    md = open(os.path.join(out, "bench_multihop_over_seeds.md")).read()
    assert md == res["markdown"] and "## Mean ± std [min, max] over seeds [0, 1]" in md
    assert f"| MDR+EADPR | 2 | {spread['MDR+EADPR']['chain R@2']} |" in md
    assert md in capsys.readouterr().out

    # One seed: the result and files of before (runs reused), no over-seeds table.
    os.remove(os.path.join(out, "bench_multihop_over_seeds.json"))
    one = multihop_bench.run_seeds(out, [0], **kw)
    assert set(one) == MULTIHOP_KEYS | {"seed", "figures", "markdown", "stamp"}
    assert one["figures"] == per[0]["figures"] and one["paired"] == per[0]["paired"]
    assert not os.path.exists(os.path.join(out, "bench_multihop_over_seeds.json"))


# ------------------------------------------------------------------ studies.marginalize
MARGINALIZE_KEYS = {"domains", "summary", "contrast", "contrast_rows", "train_s",
                    "marginalize_s", "total_s", "params", "reports", "stamp"}  # + issue 50's


def test_marginalize_bench_two_seeds(tmp_path):
    out = str(tmp_path / "mg")
    kw = dict(domains=2, steps=2, passages=60, test_questions=12, model="tiny", batch=8,
              ks=(1, 5), verbose=False)
    res = marginalize_bench.run_seeds(out, [0, 1], **kw)
    per = {r["params"]["seed"]: r for r in res["per_seed"]}
    assert per[0]["domains"] == per[1]["domains"] and len(per[0]["domains"]) == 2
    for seed, d in ((0, out), (1, out + "_seed1")):   # studies.replicate's layout
        saved = json.load(open(os.path.join(d, "summary.json")))
        assert set(saved) == MARGINALIZE_KEYS and saved["params"]["seed"] == seed
        assert all(os.path.isdir(os.path.join(d, "runs", n)) for n in per[0]["domains"])
        assert res["summaries"][seed] == os.path.join(d, "summary.json")
    # The seed is the data seed too: each seed's world is its own.
    corpus = [open(os.path.join(d, "data", per[0]["domains"][0], "psgs_synth.tsv")).read()
              for d in (out, out + "_seed1")]
    assert corpus[0] != corpus[1]

    spread = {(r["test_domain"], r["k"]): r for r in res["seed_spread"]}
    assert len(spread) == 2 * 2
    for (domain, k), row in spread.items():
        assert row["seeds"] == 2
        for metric in marginalize_bench.SUMMARY_METRICS:
            values = [next(r[metric] for r in per[s]["summary"]
                           if (r["test_domain"], r["k"]) == (domain, k)) for s in (0, 1)]
            assert row[metric] == _cell(values), (domain, k, metric)
    assert any("±" in row["tandem"] for row in spread.values())
    diff = {r["metric"]: r for r in res["seed_diff"]}
    assert list(diff) == [r["metric"] for r in per[0]["contrast_rows"]]
    for metric, row in diff.items():
        shown = [100 * next(c["diff"] for c in per[s]["contrast"] if c["metric"] == metric)
                 for s in (0, 1)]
        assert row["B − A"] == _cell(shown, signed=True)
    saved = json.load(open(os.path.join(out, "over_seeds.json")))
    assert saved["seed_diff"] == json.loads(json.dumps(res["seed_diff"]))
    md = open(os.path.join(out, "over_seeds.md")).read()
    assert md == res["markdown"] and "## In-domain P − Q over seeds [0, 1]" in md

    # One seed: run_study's result as before, nothing over seeds written.
    os.remove(os.path.join(out, "over_seeds.json"))
    one = marginalize_bench.run_seeds(out, [0], **kw)
    assert set(one) == MARGINALIZE_KEYS
    assert json.dumps(one["summary"]) == json.dumps(per[0]["summary"])  # NaN where tandem is 0
    assert not os.path.exists(os.path.join(out, "over_seeds.json"))


# ------------------------------------------------------------------ studies.data_stats
def test_data_stats_bench_two_seeds(tmp_path):
    out = str(tmp_path / "ds")
    kw = dict(fractions=(0.4, 0.7, 1.0), steps=2, passages=150, test_questions=12,
              model="tiny", batch=8, ks=(1, 5), verbose=False)
    res = data_stats_bench.run_seeds(out, [0, 2], **kw)
    per = {r["params"]["seed"]: r for r in res["per_seed"]}
    for seed, d in ((0, out), (2, out + "_seed2")):
        saved = json.load(open(os.path.join(d, "summary.json")))
        assert saved["params"]["seed"] == seed and "seed_spread" not in saved
        assert sorted(os.listdir(os.path.join(d, "runs"))) == ["frac0.40", "frac0.70",
                                                               "frac1.00"]
    spread = {r["fraction"]: r for r in res["seed_spread"]}
    assert list(spread) == [0.4, 0.7, 1.0]
    for f, row in spread.items():
        for metric in ("examples", "unique coverage", "P marginal top-5", "Q marginal top-1"):
            values = [next(r[metric] for r in per[s]["table"] if r["fraction"] == f)
                      for s in (0, 2)]
            assert row[metric] == _cell(values), (f, metric)
    diff = {r["metric"]: r for r in res["seed_diff"]}
    assert list(diff) == [r["metric"] for r in per[0]["contrast_rows"]]
    for metric, row in diff.items():
        shown = [_shown(next(r for r in per[s]["contrast_rows"] if r["metric"] == metric))
                 for s in (0, 2)]
        assert row["B − A"] == _cell(shown, signed=True), metric   # n/a with a NaN ρ
        assert row["seeds"] == 2
    assert "top-1" in diff and "top-5: ρ(P marginal, unique coverage)" in diff
    md = open(os.path.join(out, "over_seeds.md")).read()
    assert md == res["markdown"] and "## Claim rows over seeds [0, 2]" in md
    assert json.load(open(os.path.join(out, "over_seeds.json")))["seeds"] == [0, 2]

    # One seed: run_study's result as before (runs reused), nothing over seeds written.
    os.remove(os.path.join(out, "over_seeds.json"))
    one = data_stats_bench.run_seeds(out, [0], **kw)
    assert set(one) == set(per[0]) and "seed_spread" not in one
    assert json.dumps(one["table"]) == json.dumps(per[0]["table"])
    assert not os.path.exists(os.path.join(out, "over_seeds.json"))
