"""Report statistics (dense_cf/eval/stats.py), paired comparison of saved per-item outcomes
(dense_cf/eval/compare.py, the compare binary) and the demo report's interval and paired
columns, all on hand-made data (no training; tests/test_compare_e2e.py compares trained runs)."""

import itertools
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import compare_pairs

from dense_cf.analysis import compare as compare_lib
from dense_cf.eval import stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _paired(b01, b10, both=3, neither=2):
    """Outcome vectors with the given discordant counts (b01: only B right, b10: only A)."""
    a = [False] * b01 + [True] * b10 + [True] * both + [False] * neither
    b = [True] * b01 + [False] * b10 + [True] * both + [False] * neither
    return np.array(a), np.array(b)


# ---- McNemar (exact) ----

@pytest.mark.parametrize("b01,b10,p", [
    (0, 6, 2 * 0.5 ** 6),                     # 0.03125
    (6, 0, 2 * 0.5 ** 6),
    (1, 5, 2 * (1 + 6) / 64),                 # 0.21875
    (2, 8, 2 * (1 + 10 + 45) / 1024),         # 0.109375
    (3, 3, 1.0),                              # capped at 1
    (0, 0, 1.0),                              # no discordant pair
    (0, 1, 1.0),
])
def test_mcnemar_exact_hand_computed(b01, b10, p):
    a, b = _paired(b01, b10)
    r = stats.mcnemar_exact(a, b)
    assert (r["b01"], r["b10"], r["n"]) == (b01, b10, len(a))
    assert r["p_value"] == pytest.approx(p, abs=1e-12)


def test_mcnemar_rejects_unpaired():
    with pytest.raises(ValueError):
        stats.mcnemar_exact([True, False], [True])


# ---- Wilson ----

def _wilson_formula(k, n, z=1.959963984540054):
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.mark.parametrize("k,n", [(8, 10), (0, 10), (10, 10), (1, 3), (512, 1000)])
def test_wilson_interval(k, n):
    lo, hi = stats.wilson_interval(k, n)
    want = _wilson_formula(k, n)
    assert lo == pytest.approx(max(0.0, want[0]), abs=1e-12)
    assert hi == pytest.approx(min(1.0, want[1]), abs=1e-12)
    assert 0.0 <= lo <= k / n <= hi <= 1.0


def test_wilson_8_of_10_and_errors():
    lo, hi = stats.wilson_interval(8, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.4902, 0.9433)
    assert stats.wilson_interval(8, 10, conf=0.99)[0] < lo  # wider at 99 %
    assert stats.wilson_interval(0, 10)[0] == 0.0 and stats.wilson_interval(10, 10)[1] == 1.0
    for bad in [(1, 0), (11, 10), (-1, 10)]:
        with pytest.raises(ValueError):
            stats.wilson_interval(*bad)


# ---- bootstrap ----

def test_bootstrap_mean_ci_deterministic_and_contains_mean():
    x = np.random.default_rng(3).normal(1.0, 2.0, size=200)
    r1 = stats.bootstrap_mean_ci(x, seed=7, n_resamples=2000)
    r2 = stats.bootstrap_mean_ci(x, seed=7, n_resamples=2000)
    assert r1 == r2
    assert r1["mean"] == pytest.approx(x.mean())
    assert r1["lo"] < x.mean() < r1["hi"]
    # Close to the normal-theory interval mean ± 1.96 · s/sqrt(n).
    se = x.std(ddof=1) / math.sqrt(len(x))
    assert r1["lo"] == pytest.approx(x.mean() - 1.96 * se, abs=0.1 * se * 1.96 + 0.05)
    assert stats.bootstrap_mean_ci(x, seed=8, n_resamples=2000) != r1
    # Chunked draws give the same answer as long as seed, n and n_resamples are the same.
    assert stats.bootstrap_mean_ci([2.5] * 5, seed=0) == {"mean": 2.5, "lo": 2.5, "hi": 2.5}
    with pytest.raises(ValueError):
        stats.bootstrap_mean_ci([], seed=0)


def test_bootstrap_hand_computed_small_case():
    # x = [0, 1]: every resample mean is 0, 1/2 or 1 with probabilities 1/4, 1/2, 1/4; with
    # 4000 resamples the 2.5 % and 97.5 % quantiles are 0 and 1.
    r = stats.bootstrap_mean_ci([0.0, 1.0], seed=0, n_resamples=4000)
    assert (r["mean"], r["lo"], r["hi"]) == (0.5, 0.0, 1.0)


def test_paired_bootstrap_ci():
    rng = np.random.default_rng(0)
    a = rng.normal(0.0, 1.0, 300)
    b = a + 0.5 + rng.normal(0.0, 0.1, 300)      # B better by 0.5 on every item
    r = stats.paired_bootstrap_ci(a, b, seed=1, n_resamples=2000)
    assert r == stats.paired_bootstrap_ci(a, b, seed=1, n_resamples=2000)
    assert r["diff"] == pytest.approx(b.mean() - a.mean())
    assert 0.45 < r["lo"] < r["diff"] < r["hi"] < 0.55
    assert r["p_value"] == pytest.approx(2 / 2001)  # no resample crosses 0: the floor
    same = stats.paired_bootstrap_ci(a, a, seed=1, n_resamples=500)
    assert (same["diff"], same["lo"], same["hi"], same["p_value"]) == (0.0, 0.0, 0.0, 1.0)
    # A custom statistic (median) goes through the per-resample path.
    med = stats.paired_bootstrap_ci(a, b, stat=np.median, seed=1, n_resamples=300)
    assert med["diff"] == pytest.approx(np.median(b) - np.median(a))
    assert med["lo"] < med["diff"] < med["hi"]
    with pytest.raises(ValueError):
        stats.paired_bootstrap_ci(a, b[:-1], seed=0)


def test_rank_intervals():
    ranks = [1, None, 3, 2, None, 1, 7, 1]
    r = stats.rank_intervals(ranks, [1, 5], n_resamples=1000)
    assert r["top_k_ci"][1] == pytest.approx([100 * x for x in stats.wilson_interval(3, 8)])
    assert r["top_k_ci"][5] == pytest.approx([100 * x for x in stats.wilson_interval(5, 8)])
    mrr = (1 + 1 / 3 + 1 / 2 + 1 + 1 / 7 + 1) / 8
    assert r["mrr_ci"][0] < mrr < r["mrr_ci"][1]


# ---- report rows ----

def test_compare_outcomes_binary_row():
    a, b = _paired(6, 0, both=3, neither=1)  # n = 10: A 3/10, B 9/10
    row = stats.compare_outcomes("top-5", a, b, names=("A: dpr", "B: picl"))
    assert row["n"] == 10
    assert row["A: dpr"] == "30.00 [{:.2f}, {:.2f}]".format(
        *(100 * x for x in stats.wilson_interval(3, 10)))
    assert row["B: picl"].startswith("90.00 [")
    assert row["B − A"] == "+60.00"
    assert row["p"] == "0.0312" and row["significant at 0.05"] == "yes"
    assert "McNemar exact (0 vs 6 discordant)" == row["test"]
    assert row["sentence"] == ("top-5: B: picl is higher than A: dpr by 60 points; the "
                               "difference is significant at 0.05 (McNemar exact, p = 0.0312).")
    a, b = _paired(1, 5)
    row = stats.compare_outcomes("AAR", a, b)
    assert row["significant at 0.05"] == "no" and "not significant at 0.05" in row["sentence"]
    assert row["stats"]["p_value"] == pytest.approx(0.21875)


def test_compare_outcomes_mean_row():
    a = np.array([1.0, 0.5, 0.0, 1 / 3, 1.0, 0.25] * 10)
    row = stats.compare_outcomes("MRR (×100)", a, a + 0.1, kind="mean", scale=100.0,
                                 n_resamples=1000)
    assert row["stats"]["diff"] == pytest.approx(0.1)
    assert row["B − A"] == "+10.00 [10.00, 10.00]"
    assert row["significant at 0.05"] == "yes" and row["test"] == "paired bootstrap"
    tiny = stats.compare_outcomes("gap", a, a + 2e-6, kind="mean", digits=4, n_resamples=100)
    assert tiny["B − A"] == "+2e-06 [2e-06, 2e-06]"
    # Auto kind: floats are means, booleans rates.
    assert stats.compare_outcomes("x", a, a, n_resamples=100)["stats"]["kind"] == "mean"
    assert stats.compare_outcomes("x", a, a, n_resamples=100)["significant at 0.05"] == "no"


# ---- eval.compare on hand-written eval directories ----

def _write_eval(d, method, questions, ranks, aar=None, k=20, step=3, with_questions=True):
    """A run directory with ``eval/step_<step>/`` holding report.json and score files."""
    out = os.path.join(d, "eval", f"step_{step}")
    os.makedirs(out, exist_ok=True)
    rep = {"method": method, "step": step, "k": k, "top_k": {"1": 0.0, "5": 0.0, "20": 0.0},
           "first_hit_rank": ranks}
    if with_questions:
        rep["questions"] = questions
    else:  # a report written before issue 16: the questions come from retrieval.json
        with open(os.path.join(out, "retrieval.json"), "w") as f:
            json.dump([{"question": q, "answers": [], "ctxs": []} for q in questions], f)
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(rep, f)
    for strategy, (pos, cf, gold) in (aar or {}).items():
        np.savez(os.path.join(out, f"aar_scores_{strategy}.npz"), pos=np.asarray(pos),
                 cf=np.asarray(cf), index=np.arange(len(pos)), gold_index=np.asarray(gold),
                 questions=np.asarray([f"q{g}" for g in gold], dtype=str))
    return str(d)


QS = [f"q{i}" for i in range(40)]


@pytest.fixture
def two_runs(tmp_path):
    rng = np.random.default_rng(0)
    ranks_a = [None if i % 4 == 0 else (i % 7) + 1 for i in range(40)]
    ranks_b = [1 if i % 4 == 0 else r for i, r in enumerate(ranks_a)]  # B: 10 more top-1 hits
    pos = rng.normal(0.6, 0.1, 30)
    # A: aware on the first 15 triplets; B aware on all, scored on gold records 0..29 and 35.
    a = _write_eval(tmp_path / "dpr", "dpr", QS, ranks_a, k=20,
                    aar={"sentence": (pos, np.r_[pos[:15] - 0.1, pos[15:] + 0.1], np.arange(30))})
    b = _write_eval(tmp_path / "picl", "picl", QS, ranks_b, k=20, with_questions=False,
                    aar={"sentence": (np.r_[pos, 0.5], np.r_[pos - 0.2, 0.1],
                                      np.r_[np.arange(30), 35])})
    return a, b


def test_compare_two_hand_made_runs(two_runs, tmp_path):
    a, b = two_runs
    res = compare_lib.compare(a, b, n_resamples=1000, verbose=False)
    rows = {r["metric"]: r for r in res["rows"]}
    assert list(rows) == ["top-1", "top-5", "top-20", "MRR (×100)", "AAR",
                          "mean sim(q,p+) − sim(q,p*) (sentence)"]
    assert rows["top-1"]["stats"]["b01"] == 10 and rows["top-1"]["stats"]["b10"] == 0
    assert rows["top-1"]["stats"]["p_value"] == pytest.approx(2 * 0.5 ** 10)
    assert rows["top-1"]["significant at 0.05"] == "yes"
    assert rows["top-20"]["stats"]["b01"] == 10
    aar = rows["AAR"]
    assert aar["n"] == 30 and (aar["stats"]["b01"], aar["stats"]["b10"]) == (15, 0)
    assert aar["stats"]["a"] == pytest.approx(0.5) and aar["stats"]["b"] == 1.0
    assert rows["mean sim(q,p+) − sim(q,p*) (sentence)"]["stats"]["diff"] == pytest.approx(
        0.2 - 0.0, abs=1e-9)
    assert any("30 triplets paired" in n and "1 only in B" in n for n in res["notes"])
    md = res["markdown"]
    assert "| metric | n | A: dpr (step 3) | B: picl (step 3) |" in md
    assert "significant at 0.05" in md and "McNemar exact" in md and "paired bootstrap" in md
    assert "- top-1: B: picl (step 3) is higher than A: dpr (step 3) by 25 points; the " \
           "difference is significant at 0.05" in md
    # The eval directory itself, or an explicit step, works as well.
    again = compare_lib.compare(os.path.join(a, "eval", "step_3"), b, step_b=3,
                                n_resamples=1000, verbose=False)
    assert [r["p"] for r in again["rows"]] == [r["p"] for r in res["rows"]]


def test_compare_pairs_reordered_questions(tmp_path):
    ranks = list(range(1, 11))
    a = _write_eval(tmp_path / "a", "dpr", QS[:10], ranks)
    b = _write_eval(tmp_path / "b", "dpr", QS[:10][::-1], ranks[::-1])
    res = compare_lib.compare(a, b, n_resamples=200, verbose=False)
    for r in res["rows"]:  # the same outcomes once paired by text
        assert r["stats"].get("b01", 0) == 0 and r["stats"].get("b10", 0) == 0
        assert r["significant at 0.05"] == "no"
    assert "10 questions paired (by text)" in res["notes"][0]


def test_compare_refuses_different_question_sets(tmp_path):
    a = _write_eval(tmp_path / "a", "dpr", QS[:10], [1] * 10)
    b = _write_eval(tmp_path / "b", "picl", QS[1:11], [1] * 10)
    with pytest.raises(ValueError, match="different question sets") as e:
        compare_lib.compare(a, b, verbose=False)
    msg = str(e.value)
    assert "\n" not in msg
    assert os.path.join(a, "eval", "step_3", "report.json") in msg
    assert os.path.join(b, "eval", "step_3", "report.json") in msg
    with pytest.raises(FileNotFoundError):
        compare_lib.compare(str(tmp_path / "nothing"), b, verbose=False)


def test_compare_binary_and_alias(two_runs, tmp_path):
    a, b = two_runs
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = tmp_path / "cmp.md"
    r = subprocess.run([sys.executable, "-m", "dense_cf.eval.compare", a, b, "--n_resamples=500",
                        f"--out={out}", f"--json_out={tmp_path / 'cmp.json'}"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "| top-1 |" in r.stdout and "significant at 0.05" in r.stdout
    assert out.read_text().strip() == r.stdout.strip()
    rows = json.loads((tmp_path / "cmp.json").read_text())["rows"]
    assert rows[0]["metric"] == "top-1" and rows[0]["stats"]["b01"] == 10
    c = _write_eval(tmp_path / "other", "picl", QS[5:], [1] * 35)
    r = subprocess.run([sys.executable, "-m", "dense_cf.cli.compare", a, c], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()[-1]
    assert err.startswith("error: ") and "different question sets" in err and a in err and c in err


# ---- the demo report ----

def _summary(step, top_ci=True):
    ret = {"top_k": {1: 40.0, 5: 70.0}, "mrr": 0.5}
    sent = {"aar": 0.75, "score_diff": {"all": {"mean": 0.0123}}}
    if top_ci:
        ret.update(top_k_ci={"1": [30.0, 50.0], "5": [60.0, 78.0]}, mrr_ci=[0.45, 0.55])
        sent.update(aar_ci=[0.7, 0.8], score_diff_ci=[0.01, 0.015])
    return {"step": step, "train": {"train/loss": 1.0}, "dev": {"loss": 2.0},
            "eval": {"retrieval": ret, "aar": {"strategies": {
                "sentence": sent, "answer": {"aar": 0.5, "aar_ci": [0.4, 0.6]}}}}}


def test_demo_report_rows_and_paired_sections(two_runs, tmp_path):
    from dense_cf import demo
    rows = demo.report_rows({"dpr": _summary(3), "picl": _summary(3, top_ci=False)})
    assert rows[0]["top-1 [95% CI]"] == "40.00 [30.00, 50.00]"
    assert rows[0]["top-5 [95% CI]"] == "70.00 [60.00, 78.00]"
    assert rows[0]["MRR [95% CI]"] == "50.00 [45.00, 55.00]"
    assert rows[0]["AAR [95% CI]"] == "75.00 [70.00, 80.00]"
    assert rows[0]["AA score [95% CI]"] == "50.00 [40.00, 60.00]"
    assert rows[0]["mean sim(q,p+) − sim(q,p*) (sentence) [95% CI]"] == "0.0123 [0.0100, 0.0150]"
    assert rows[1]["top-1 [95% CI]"] == 40.0  # no saved interval: the bare figure
    # The paired section reads the two runs' eval directories (workdir/<method>/eval/step_N).
    workdir = os.path.dirname(two_runs[0])
    dirs = {m: os.path.join(workdir, m) for m in ("dpr", "picl", "eadpr")}
    steps = dict.fromkeys(dirs, 3)
    md = demo.paired_sections(compare_pairs(dirs, steps, [("dpr", "picl")]))
    assert md.startswith("## Paired comparison: dpr (A) vs picl (B) on the same test items")
    assert "| metric | n | dpr | picl | B − A | test | p | significant at 0.05 |" in md
    assert "- top-1: picl is higher than dpr by 25 points; the difference is significant" in md
    assert "- AAR: picl is higher than dpr by 50 points; the difference is significant" in md
    missing = demo.paired_sections(compare_pairs(dirs, steps, [("dpr", "eadpr")]))
    assert "not compared" in missing
    # Several seeds: the runs are labelled with their seed (the demo's label).
    md = demo.paired_sections(compare_pairs(dirs, steps, [("dpr", "picl")],
                                            label=lambda n, s: f"{n} (seed {s})"))
    assert "## Paired comparison: dpr (seed 0) (A) vs picl (seed 0) (B)" in md
    numeric = demo.seed_rows({"dpr (seed 0)": _summary(3), "dpr (seed 1)": _summary(3)},
                             {"dpr (seed 0)": ("dpr", 0), "dpr (seed 1)": ("dpr", 1)})
    assert numeric[1] == {"method": "dpr", "seed": 1, "top-1": 40.0, "top-5": 70.0,
                          "MRR": 50.0, "AAR": 75.0, "AA score": 50.0}
    assert stats.seed_table(numeric, ("method",), ("top-1", "AAR"))[0]["AAR"] == \
        "75.00 ± 0.00 [75.00, 75.00]"


def test_demo_untrained_row(tmp_path):
    from dense_cf import demo
    from dense_cf.configs.base import base_config
    from dense_cf.studies import harness
    row = demo.untrained_row(_summary(3)["eval"]["aar"])
    assert row == {"method": demo.UNTRAINED, "steps": 0, "AAR [95% CI]": "75.00 [70.00, 80.00]",
                   "mean sim(q,p+) − sim(q,p*) (sentence) [95% CI]": "0.0123 [0.0100, 0.0150]",
                   "AA score [95% CI]": "50.00 [40.00, 60.00]"}
    cfg = base_config()
    cfg.model.name_or_path = "tiny"  # a random model: no checkpoint worth scoring
    assert harness.untrained_aar(cfg, str(tmp_path)) is None


def test_untrained_aar_is_computed_once_per_world_and_model(tmp_path, monkeypatch):
    """The untrained AAR is cached across work directories by content (checkpoint, data files,
    settings, code): a second demo in another workdir reads it back; another world recomputes."""
    from dense_cf.configs.presets import demo_config
    from dense_cf.studies import harness
    data = tmp_path / "world"
    data.mkdir()
    cfg = demo_config("dpr")
    cfg.data.data_dir = str(data)
    (data / cfg.data.gold_file).write_text('{"data": []}')
    (data / cfg.data.test_file).write_text("q\t['a']\n")
    calls = []

    def fake_aar(workdir, *, run, strategies):
        calls.append(workdir)
        return {"strategies": {"sentence": {"aar": 0.5}}, "out_dir": workdir}

    monkeypatch.setattr(harness, "evaluate_aar", fake_aar)
    monkeypatch.setattr(harness, "pretrained_run", lambda c: None)
    monkeypatch.setenv("DENSE_CF_CACHE", str(tmp_path / "cache"))
    first = harness.untrained_aar(cfg, str(tmp_path / "run1"))
    again = harness.untrained_aar(cfg, str(tmp_path / "run2"))
    assert len(calls) == 1 and first["strategies"] == again["strategies"]
    assert again["cached_from"] == calls[0] and again["cache_file"].startswith(str(tmp_path))
    (data / cfg.data.test_file).write_text("q\t['b']\n")  # another world: recomputed
    harness.untrained_aar(cfg, str(tmp_path / "run3"))
    cfg.model.pooling = "mean"  # another reading of the model: recomputed
    harness.untrained_aar(cfg, str(tmp_path / "run4"))
    monkeypatch.setenv("DENSE_CF_CACHE", "off")
    harness.untrained_aar(cfg, str(tmp_path / "run5"))
    assert len(calls) == 4


def test_demo_compilation_cache_follows_the_cache_root(tmp_path, monkeypatch):
    import jax

    from dense_cf import demo
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.setenv("DENSE_CF_CACHE", "off")
    assert demo.compilation_cache() is None
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/elsewhere")  # the user's choice wins
    assert demo.compilation_cache() == "/elsewhere"
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR")
    monkeypatch.setenv("DENSE_CF_CACHE", str(tmp_path))
    before = jax.config.jax_compilation_cache_dir
    try:
        assert demo.compilation_cache() == str(tmp_path / "jax")
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "jax")
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


def test_demo_stage_table_adds_up_to_the_wall_time():
    from dense_cf import demo
    s = _summary(100)
    s["timing"] = {"train_s": 200.0}
    s["eval"]["wall_s"] = {"retrieval": 60.0, "aar": 20.0, "robustness": 30.0}
    s["eval"]["retrieval"]["timing"] = {"export_s": 50.0}
    rows = demo.stage_rows({"dpr": s}, [("reader: training (300 steps)", 100.0)], wall=500.0)
    assert [(r["stage"], r["seconds"]) for r in rows] == [
        ("dpr: training (100 steps)", 200.0), ("dpr: retrieval export", 50.0),
        ("dpr: retrieval index + search + report", 10.0), ("dpr: AAR", 20.0),
        ("dpr: robustness", 30.0), ("reader: training (300 steps)", 100.0),
        ("other (data generation, restores, comparisons, report)", 90.0)]
    assert sum(r["share of wall (%)"] for r in rows) == pytest.approx(100.0)
    md = demo.stage_section(rows, 500.0)
    assert md.startswith("## Where the time went (this command: 8.3 min wall)")
    assert "| dpr: retrieval export | 50.00 | 10.00 |" in md


# ---- several seeds ----

def test_seed_spread_and_table():
    sp = stats.seed_spread([40.0, 50.0, 60.0])
    assert sp == {"n": 3, "mean": 50.0, "std": 10.0, "min": 40.0, "max": 60.0}
    assert stats.seed_spread([7.0])["std"] == 0.0
    rows = [{"method": "dpr", "seed": 0, "top-1": 40.0, "MRR": 1.0},
            {"method": "picl", "seed": 0, "top-1": 45.0, "MRR": 2.0},
            {"method": "dpr", "seed": 1, "top-1": 50.0, "MRR": 3.0},
            {"method": "picl", "seed": 1, "top-1": 45.0, "MRR": 2.0}]
    table = stats.seed_table(rows, ("method",), ("top-1", "MRR"))
    assert table == [
        {"method": "dpr", "seeds": 2, "top-1": "45.00 ± 7.07 [40.00, 50.00]",
         "MRR": "2.00 ± 1.41 [1.00, 3.00]"},
        {"method": "picl", "seeds": 2, "top-1": "45.00 ± 0.00 [45.00, 45.00]",
         "MRR": "2.00 ± 0.00 [2.00, 2.00]"}]


def test_spearman_test_hand_computed():
    # One adjacent swap of 5 ranks: Σd² = 2, ρ = 1 − 6·2/(5·24) = 0.9. Orderings with |ρ| >= 0.9:
    # the identity and the 4 adjacent swaps, and their 5 mirror images: p = 10/120.
    t = stats.spearman_test([1, 2, 3, 4, 5], [10, 20, 30, 50, 40])
    assert t["rho"] == pytest.approx(0.9) and t["p_value"] == pytest.approx(10 / 120)
    assert t["n"] == 5 and t["method"] == "exact permutation (120 orderings)"
    # Perfect agreement is the smallest p with 5 points: 2/120 (ρ = 1 and ρ = −1).
    assert stats.spearman_test([1, 2, 3, 4, 5], [2, 4, 6, 8, 10])["p_value"] == pytest.approx(2 / 120)
    neg = stats.spearman_test([1, 2, 3, 4, 5], [5, 4, 3, 2, 1])
    assert neg["rho"] == pytest.approx(-1.0) and neg["p_value"] == pytest.approx(2 / 120)
    flat = stats.spearman_test([1, 2, 3], [7, 7, 7])
    assert math.isnan(flat["rho"]) and flat["p_value"] == 1.0
    with pytest.raises(ValueError, match=">= 3"):
        stats.spearman_test([1, 2], [1, 2])


def test_spearman_test_ties_and_many_points_match_scipy():
    from scipy.stats import spearmanr
    x, y = [1, 2, 2, 3, 5, 4], [3, 1, 2, 2, 6, 5]
    assert stats.spearman_test(x, y)["rho"] == pytest.approx(spearmanr(x, y).statistic)
    rng = np.random.default_rng(0)
    x = rng.normal(size=12)
    y = x + rng.normal(size=12)
    t = stats.spearman_test(x, y, n_resamples=2000)
    assert t["rho"] == pytest.approx(spearmanr(x, y).statistic)
    assert t["method"] == "permutation (2000 random orderings)"
    assert t == stats.spearman_test(x, y, n_resamples=2000)  # seeded
    # ρ = 0.43 over 12 points: the permutation p agrees with scipy's t approximation (0.159).
    assert t["p_value"] == pytest.approx(spearmanr(x, y).pvalue, abs=0.02)


def test_spearman_pooled_is_exact_over_strata():
    x = [1, 2, 3, 4, 5]
    one = stats.spearman_pooled([x], [[10, 20, 30, 50, 40]])
    assert one["rho"] == pytest.approx(0.9) and one["p_value"] == pytest.approx(10 / 120)
    # Three perfect strata: only the 2 of 120³ joint orderings with mean ρ = ±1.
    assert stats.spearman_pooled([x] * 3, [x] * 3)["p_value"] == pytest.approx(2 / 120 ** 3)
    # Against brute force over all 120³ joint orderings of three strata.
    ys = [[1, 2, 3, 5, 4], [2, 1, 3, 4, 5], [5, 4, 3, 2, 1]]
    got = stats.spearman_pooled([x] * 3, ys)
    assert got["rhos"] == pytest.approx([0.9, 0.9, -1.0]) and got["rho"] == pytest.approx(0.8 / 3)
    perms = list(itertools.permutations(range(5)))
    nulls = [np.array([stats.spearman_test(x, [y[i] for i in p])["rho"] for p in perms])
             for y in ys]
    mean = (nulls[0][:, None, None] + nulls[1][None, :, None] + nulls[2][None, None, :]) / 3
    assert got["p_value"] == pytest.approx(float((np.abs(mean) >= got["rho"] - 1e-12).mean()))
    assert got["method"] == "stratified exact permutation over 3 strata"


def test_spearman_pooled_leaves_out_constant_strata_and_samples_long_series():
    x = [1, 2, 3, 4, 5]
    got = stats.spearman_pooled([x, x], [[7, 7, 7, 7, 7], x])
    assert got["left_out"] == 1 and got["strata"] == 1
    assert got["p_value"] == pytest.approx(2 / 120)
    assert math.isnan(stats.spearman_pooled([x], [[1, 1, 1, 1, 1]])["rho"])
    rng = np.random.default_rng(1)
    xs = [rng.normal(size=12) for _ in range(2)]
    ys = [v + rng.normal(size=12) for v in xs]
    t = stats.spearman_pooled(xs, ys, n_resamples=2000)
    assert t["method"] == "stratified permutation over 2 strata (2000 random draws)"
    assert t == stats.spearman_pooled(xs, ys, n_resamples=2000)  # seeded
    with pytest.raises(ValueError, match="per stratum"):
        stats.spearman_pooled([x], [x, x])


# --- Seed-level test and the robustness difference-in-differences (issue 50) ---------------

def test_seed_level_test_by_hand():
    got = stats.seed_level_test([-3.33, -6.00, -4.67], delta0=-2.0)
    # mean −4.667, sd 1.335, t = (−4.667 + 2) / (1.335 / sqrt 3) = −3.46, df 2
    assert got["df"] == 2 and got["signs"] == "−−−"
    assert got["t"] == pytest.approx(-3.4595, abs=1e-3)
    # With df = 2 the t distribution has a closed form: two-sided p = 1 − |t| / sqrt(2 + t²).
    t = got["t"]
    assert got["p_value"] == pytest.approx(1 - abs(t) / math.sqrt(2 + t * t))
    same = stats.seed_level_test([1.0, 1.0, 1.0])
    assert same["p_value"] == 0.0 and same["signs"] == "+++"
    assert stats.seed_level_test([0.0, 0.0])["p_value"] == 1.0
    with pytest.raises(ValueError, match="two or more"):
        stats.seed_level_test([1.0])


def _brute_sign_flip(d):
    d = [x for x in d if x]
    obs, hits = abs(sum(d)), 0
    for signs in itertools.product((1, -1), repeat=len(d)):
        hits += abs(sum(s * x for s, x in zip(signs, d))) >= obs
    return hits / 2 ** len(d)


@pytest.mark.parametrize("d", [[1, 1, 1, -1, 0, 2], [2, 2, -1, 0, 0], [1, -1], [2, 2, 2, 2, 1, 1, -2],
                               [0, 0, 0]])
def test_did_sign_flip_p_is_exact(d):
    assert stats.did_sign_flip_p(np.array(d)) == pytest.approx(_brute_sign_flip(d), abs=1e-9)


def test_did_sign_flip_p_of_unit_differences_is_mcnemar():
    d = np.array([1] * 12 + [-1] * 3 + [0] * 50)
    assert stats.did_sign_flip_p(d) == pytest.approx(stats.mcnemar_exact(
        np.array([False] * 12 + [True] * 3 + [True] * 50),
        np.array([True] * 12 + [False] * 3 + [True] * 50))["p_value"])
    with pytest.raises(ValueError, match="paired differences"):
        stats.did_sign_flip_p(np.array([3, 0]))


def test_did_test_drop_not_level():
    """B is better than A by 10 points at K = 0 and at K = 5: the drop is the same, so the
    difference-in-differences is 0 although the K = 5 level differs (review 3 §2.5 A)."""
    n = 100
    a0 = np.array([1] * 60 + [0] * 40)
    b0 = np.array([1] * 70 + [0] * 30)
    a5 = np.array([1] * 20 + [0] * 80)
    b5 = np.array([1] * 30 + [0] * 70)
    same = stats.did_test([a0], [a5], [b0], [b5], n_resamples=2000)
    assert same["diff"] == pytest.approx(0.0) and same["p_value"] == 1.0 and same["n"] == n
    # B keeps 20 more items at K = 5 with the same clean hits: it loses 20 points less.
    b5_robust = np.array([1] * 50 + [0] * 50)
    gain = stats.did_test([a0, a0], [a5, a5], [b0, b0], [b5_robust, b5_robust], n_resamples=2000)
    assert gain["diff"] == pytest.approx(0.2) and gain["n"] == 2 * n
    # 60 items +1, 20 items −1 over the two strata: the exact McNemar p of 60 vs 20.
    assert gain["lo"] <= 0.2 <= gain["hi"]
    assert gain["p_value"] == pytest.approx(2 * _binom_cdf(20, 80))
    assert gain == stats.did_test([a0, a0], [a5, a5], [b0, b0], [b5_robust, b5_robust],
                                  n_resamples=2000)  # seeded
    with pytest.raises(ValueError, match="stratum 0"):
        stats.did_test([a0], [a5[:5]], [b0], [b5])


def _binom_cdf(k: int, m: int) -> float:
    """P[Bin(m, 1/2) <= k], summed by hand."""
    return sum(math.comb(m, i) for i in range(k + 1)) / 2 ** m
