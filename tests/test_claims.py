"""Verdict rules of ``dense_cf.eval.claims`` and their statistics (docs/replication.md,
"Method"): the four words, Holm, the non-inferiority margin, Tango's paired interval, the
pooled-over-seeds test, re-judging stored tables, and the pre-registered registry."""

import math
import os
import re

import numpy as np
import pytest
from scipy import optimize
from scipy import stats as sp_stats

from dense_cf.eval import claims, outcomes, stats
from dense_cf.studies import replicate as rep

PAPERS = os.environ.get("DENSE_CF_PAPERS", "/work/shared/papers")
Z = 1.959963984540054


# --- Tango's score interval / test ---------------------------------------------------------

@pytest.mark.parametrize("n", [10, 300])
def test_tango_interval_without_discordant_pairs_is_closed_form(n):
    # b01 = b10 = 0: q̃ = max(0, −δ), so z(δ) = −sign(δ)·sqrt(n|δ|/(1 − |δ|)) and the
    # bounds solve n|δ|/(1 − |δ|) = z²: ±z²/(n + z²) (hand-derived; 0.27753 for n = 10).
    lo, hi = stats.tango_interval(0, 0, n)
    assert hi == pytest.approx(Z * Z / (n + Z * Z), abs=1e-9) and lo == pytest.approx(-hi)


@pytest.mark.parametrize("b01,b10", [(9, 2), (24, 37), (1, 0), (0, 7)])
def test_tango_score_at_zero_is_mcnemar_and_the_interval_inverts_it(b01, b10):
    n = 300
    assert stats.tango_score_z(b01, b10, n, 0.0) == pytest.approx(
        (b01 - b10) / math.sqrt(b01 + b10))
    lo, hi = stats.tango_interval(b01, b10, n)
    assert lo < (b01 - b10) / n < hi
    assert stats.tango_score_z(b01, b10, n, lo) == pytest.approx(Z, abs=1e-6)
    assert stats.tango_score_z(b01, b10, n, hi) == pytest.approx(-Z, abs=1e-6)


@pytest.mark.parametrize("b01,b10,n,delta", [(9, 2, 300, -0.02), (3, 8, 50, 0.05),
                                              (0, 7, 300, -0.02), (12, 2, 44, 0.1)])
def test_tango_restricted_mle_matches_numerical_maximisation(b01, b10, n, delta):
    # The closed form of q̃ against maximising the constrained multinomial likelihood.
    def nll(q):
        return -(b01 * math.log(q + delta) + b10 * math.log(q)
                 + (n - b01 - b10) * math.log(1 - 2 * q - delta))
    lo_q, hi_q = max(0.0, -delta) + 1e-12, (1 - delta) / 2 - 1e-12
    q_num = optimize.minimize_scalar(nll, bounds=(lo_q, hi_q), method="bounded",
                                     options={"xatol": 1e-12}).x
    assert stats._tango_q(b01, b10, n, delta) == pytest.approx(q_num, abs=1e-6)


def test_non_inferiority_test_agrees_with_the_interval():
    # p < 0.05 at δ0 = −m (z > 0) exactly when the 95 % interval's lower end is above −m.
    for b01, b10 in [(2, 9), (0, 0), (0, 7), (16, 17), (7, 0)]:
        lo, _ = stats.tango_interval(b01, b10, 300)
        t = stats.tango_test(b01, b10, 300, -0.02)
        assert (t["p_value"] < 0.05 and t["z"] > 0) == (lo > -0.02), (b01, b10)


# --- Holm, pooled McNemar / CMH ---------------------------------------------------------------

def test_holm_by_hand():
    # sorted 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 → max(0.06, 0.04) = 0.06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.2]) == [0.2] and stats.holm([]) == []
    assert stats.holm([0.5, 0.5, 0.5]) == [1.0, 1.0, 1.0]


def _cmh_generic(tables):
    """Textbook CMH χ² (no continuity correction) over 2×2 tables [[a, b], [c, d]]."""
    num, var = 0.0, 0.0
    for (a, b), (c, d) in tables:
        n = a + b + c + d
        r1, c1 = a + b, a + c
        num += a - r1 * c1 / n
        var += r1 * (c + d) * c1 * (b + d) / (n * n * (n - 1)) if n > 1 else 0.0
    return num * num / var


def test_pooled_mcnemar_is_cmh_over_item_seed_pairs():
    rng = np.random.default_rng(0)
    b01s, b10s, tables = [], [], []
    for _ in range(3):  # seeds
        a = rng.random(300) < 0.8
        b = rng.random(300) < 0.75
        b01s.append(int((~a & b).sum()))
        b10s.append(int((a & ~b).sum()))
        # One stratum per item: rows = run (A, B), columns = (right, wrong).
        tables += [((int(x), 1 - int(x)), (int(y), 1 - int(y))) for x, y in zip(a, b)]
    pooled = stats.mcnemar_pooled(b01s, b10s)
    assert pooled["chi2"] == pytest.approx(_cmh_generic(tables))
    m = pooled["b01"] + pooled["b10"]
    assert pooled["p_value"] == pytest.approx(
        min(1.0, 2 * sp_stats.binom.cdf(min(pooled["b01"], pooled["b10"]), m, 0.5)))
    assert pooled["p_chi2"] == pytest.approx(sp_stats.chi2.sf(pooled["chi2"], 1))


def test_pooled_mcnemar_of_one_stratum_is_mcnemar():
    a = np.array([1, 1, 0, 0, 1, 0, 1, 1, 0, 0], bool)
    b = np.array([0, 1, 1, 1, 1, 1, 1, 0, 1, 1], bool)
    one = stats.mcnemar_exact(a, b)
    assert stats.mcnemar_pooled([one["b01"]], [one["b10"]])["p_value"] == one["p_value"]


def test_pooled_mean_diff_by_hand():
    # two seeds, se 1 and 1 (interval ±1.96): the mean, se 1/sqrt(2)
    got = stats.pooled_mean_diff([1.0, 3.0], [1 - Z, 3 - Z], [1 + Z, 3 + Z])
    assert got["diff"] == pytest.approx(2.0)
    assert got["hi"] - got["lo"] == pytest.approx(2 * Z / math.sqrt(2))
    assert got["p_value"] == pytest.approx(2 * sp_stats.norm.sf(2.0 * math.sqrt(2)))


# --- The words ---------------------------------------------------------------------------------

@pytest.mark.parametrize("diff,p,expect,margin,word", [
    (5.0, 0.01, "up", 0, "reproduced"), (5.0, 0.2, "up", 0, "no difference detected"),
    (-5.0, 0.01, "up", 0, "reversed"), (-5.0, 0.2, "up", 0, "no difference detected"),
    (-5.0, 0.01, "down", 0, "reproduced"), (5.0, 0.01, "down", 0, "reversed"),
    (5.0, 0.05, "up", 0, "no difference detected"),  # p must be below alpha
    # not_worse: p is the test at −margin; above −margin and significant: non-inferior.
    (0.0, 0.01, "not_worse", 2.0, "reproduced"),
    (-1.0, 0.01, "not_worse", 2.0, "reproduced"),
    (-1.0, 0.3, "not_worse", 2.0, "not reproduced"),   # the interval reaches −2
    (-4.0, 0.01, "not_worse", 2.0, "reversed"),        # significantly below −2
])
def test_check_verdict_words(diff, p, expect, margin, word):
    assert claims.check_verdict(diff, p, expect, margin=margin) == word


def test_claim_verdict_takes_the_worst_word():
    v = claims.claim_verdict
    assert v(["reproduced", "reproduced"]) == "reproduced"
    assert v(["reproduced", "no difference detected"]) == "no difference detected"
    assert v(["no difference detected", "not reproduced"]) == "not reproduced"
    assert v(["reproduced", "reversed", "not reproduced"]) == "reversed"
    assert v(["not measured"]) == v([]) == "not run"


def test_not_worse_needs_a_margin_and_a_reason():
    with pytest.raises(ValueError, match="margin"):
        claims.Check("retrieval.top1", "not_worse")
    with pytest.raises(ValueError, match="margin"):
        claims.Check("retrieval.top1", "not_worse", 2.0)
    with pytest.raises(ValueError, match="only not_worse"):
        claims.Check("retrieval.top1", "up", 2.0)
    assert claims.not_worse("retrieval.top1").null == -claims.RATE_MARGIN


def _rows(a, b, metric="retrieval.top5"):
    """One paired row of metric id ``metric`` (its label from eval.outcomes)."""
    return [{**stats.compare_outcomes(outcomes.metric(metric).label, np.asarray(a, bool),
                                      np.asarray(b, bool), names=("A", "B")), "id": metric}]


@pytest.mark.parametrize("lost,word", [(0, "reproduced"), (7, "not reproduced"),
                                       (30, "reversed")])
def test_non_inferiority_margin_rule(lost, word):
    # 300 items, A right on 270 (90 %: a feasible reference); B loses `lost` of them.
    a = [True] * 270 + [False] * 30
    b = [True] * (270 - lost) + [False] * (30 + lost)
    (e,) = claims.evaluate_checks(_rows(a, b), [claims.not_worse("retrieval.top5")], ("A", "B"))
    lo, hi = e["interval"]
    assert lo < -lost / 3 < hi or lost == 0
    assert e["verdict"] == word
    assert (lo > -2.0) == (word == "reproduced")
    assert (hi < -2.0) == (word == "reversed")


def test_binary_rows_get_a_paired_interval_and_holm():
    a = [True] * 100 + [False] * 100
    b = [True] * 100 + [True] * 7 + [False] * 93   # 7 vs 0 discordant: exact p = 0.0156
    checks = [claims.Check("retrieval.top5"), claims.Check("retrieval.top1")]
    rows = _rows(a, b) + _rows(a, b, "retrieval.top1")
    one = claims.evaluate_checks(rows[:1], checks[:1], ("A", "B"))[0]
    # The row keeps its exact McNemar p; the test that decides is Tango's score test at 0,
    # McNemar's z = 7 / sqrt(7), whose inversion is the printed interval.
    assert one["p_value"] == pytest.approx(0.015625)
    assert one["p_null"] == pytest.approx(2 * sp_stats.norm.sf(math.sqrt(7)))
    assert one["p at δ0"] == f"{one['p_null']:.3g}" and one["verdict"] == "reproduced"
    assert one["interval"] == pytest.approx([100 * x for x in stats.tango_interval(7, 0, 200)])
    assert one["interval"][0] > 0
    two = claims.evaluate_checks(rows, checks, ("A", "B"))
    assert [e["p_holm"] for e in two] == pytest.approx([2 * one["p_null"]] * 2)
    # Reproduced is an intersection–union test: no Holm, so eight such checks all hold ...
    eight = claims.evaluate_checks(rows * 4, checks * 4, ("A", "B"))
    assert {e["verdict"] for e in eight} == {"reproduced"}
    # ... while reversed is Holm-corrected: 8 × 0.0082 > 0.05, no check is reversed.
    down = [claims.Check("retrieval.top5", "down"), claims.Check("retrieval.top1", "down")] * 4
    assert {e["verdict"] for e in claims.evaluate_checks(rows * 4, down, ("A", "B"))} == {
        "no difference detected"}
    assert {e["verdict"] for e in claims.evaluate_checks(rows[:1], down[:1], ("A", "B"))} == {
        "reversed"}


@pytest.mark.parametrize("b01,b10,n", [(7, 1, 300), (12, 3, 300), (0, 9, 200), (30, 18, 900)])
def test_the_deciding_test_and_the_interval_agree(b01, b10, n):
    """Review 3 §2.1 B: an interval that excludes 0 beside "no difference detected" cannot
    happen any more; the check's p at 0 is below 0.05 exactly when Tango's interval excludes 0."""
    a = [True] * b10 + [False] * b01 + [True] * (n - b01 - b10)
    b = [False] * b10 + [True] * b01 + [True] * (n - b01 - b10)
    (e,) = claims.evaluate_checks(_rows(a[:n], b[:n]), [claims.Check("retrieval.top5")], ("A", "B"))
    lo, hi = e["interval"]
    assert (e["p_null"] < 0.05) == (lo > 0 or hi < 0)


def test_infeasible_reference_makes_a_check_uninformative():
    a = [True] * 297 + [False] * 3         # 99 %: at the ceiling
    b = [True] * 300
    (e,) = claims.evaluate_checks(_rows(a, b), [claims.Check("retrieval.top5")], ("A", "B"))
    assert e["verdict"] == claims.UNINFORMATIVE and "p_holm" not in e
    assert claims.claim_verdict([e["verdict"]]) == claims.UNINFORMATIVE
    assert claims.infeasible(3.0) and claims.infeasible(97.0) and not claims.infeasible(50.0)
    mixed = claims.evaluate_checks(_rows(a, b) + _rows([True] * 150 + [False] * 150, b, "retrieval.top1"),
                                   [claims.Check("retrieval.top5"), claims.Check("retrieval.top1")], ("A", "B"))
    # top-1 alone decides (150 vs 0 discordant), without Holm over the uninformative check.
    assert [m["verdict"] for m in mixed] == [claims.UNINFORMATIVE, "reproduced"]
    assert mixed[1]["p_holm"] == mixed[1]["p_null"]
    assert claims.verdict_text(mixed).startswith("reproduced (top-5 uninformative")


def test_seed_level_analysis_and_fragile_verdicts():
    """A pooled CMH verdict that the per-seed differences do not carry is marked fragile."""
    def seed(b01, b10):  # one seed: A 150/300 right; b01 items only B right, b10 only A
        a = [True] * 150 + [False] * 150
        b = ([False] * b10 + [True] * (150 - b10)) + ([True] * b01 + [False] * (150 - b01))
        return claims.evaluate_checks(_rows(a, b), [claims.Check("retrieval.top5")], ("A", "B"))
    steady = claims.pool_claim([seed(20, 5), seed(21, 5), seed(19, 5)])
    assert steady["verdict"] == steady["seed_verdict"] == "reproduced"
    assert not steady["fragile"] and steady["seed_checks"][0]["signs"] == "+++"
    # Pooled 51 vs 15 discordant: CMH says reproduced; the seeds disagree in sign.
    shaky = claims.pool_claim([seed(40, 3), seed(8, 7), seed(3, 5)])
    assert shaky["verdict"] == "reproduced"
    assert shaky["seed_verdict"] == "no difference detected" and shaky["fragile"]
    assert shaky["seed_checks"][0]["signs"] == "++−"
    assert "*fragile*" in shaky["verdict_text"]
    t = stats.seed_level_test([100 * 37 / 300, 100 * 1 / 300, -100 * 2 / 300])
    assert shaky["seed_checks"][0]["p_null"] == pytest.approx(t["p_value"])
    # The mixed-effects logistic model (eval.glmm) sits beside both: the steady seeds hold
    # under it; the shaky ones' seed × method variance leaves β not significant.
    assert steady["mixed_verdict"] == "reproduced" and "β=+1.39" in steady["mixed_cell"]
    assert shaky["mixed_verdict"] == "no difference detected"
    assert shaky["mixed_checks"][0]["beta"] > 0 and shaky["mixed_checks"][0]["p_null"] > 0.05
    assert ("the seed-level t-test says no difference detected; the mixed model says no "
            "difference detected") in shaky["verdict_text"]


def test_mixed_model_leaves_not_worse_and_non_binary_checks_unfitted():
    """A margin in points has no single log-odds value, so a not-worse check keeps the
    seed-level t only; the claim then has no mixed-model word and cannot be fragile by it."""
    a = [True] * 150 + [False] * 150
    b = [False] * 5 + [True] * 145 + [True] * 20 + [False] * 130
    checks = [claims.Check("retrieval.top5"), claims.not_worse("retrieval.top1")]

    def seed():
        return claims.evaluate_checks(_rows(a, b) + _rows(a, b, "retrieval.top1"), checks,
                                      ("A", "B"))
    pooled = claims.pool_claim([seed(), seed()])
    words = [e["verdict"] for e in pooled["mixed_checks"]]
    assert words == ["reproduced", claims.NOT_FITTED_NI]
    assert pooled["mixed_verdict"] is None and "not-worse check" in pooled["mixed_cell"]
    # Stored rows carry A's rate, not A's hits: the table is rebuilt from it and n.
    e = seed()[0]
    assert claims._paired_table(e) == (145, 5, 20, 130)
    assert claims._paired_table({**e, "a_hits": None}) is None


# --- Re-judging stored results ------------------------------------------------------------------

# A stored claim table (docs/results), its rows keyed by metric id as in a rows sibling.
_STORED = """
| id | expect | A | B | B − A | test | p |
|---|---|---|---|---|---|---|
| retrieval.top1 | nw | 52.33 [46.69, 57.92] | 56.00 [50.34, 61.51] | +3.67 | McNemar (24 vs 35 discordant) | 0.192 |
| retrieval.top5 | nw | 99.33 [97.60, 99.82] | 97.00 [94.40, 98.41] | -2.33 | McNemar (7 vs 0 discordant) | 0.0156 |
| aar.sentence.gap | up | 0.5 [0.4, 0.6] | 6.8 [6.5, 7.1] | +6.2738 [5.9842, 6.5786] | paired bootstrap | 0.0002 |
"""


def test_infer_n_from_a_stored_rate_and_its_wilson_interval():
    assert claims.infer_n("99.33 [97.60, 99.82]") == 300
    assert claims.infer_n("45.67 [40.12, 51.32]") == 300   # 137/300 (review §1)
    assert claims.infer_n("98.11 [90.06, 99.67]") == 53       # 52/53 (AAR, "how")
    assert claims.infer_n("100.00 [93.24, 100.00]") == 53
    assert claims.infer_n("not a rate") is None
    # 300/300 and 301/301 round alike: only the report's documented size decides.
    assert claims.infer_n("100.00 [98.74, 100.00]") is None
    assert claims.infer_n("100.00 [98.74, 100.00]", documented=300) == 300
    assert claims.infer_n("100.00 [98.74, 100.00]", documented=200) is None


def test_rejudge_stored_rows():
    rows = claims.parse_check_table(_STORED)
    checks = [claims.not_worse("retrieval.top1"), claims.not_worse("retrieval.top5"),
              claims.Check("aar.sentence.gap"), claims.Check("aar.sentence")]
    got = claims.rejudge(rows, checks)
    # top-1: the 95 % interval [−1.38, +8.80] clears −2 (p at −2 = 0.0285): reproduced, with
    # no Holm (intersection–union). top-5: A at 99.33 % is at the ceiling: uninformative.
    assert [g["verdict"] for g in got] == ["reproduced", "uninformative", "reproduced",
                                          "not measured"]
    assert got[0]["interval"][0] == pytest.approx(-1.3849, abs=1e-4)
    assert got[0]["p_null"] == pytest.approx(0.0285, abs=1e-4)
    # Holm over the 2 tests: the gap (p 0.0002) first, top-1 second (× 1).
    assert got[0]["p_holm"] == pytest.approx(got[0]["p_null"])
    assert got[1]["n"] == 300 and got[1]["diff_shown"] == pytest.approx(-7 / 3)
    assert got[1]["interval"] == pytest.approx([100 * x for x in stats.tango_interval(0, 7, 300)])
    assert got[2]["interval"] == (5.9842, 6.5786)
    # A's hits from its stored rate (2 decimals: exact for n <= 5000): 52.33 % of 300 = 157,
    # so the paired table (both, only A, only B, neither) the mixed model fits is whole.
    assert got[0]["a_hits"] == 157
    assert claims._paired_table(got[0]) == (157 - 24, 24, 35, 300 - 157 - 35)


def test_rejudge_reads_spearman_rows_in_both_spellings():
    """A stored ρ row is "ρ = +0.700" in studies.replicate's tables and "+0.700" in the
    data-stats report's; a constant series stores "+nan" (its test: constant input, p 1)."""
    check = claims.Check("attribution.rho.top5.p_coverage")
    row = {"id": check.metric, "test": "Spearman, exact permutation (120 orderings)"}
    for cell, p, shown in (("ρ = +0.700", "0.233", 0.7), ("−0.700", "0.9", -0.7)):
        got = claims.rejudge([{**row, "B − A": cell, "p": p}], [check])[0]
        assert got["diff_shown"] == pytest.approx(shown) and got["p_null"] == float(p)
    flat = claims.rejudge([{**row, "B − A": "+nan", "p": "1", "test": "Spearman, constant "
                            "input"}], [check])[0]
    assert math.isnan(flat["diff_shown"]) and flat["verdict"] == "no difference detected"
    with pytest.raises(ValueError, match="p_coverage: B − A 'n/a' is not a number"):
        claims.rejudge([{**row, "B − A": "n/a", "p": "1"}], [check])


def test_pool_seed_checks_pools_counts_and_intervals():
    rows = claims.parse_check_table(_STORED)
    checks = [claims.not_worse("retrieval.top5"), claims.Check("aar.sentence.gap")]
    seed = claims.rejudge(rows, checks)
    pooled = claims.pool_seed_checks([seed, seed, seed], checks)
    assert pooled[0]["n"] == 900 and pooled[0]["b10"] == 21 and pooled[0]["b01"] == 0
    assert pooled[0]["diff_shown"] == pytest.approx(-7 / 3)
    assert pooled[1]["diff_shown"] == pytest.approx(6.2738)
    assert pooled[1]["interval"][1] - pooled[1]["interval"][0] == pytest.approx(
        (6.5786 - 5.9842) / math.sqrt(3))
    assert claims.pool_claim([seed, seed])["verdict"] in claims.VERDICTS


# --- The registry (pre-registration) ---------------------------------------------------------

_PAPER_FILE = {"PiCL": "picl", "EADPR": "eadpr", "DCSR": "dcsr",
               "Encoder attribution": "encoder_attribution"}


def test_every_claim_is_registered_with_its_fields():
    for c in rep.CLAIMS:
        assert c.quote and c.where and c.setting and c.seeds, c.id
        assert c.status in claims.STATUSES, c.id
        assert c.paper.split(" (")[0] in _PAPER_FILE, c.id
    exploratory = {c.id for c in rep.CLAIMS if c.status == "exploratory"}
    assert {"picl-h0", "eadpr-h0", "dcsr-mixed", "eadpr-pseudo", "dcsr-init"} <= exploratory
    assert "UnifiedQA-T5" in next(c.claim for c in rep.CLAIMS if c.id == "eadpr-pseudo")
    cpp = next(c for c in rep.CLAIMS if c.id == "picl-ablation-cpp")
    assert [k.expect for k in cpp.checks] == ["down"]  # Table 4: below DPR


def test_every_not_worse_check_has_a_margin_and_reason():
    checks = [k for c in rep.CLAIMS for k in c.checks if k.expect == "not_worse"]
    assert checks
    for k in checks:
        assert k.margin and k.margin > 0 and len(k.margin_reason) > 10


@pytest.mark.skipif(not os.path.isdir(PAPERS),
                    reason=f"the papers' text ({PAPERS}) is outside the repository; the "
                           "quotes are checked where it is present")
def test_every_quote_is_verbatim_in_its_paper():
    def norm(t):
        return re.sub(r"\s+", " ", t).strip()
    texts = {}
    for c in rep.CLAIMS:
        name = _PAPER_FILE[c.paper.split(" (")[0]]
        if name not in texts:
            with open(os.path.join(PAPERS, f"{name}.txt"), encoding="utf-8") as f:
                texts[name] = norm(f.read())
        assert norm(c.quote) in texts[name], c.id


def test_pool_seed_checks_pools_rank_correlations_by_their_series():
    from dense_cf.eval import marginalize as mg
    x = [100, 250, 400, 700, 1000]
    seeds = [[10, 20, 30, 50, 40], [1, 2, 3, 4, 5], [3, 1, 2, 5, 4]]
    rho = "attribution.rho.top5.p_coverage"
    check = [claims.Check(rho)]
    per_seed = [claims.evaluate_checks([mg.trend_row(rho, x, y, ("A", "B"), ("x", "y"))],
                                       check, ("A", "B")) for y in seeds]
    assert per_seed[0][0]["series"] == ([float(v) for v in x], [10.0, 20.0, 30.0, 50.0, 40.0])
    pooled = claims.pool_seed_checks(per_seed, check)[0]
    want = stats.spearman_pooled([x] * 3, seeds)
    assert pooled["diff_shown"] == pytest.approx(want["rho"]) and pooled["seeds"] == 3
    assert pooled["p_null"] == pytest.approx(want["p_value"])
    assert pooled["verdict"] == ("reproduced" if want["p_value"] < 0.05 else
                                 "no difference detected")
    assert "stratified exact permutation over 3 strata" in pooled["test"]
    # Without the series (a stored ρ row) the pooled check says what it lacks.
    bare = [[{k: v for k, v in e.items() if k != "series"} for e in s] for s in per_seed]
    assert claims.pool_seed_checks(bare, check)[0]["verdict"].startswith("pending")
