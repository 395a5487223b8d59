"""``dense_cf.studies.data_stats``: the per-fraction table and the claim rows from hand-made
statistics and marginalisation ranks (the study end to end is in tests/test_replicate.py)."""

import json
import os

import numpy as np
import pytest

from dense_cf.eval import marginalize as mg
from dense_cf.studies import data_stats


def test_fraction_steps_keep_epochs_equal():
    assert [data_stats.fraction_steps(100, f) for f in data_stats.DEFAULT_FRACTIONS] == [
        10, 25, 40, 70, 100]
    assert data_stats.fraction_steps(2, 0.1) == 1  # never 0 steps
    # The equal-steps control (issue 50): every fraction trains the full set's steps.
    assert {data_stats.fraction_steps(100, f, equal_steps=True)
            for f in data_stats.DEFAULT_FRACTIONS} == {100}
    assert data_stats.fraction_label(0.25) == "frac0.25"


def test_the_report_says_how_the_steps_were_set():
    """The equal-steps report no longer says round(f × steps): a stored summary (seed 1,
    steps scaled, written before the control existed) and the same with ``equal_steps``."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "docs", "results", "data_stats_seed1.json")) as f:
        result = json.load(f)
    assert "equal_steps" not in result["params"]
    assert "100 steps at 100 % (round(f × steps) at fraction f)" in data_stats.markdown(result)
    result["params"]["equal_steps"] = True
    text = data_stats.markdown(result)
    assert "100 steps at every fraction (equal steps)" in text and "round(f" not in text


def _report(firsts, ks, n):
    mats = {k: np.array([[100 * np.mean(mg.pair_hits_at(firsts, i, j, k)) for j in range(n)]
                         for i in range(n)]) for k in ks}
    return {"attribution": {k: mg.attribution(m, n - 1) for k, m in mats.items()},
            "first_hit_rank": firsts}


def test_study_rows_from_hand_made_ranks():
    # 3 fractions, 4 questions; passage encoder 0 (40 %) finds more than 2 (100 %) with
    # question encoder 2, and the P marginal rises with unique coverage.
    fr = [0.4, 0.7, 1.0]
    ranks = {(0, 0): [1, 1, 1, 1], (0, 1): [1, 1, 1, None], (0, 2): [1, None, None, None],
             (1, 0): [1, 1, 1, 1], (1, 1): [1, 1, None, None], (1, 2): [1, None, None, None],
             (2, 0): [1, 1, 1, None], (2, 1): [1, 1, None, None], (2, 2): [1, None, None, None]}
    firsts = {f"{i},{j}": r for (i, j), r in ranks.items()}
    data = [{"questions": 40, "coverage": 30, "overlap": 0.2, "unique_coverage": 22.5},
            {"questions": 70, "coverage": 40, "overlap": 0.5, "unique_coverage": 16.2},
            {"questions": 100, "coverage": 45, "overlap": 0.9, "unique_coverage": 2.3}]
    table, rows = data_stats.study_rows(fr, data, _report(firsts, [1], 3), [1])
    assert [r["examples"] for r in table] == [40, 70, 100]
    # P_j = mean over question encoders i of hit@1(i, j), e.g. P_1 = (3/4 + 2/4 + 2/4) / 3.
    assert [r["P marginal top-1"] for r in table] == pytest.approx([100 * 11 / 12, 175 / 3, 25])
    assert [r["Q marginal top-1"] for r in table] == pytest.approx([200 / 3, 175 / 3, 50])
    assert [r["tandem top-1"] for r in table] == [100, 50, 25]
    by = {r["metric"]: r for r in rows}
    swap = by["top-1"]["stats"]  # P 40 % vs P 100 %, both with Q 100 %: 3/4 vs 1/4 hits
    assert (swap["diff"], swap["b01"], swap["b10"]) == (0.5, 2, 0)
    assert by["top-1"]["P 100 %"].startswith("25.00 [")
    p_trend = by["top-1: ρ(P marginal, unique coverage)"]["stats"]
    q_trend = by["top-1: ρ(Q marginal, #examples)"]["stats"]
    assert p_trend["diff"] == pytest.approx(1.0) and p_trend["p_value"] == pytest.approx(2 / 6)
    assert q_trend["diff"] == pytest.approx(-1.0)
    # Fewer than 3 fractions: the Table 4 rows only (the trend checks are not measured).
    sub = {f"{i},{j}": firsts[f"{2 * i},{2 * j}"] for i in range(2) for j in range(2)}
    _, rows2 = data_stats.study_rows([0.4, 1.0], [data[0], data[2]], _report(sub, [1], 2), [1])
    assert [r["metric"] for r in rows2] == ["top-1"]
