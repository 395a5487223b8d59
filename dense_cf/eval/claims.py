"""Verdicts of a paper's claims on a paired comparison (docs/replication.md, "Method").

A claim is checked on paired rows (``dense_cf.analysis.compare``): each :class:`Check` names a
row by its metric id (``eval.outcomes``) and what the claim expects of B − A. Pure functions; no I/O. The rules,
fixed as data before a run (alpha, the margins in the registry; issue 50 item 2):

* Every check is a two-sided test of a point null B − A = δ0 with a claimed side: δ0 = 0 for
  ``up`` / ``down``; δ0 = −margin for ``not_worse`` (the margin in the units of the row's
  "B − A" column, declared with a one-line reason). The test that decides: Tango's score test
  at δ0 for a binary row (``stats.tango_test``; at δ0 = 0 it is McNemar's / CMH's χ² without
  continuity correction), so the printed 95 % Tango interval is the inversion of the same
  test; the row's own test at 0 for a mean (paired bootstrap) or a rank correlation
  (permutation), a normal approximation from the paired-bootstrap interval at −margin.
* ``reproduced`` is an intersection–union test: every check must reject on its claimed side at
  ``ALPHA``, unadjusted (the claim's error is controlled at α without a correction). So a
  check is ``reproduced`` exactly when its unadjusted 95 % interval excludes δ0 on the claimed
  side.
* ``reversed`` needs only one check, so it is corrected: Holm over the measured checks of one
  claim, p < ``ALPHA`` on the other side of δ0 (for ``not_worse``: B − A significantly below
  −margin).
* Otherwise ``no difference detected`` for ``up`` / ``down`` and ``not reproduced`` for
  ``not_worse`` (its interval reaches −margin, so a loss larger than the margin is not
  excluded).
* Feasibility (``FEASIBLE``): a rate check whose reference run A is at or above 97 % (or at
  or below 3 %) cannot move far enough to test its claim; it is ``uninformative``, not a
  test: left out of Holm and of the claim's word. Over seeds, the first seed's A decides.
* A claim takes its worst check's word, in the order reversed > not reproduced > no difference
  detected > reproduced (``not run`` without a measured check).
* Over several seeds the pooled test (CMH, inverse-variance, stratified permutation) is
  conditional on the trained models and the world; :func:`pool_seed_checks` adds the
  seed-level t-test of the per-seed differences and the sign pattern, :func:`mixed_level` a
  mixed-effects logistic model of the binary checks (``eval.glmm``: item, seed and
  seed × method random), and a claim whose word differs between CMH and either is *fragile*.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Mapping, Sequence

from dense_cf.eval import glmm, outcomes, stats

__all__ = ["ALPHA", "CORRECTION", "EXPECTATIONS", "FEASIBLE", "STATUSES", "UNINFORMATIVE",
           "VERDICTS", "Check", "expand", "infeasible",
           "check_verdict", "claim_verdict", "evaluate_checks", "infer_n", "judge",
           "RATE_MARGIN", "mixed_level", "not_worse", "parse_check_table", "pool_claim",
           "pool_seed_checks", "rejudge", "seed_level", "verdict_text"]

ALPHA = stats.ALPHA
CORRECTION = ("reproduced: intersection–union (every check at alpha, unadjusted); "
              "reversed: Holm within a claim")
EXPECTATIONS = ("up", "down", "not_worse")
# In the order a claim takes its worst check's word (claim_verdict).
VERDICTS = ("reversed", "not reproduced", "no difference detected", "reproduced")
UNINFORMATIVE = "uninformative"
# A rate check is a test only when its reference run A lies strictly inside these bounds (%).
FEASIBLE = (3.0, 97.0)
STATUSES = ("pre-registered", "exploratory")


@dataclasses.dataclass(frozen=True)
class Check:
    """A paired metric, named by its stable id (``eval.outcomes.metric``; a row's ``id``), and
    what the claim expects of B − A: ``up``, ``down`` or ``not_worse``. An id ending in
    ``.by_type`` / ``.by_domain`` (``outcomes.FAMILIES``) stands for one check per such row. A
    ``not_worse`` check needs ``margin`` (> 0, in the units of the row's "B − A" column: points
    for rates) and ``margin_reason``. An unknown id fails here (``KeyError``), so a claim can
    not silently lose its row when a label is re-worded."""

    metric: str
    expect: str = "up"
    margin: float | None = None
    margin_reason: str = ""

    def __post_init__(self) -> None:
        outcomes.family_label(self.metric)  # raises KeyError for an unknown metric id
        if self.expect not in EXPECTATIONS:
            raise ValueError(f"expect must be one of {EXPECTATIONS}, got {self.expect!r}")
        if self.expect == "not_worse" and not (self.margin and self.margin > 0
                                               and self.margin_reason):
            raise ValueError(f"{self.metric}: a not_worse check needs a margin > 0 and a reason")
        if self.expect != "not_worse" and self.margin is not None:
            raise ValueError(f"{self.metric}: only not_worse checks take a margin")

    @property
    def label(self) -> str:
        """The display label of the check's metric (``eval.outcomes``)."""
        return outcomes.family_label(self.metric)

    @property
    def null(self) -> float:
        """δ0, the point null of the check's test (display units)."""
        return -float(self.margin) if self.expect == "not_worse" else 0.0


def check_verdict(diff: float, p_value: float, expect: str, alpha: float = ALPHA,
                  margin: float = 0.0, p_reversed: float | None = None) -> str:
    """The word for one check from B − A (``diff``), the unadjusted two-sided p of its test at
    δ0 (0, or −``margin`` for ``not_worse``; decides ``reproduced``, the intersection–union
    rule) and ``p_reversed``, the Holm-adjusted one (decides ``reversed``; ``p_value`` when
    not given)."""
    if expect not in EXPECTATIONS:
        raise ValueError(f"expect must be one of {EXPECTATIONS}, got {expect!r}")
    delta0 = -float(margin) if expect == "not_worse" else 0.0
    side = (-1.0 if expect == "down" else 1.0) * (diff - delta0)
    p_rev = p_value if p_reversed is None else p_reversed
    if p_value < alpha and side > 0:
        return "reproduced"
    if p_rev < alpha and side < 0:
        return "reversed"
    return "not reproduced" if expect == "not_worse" else "no difference detected"


def claim_verdict(verdicts: Sequence[str]) -> str:
    """The worst check's word (reversed > not reproduced > no difference detected >
    reproduced); ``uninformative`` when every measured check is; ``not run`` without
    measured checks."""
    measured = [v for v in verdicts if v in VERDICTS]
    if not measured:
        return UNINFORMATIVE if UNINFORMATIVE in verdicts else "not run"
    return min(measured, key=VERDICTS.index)


def verdict_text(checks: Sequence[Mapping[str, Any]]) -> str:
    """The claim verdict in words, naming the checks that fall short."""
    v = claim_verdict([c["verdict"] for c in checks])
    tests = [c for c in checks if c["verdict"] != UNINFORMATIVE]
    idle = [c["metric"] for c in checks if c["verdict"] == UNINFORMATIVE]
    note = (f" ({', '.join(idle)} uninformative: reference at the ceiling or floor)"
            if idle and tests else "")
    short = [f"{c['metric']} {c['verdict']}" for c in tests if c["verdict"] != "reproduced"]
    if v == "reproduced" or not short or len(tests) == 1:
        return v + note
    held = sum(c["verdict"] == "reproduced" for c in tests)
    return f"{v}: {held} of {len(tests)} checks hold; " + "; ".join(short) + note


def infeasible(a_rate: float | None) -> bool:
    """Whether a rate check whose reference run scores ``a_rate`` (%) is ``uninformative``
    (:data:`FEASIBLE`)."""
    return a_rate is not None and not FEASIBLE[0] < a_rate < FEASIBLE[1]


def judge(entries: Sequence[dict[str, Any]], checks: Sequence[Check],
          alpha: float = ALPHA) -> list[dict[str, Any]]:
    """Each check's word from its unadjusted p at δ0 (``p_null``: ``reproduced``, the
    intersection–union rule) and the Holm-adjusted one over the measured entries (``p_holm``:
    ``reversed``); entries without ``p_null`` keep their ``verdict`` (``not measured``,
    ``pending``). Returns new dicts with ``p_holm`` and the display cells ``p at δ0`` and
    ``p (Holm)``: the test that decides and its adjusted value."""
    out = [dict(e) for e in entries]
    for e in out:
        if e.get("p_null") is not None and infeasible(e.get("a_rate")):
            e["verdict"] = UNINFORMATIVE
    idx = [i for i, e in enumerate(out)
           if e.get("p_null") is not None and e.get("verdict") != UNINFORMATIVE]
    adjusted = stats.holm([out[i]["p_null"] for i in idx])
    for i, p in zip(idx, adjusted):
        c = checks[i]
        out[i]["p_holm"] = p
        out[i]["p at δ0"] = f"{out[i]['p_null']:.3g}"
        out[i]["p (Holm)"] = f"{p:.3g}"
        out[i]["verdict"] = check_verdict(out[i]["diff_shown"], out[i]["p_null"], c.expect,
                                          alpha, c.margin or 0.0, p_reversed=p)
    return out


def _binary_entry(check: Check, n: int, b01: int, b10: int, scale: float) -> dict[str, Any]:
    """Interval and the p at δ0 of a binary check, in display units: both from Tango's score
    test (the interval is the test inverted), so they agree at every δ0."""
    lo, hi = stats.tango_interval(b01, b10, n)
    p_null = stats.tango_test(b01, b10, n, check.null / scale)["p_value"]
    return {"interval": (scale * lo, scale * hi), "p_null": p_null,
            "null_test": f"Tango score at {check.null:g}",
            "interval_method": "Tango score", "n": int(n), "b01": int(b01), "b10": int(b10)}


def _mean_null_p(diff: float, lo: float, hi: float, delta0: float) -> float:
    """Normal approximation of the two-sided p at ``delta0`` from a 95 % percentile interval
    (the bootstrap draws are not kept with the rows)."""
    se = (hi - lo) / (2 * stats._z(0.95))
    if se <= 0:
        return 1.0 if diff == delta0 else 0.0
    return stats.normal_two_sided_p((diff - delta0) / se)


def evaluate_checks(rows: Sequence[Mapping[str, Any]], checks: Sequence[Check],
                    names: tuple[str, str], alpha: float = ALPHA) -> list[dict[str, Any]]:
    """One entry per check: the row's two figures, B − A with its paired 95 % interval, the
    row's own p at 0 (``p``, ``p_value``: exact McNemar for a binary row), the p of the test
    that decides at the check's null (``p_null``, module docstring), the Holm-adjusted p and
    the verdict (``not measured`` when no row has the check's metric id). Rows are matched by
    their ``id``; an entry's ``metric`` is the id's display label."""
    by_id = {r["id"]: r for r in rows if "id" in r}
    entries = []
    for check in checks:
        r = by_id.get(check.metric)
        base = _base(check)
        if r is None:
            entries.append({**base, "verdict": "not measured"})
            continue
        s, scale = r["stats"], float(r.get("scale", 1.0))
        e = {**base, "A": r[names[0]], "B": r[names[1]], "B − A": r["B − A"],
             "diff": s["diff"], "diff_shown": s["diff"] * scale,
             "p": f"{s['p_value']:.3g}", "p_value": s["p_value"], "test": r["test"]}
        if s.get("kind") == "binary":
            e.update(_binary_entry(check, s["n"], s["b01"], s["b10"], scale),
                     a_rate=scale * s["a"], a_hits=round(s["a"] * s["n"]))
        elif "lo" in s and "hi" in s:
            lo, hi = scale * s["lo"], scale * s["hi"]
            if s.get("kind") == "did":  # a robustness drop (stats.did_test): pooled by counts
                e["did_hist"] = list(s["hist"])
            e.update(interval=(lo, hi), interval_method="paired bootstrap",
                     p_null=s["p_value"] if check.expect != "not_worse"
                     else _mean_null_p(e["diff_shown"], lo, hi, check.null))
        elif check.expect != "not_worse":  # e.g. Spearman's ρ: its own test, no interval
            e.update(p_null=s["p_value"])
            if "x" in s and "y" in s:  # a ρ row's series, for pooling over seeds
                e["series"] = (list(s["x"]), list(s["y"]))
        else:
            e.update(verdict="pending: no interval for a non-inferiority check")
        e["95% CI"] = _fmt_interval(e.get("interval"))
        entries.append(e)
    return judge(entries, checks, alpha)


def _base(check: Check) -> dict[str, Any]:
    """An entry's check fields: the display label (``metric``) and the id."""
    return {"metric": check.label, "id": check.metric, "expect": check.expect,
            "margin": check.margin, "margin_reason": check.margin_reason}


def expand(checks: Sequence[Check], row_ids: Sequence[str], *,
           keep_empty: bool = True) -> list[Check]:
    """A family check (``aar.sentence.by_type``, ``retrieval.top1.by_domain``) becomes one
    check per row id with its prefix (``outcomes.family_prefix``), in row order; with no such
    row it stays itself (``keep_empty``; it is then ``not measured``) or is dropped."""
    out: list[Check] = []
    for check in checks:
        prefix = outcomes.family_prefix(check.metric)
        if prefix is None:
            out.append(check)
            continue
        found = [Check(i, check.expect) for i in row_ids if i.startswith(prefix)]
        out += found or ([check] if keep_empty else [])
    return out


def _fmt_interval(iv: tuple[float, float] | None) -> str:
    return "—" if iv is None else f"[{iv[0]:+.2f}, {iv[1]:+.2f}]"


# --- Re-judging stored results (docs/results/*.md) without retraining -----------------------

_NUM = r"[-−+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"


def _num(text: str) -> float:
    return float(text.replace("−", "-"))


def infer_n(rate: str, max_n: int = 5000, documented: int | None = None) -> int | None:
    """The number of items behind a stored rate cell ``"77.33 [72.27, 81.71]"`` (percent with
    its 95 % Wilson interval, 2 decimals): the unique n <= ``max_n`` with some k such that
    100k/n and the Wilson interval of k/n round to the stored figures. Near 0 % or 100 %
    neighbouring n round alike: then ``documented`` (the report's stated test-set size) is
    taken if it is one of them; else None."""
    m = re.fullmatch(rf"\s*({_NUM})\s*\[({_NUM}),\s*({_NUM})\]\s*", rate)
    if not m:
        return None
    r, lo, hi = (_num(g) for g in m.groups())
    found = []
    for n in range(1, max_n + 1):
        k = round(r * n / 100)
        if not 0 <= k <= n or round(100 * k / n, 2) != round(r, 2):
            continue
        wl, wh = stats.wilson_interval(k, n)
        if abs(100 * wl - lo) <= 0.0051 and abs(100 * wh - hi) <= 0.0051:
            found.append(n)
    if len(found) == 1:
        return found[0]
    return documented if documented in found else None


def parse_check_table(markdown: str) -> list[dict[str, str]]:
    """The rows of a stored markdown table (a claim's checks or a paired comparison) as
    ``{column: cell}`` dicts; non-table lines are ignored."""
    lines = [ln.strip() for ln in markdown.splitlines() if ln.strip().startswith("|")]
    if len(lines) < 2:
        return []
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in ln.strip("|").split("|"))))
            for ln in lines[2:]]


def _stored_entry(row: Mapping[str, str], check: Check, a_col: str, b_col: str,
                  documented_n: int | None = None) -> dict[str, Any]:
    """One stored check row as an entry for :func:`judge` (McNemar rows: Tango interval from
    the discordant counts and n; bootstrap rows: the stored interval)."""
    e: dict[str, Any] = {**_base(check), "A": row.get(a_col, ""),
                         "B": row.get(b_col, ""), "B − A": row["B − A"],
                         "p": row["p"], "test": row["test"]}
    # A Spearman row reads "ρ = +0.700" (studies.replicate) or "+0.700" (the data-stats
    # report), and "+nan" where a series is constant (its test: "constant input", p 1).
    diff = re.match(rf"\s*(?:ρ = )?({_NUM}|[-−+]?nan)\b", row["B − A"])
    if diff is None:
        raise ValueError(f"{check.metric}: B − A {row['B − A']!r} is not a number")
    e["diff_shown"] = _num(diff.group(1))
    p0 = _num(row["p"])
    mc = re.search(r"\((\d+) vs (\d+) discordant\)", row["test"])
    if mc:
        b10, b01 = int(mc.group(1)), int(mc.group(2))
        n = int(row["n"]) if row.get("n", "").isdigit() else (
            infer_n(e["A"], documented=documented_n) or infer_n(e["B"], documented=documented_n))
        if n is None:
            e["verdict"] = "pending: n not recoverable"
        else:
            a_rate = re.match(rf"\s*({_NUM})", e["A"])
            e.update(_binary_entry(check, n, b01, b10, 100.0), n=n,
                     a_rate=_num(a_rate.group(1)) if a_rate else None)
            if a_rate:  # A's hits: the stored rate has 2 decimals, exact for n <= 5000
                e["a_hits"] = round(_num(a_rate.group(1)) * n / 100.0)
            # The stored B − A is rounded: recompute it from the counts.
            e["diff_shown"] = 100.0 * (b01 - b10) / n
    else:
        iv = re.search(rf"\[({_NUM}),\s*({_NUM})\]", row["B − A"])
        hist = re.search(r"d = −2\.\.\+2: (\d+), (\d+), (\d+), (\d+), (\d+)\)", row["test"])
        if hist:  # a robustness drop (replicate.did_rows): its counts pool seeds exactly
            e["did_hist"] = [int(x) for x in hist.groups()]
        if iv:
            lo, hi = _num(iv.group(1)), _num(iv.group(2))
            e.update(interval=(lo, hi), interval_method="paired bootstrap",
                     p_null=p0 if check.expect != "not_worse"
                     else _mean_null_p(e["diff_shown"], lo, hi, check.null))
        elif check.expect != "not_worse":
            e["p_null"] = p0
        else:
            e["verdict"] = "pending: no interval stored"
    e["95% CI"] = _fmt_interval(e.get("interval"))
    return e


def rejudge(rows: Sequence[Mapping[str, str]], checks: Sequence[Check],
            a_col: str = "A", b_col: str = "B", alpha: float = ALPHA,
            documented_n: int | None = None) -> list[dict[str, Any]]:
    """Re-derives the verdicts of stored check rows (:func:`parse_check_table` of a results
    file, each with its metric ``id``) under the current rules and ``checks`` (the registry's,
    with margins): a check's row is the stored row of the same metric id; ``not measured`` when
    there is none. n comes from the row's ``n`` cell or :func:`infer_n` (``documented_n``
    where the rounding is ambiguous)."""
    by_id = {r["id"]: r for r in rows}
    entries = [(_stored_entry(by_id[c.metric], c, a_col, b_col, documented_n)
                if c.metric in by_id
                else {"metric": c.label, "id": c.metric, "expect": c.expect,
                      "verdict": "not measured"})
               for c in checks]
    return judge(entries, checks, alpha)


def pool_seed_checks(per_seed: Sequence[Sequence[Mapping[str, Any]]], checks: Sequence[Check],
                     alpha: float = ALPHA) -> list[dict[str, Any]]:
    """One claim over several training seeds, each check tested once on all seeds: binary
    checks by the pooled McNemar / CMH test over seed strata (``stats.mcnemar_pooled``) with
    Tango's interval on the pooled counts (this treats item × seed pairs as independent:
    the test is exact under H0, the interval ignores the same item's correlation over seeds);
    mean checks by inverse-variance pooling of the seeds' intervals; rank-correlation checks
    (entries with ``series``) by the mean ρ and its stratified permutation test
    (``stats.spearman_pooled``). Then Holm and the words.
    ``per_seed``: for each seed, its entries (:func:`rejudge` / :func:`evaluate_checks`),
    which carry ``n``, ``b01``/``b10`` (or a ``test`` cell) and ``interval``."""
    out = []
    for j, check in enumerate(checks):
        rows = [seed[j] for seed in per_seed]
        e: dict[str, Any] = {**_base(check), "seeds": len(rows)}
        counts = [_counts(r) for r in rows]
        if all(r.get("did_hist") and r.get("interval") for r in rows):
            # A difference-in-differences: the exact sign-flip test over every item of every
            # seed; the interval by inverse-variance pooling of the seeds' bootstrap intervals.
            did = stats.did_pooled([r["did_hist"] for r in rows])
            pm = stats.pooled_mean_diff([r["diff_shown"] for r in rows],
                                        [r["interval"][0] for r in rows],
                                        [r["interval"][1] for r in rows])
            e.update(diff_shown=100.0 * did["diff"], interval=(pm["lo"], pm["hi"]),
                     interval_method="inverse-variance pooled", n=did["n"],
                     test=f"difference-in-differences, exact sign-flip over {len(rows)} seeds",
                     p_null=did["p_value"] if check.expect != "not_worse"
                     else _mean_null_p(100.0 * did["diff"], pm["lo"], pm["hi"], check.null))
        elif all(c is not None for c in counts):
            n = sum(c[0] for c in counts)
            pooled = stats.mcnemar_pooled([c[1] for c in counts], [c[2] for c in counts])
            e.update(_binary_entry(check, n, pooled["b01"], pooled["b10"], 100.0), n=n,
                     test=f"pooled McNemar / CMH over {len(rows)} seeds "
                          f"({pooled['b10']} vs {pooled['b01']} discordant)")
            e["diff_shown"] = 100.0 * (pooled["b01"] - pooled["b10"]) / n
            e["a_rate"] = rows[0].get("a_rate")  # the first seed's reference decides
        elif all(r.get("interval") for r in rows):
            pm = stats.pooled_mean_diff([r["diff_shown"] for r in rows],
                                        [r["interval"][0] for r in rows],
                                        [r["interval"][1] for r in rows])
            e.update(diff_shown=pm["diff"], interval=(pm["lo"], pm["hi"]),
                     interval_method="inverse-variance pooled", test="inverse-variance pooled",
                     p_null=pm["p_value"] if check.expect != "not_worse"
                     else _mean_null_p(pm["diff"], pm["lo"], pm["hi"], check.null))
        elif all(r.get("series") for r in rows):
            sp = stats.spearman_pooled([r["series"][0] for r in rows],
                                       [r["series"][1] for r in rows])
            e.update(diff_shown=sp["rho"], p_null=sp["p_value"],
                     test=f"mean Spearman ρ, {sp['method']}"
                          + (f" ({sp['left_out']} constant left out)" if sp["left_out"] else ""))
        else:
            e["verdict"] = "pending: a seed lacks counts, an interval or a series"
        e["95% CI"] = _fmt_interval(e.get("interval"))
        out.append(e)
    return judge(out, checks, alpha)


def _counts(entry: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """(n, b01, b10) of a binary entry, from its fields or its McNemar ``test`` cell."""
    if entry.get("n") is None:
        return None
    if "b01" in entry and "b10" in entry:
        return int(entry["n"]), int(entry["b01"]), int(entry["b10"])
    m = re.search(r"\((\d+) vs (\d+) discordant\)", str(entry.get("test", "")))
    return (int(entry["n"]), int(m.group(2)), int(m.group(1))) if m else None


def seed_level(per_seed: Sequence[Sequence[Mapping[str, Any]]], checks: Sequence[Check],
               alpha: float = ALPHA) -> list[dict[str, Any]]:
    """The seed-level analysis beside the pooled test: per check, the one-sample t-test of the
    per-seed differences (``diff_shown``: points, raw gaps, ρ) against δ0
    (``stats.seed_level_test``, df = seeds − 1) and their sign pattern; then the same words as
    :func:`judge` (unadjusted for ``reproduced``, Holm for ``reversed``). A check with fewer
    than two measured seeds says ``not measured``. Returns ``{"metric", "expect", "diffs",
    "t", "df", "p_null", "p_holm", "signs", "verdict"}`` per check."""
    out = []
    for j, check in enumerate(checks):
        diffs = [seed[j]["diff_shown"] for seed in per_seed
                 if seed[j].get("diff_shown") is not None and seed[j].get("p_null") is not None]
        e: dict[str, Any] = {"metric": check.label, "id": check.metric, "expect": check.expect,
                             "diffs": diffs, "a_rate": per_seed[0][j].get("a_rate")}
        if len(diffs) < 2 or any(not math.isfinite(d) for d in diffs):
            out.append({**e, "verdict": "not measured"})
            continue
        t = stats.seed_level_test(diffs, check.null)
        out.append({**e, "diff_shown": t["mean"], "t": t["t"], "df": t["df"],
                    "p_null": t["p_value"], "signs": t["signs"]})
    return judge(out, checks, alpha)


# The mixed model's words for checks it does not fit (mixed_level).
NOT_FITTED_NI = "not fitted (not-worse check: seed-level t only)"
NOT_FITTED = "not fitted (no paired counts)"


def _paired_table(entry: Mapping[str, Any]) -> tuple[int, int, int, int] | None:
    """A binary entry's paired 2×2 table (both hit, only A, only B, neither) from ``n``,
    ``b01`` / ``b10`` and ``a_hits``; None without them or when they disagree."""
    counts = _counts(entry)
    a_hits = entry.get("a_hits")
    if counts is None or a_hits is None:
        return None
    n, b01, b10 = counts
    table = (int(a_hits) - b10, b10, b01, n - int(a_hits) - b01)
    return table if min(table) >= 0 else None


def mixed_level(per_seed: Sequence[Sequence[Mapping[str, Any]]], checks: Sequence[Check],
                alpha: float = ALPHA) -> list[dict[str, Any]]:
    """The mixed-effects logistic model beside the pooled test (``glmm.mixed_logit``: item,
    seed and seed × method random effects, fitted to each seed's paired 2×2 table): per
    binary ``up`` / ``down`` check, β (B's log-odds ratio over A) with its Wald interval and
    p at β = 0; then the words of :func:`judge` (the sign of β against the claimed side;
    unadjusted for ``reproduced``, Holm for ``reversed``). Not fitted: ``not_worse`` checks
    (their margin is in points; on the log-odds scale it would depend on the base rate, so
    they keep the seed-level t only) and checks without paired counts at every seed (means,
    ρ, differences-in-differences). An infeasible reference (:func:`infeasible`) is
    ``uninformative`` without a fit. Returns ``{"metric", "id", "expect", "verdict"}`` per
    check, with ``beta``, ``interval``, ``z``, ``p_null``, ``p_holm`` and the fitted σs
    where fitted."""
    out = []
    for j, check in enumerate(checks):
        rows = [seed[j] for seed in per_seed]
        e: dict[str, Any] = {"metric": check.label, "id": check.metric, "expect": check.expect,
                             "a_rate": rows[0].get("a_rate")}
        tables = [_paired_table(r) for r in rows]
        if any(r.get("verdict") == "not measured" for r in rows):
            e["verdict"] = "not measured"
        elif infeasible(e["a_rate"]):
            e["verdict"] = UNINFORMATIVE
        elif check.expect == "not_worse":
            e["verdict"] = NOT_FITTED_NI
        elif any(t is None for t in tables):
            e["verdict"] = NOT_FITTED
        else:
            fit = glmm.mixed_logit(tables)
            e.update(diff_shown=fit["beta"], beta=fit["beta"], z=fit["z"],
                     interval=(fit["lo"], fit["hi"]), p_null=fit["p_value"],
                     sigmas=(fit["sigma_item"], fit["sigma_seed"], fit["sigma_seed_method"]),
                     converged=fit["converged"], separation=fit["separation"])
        out.append(e)
    return judge(out, checks, alpha)


def _mixed_cell(e: Mapping[str, Any]) -> str:
    if "p_holm" not in e:
        return f"{e['metric']}: {e['verdict']}"
    note = "" if e["converged"] else " (the optimiser did not converge)"
    if e["separation"]:
        shown = f"β={'+' if e['beta'] > 0 else '−'}inf (separation; likelihood-ratio p="
    else:
        lo, hi = e["interval"]
        shown = f"β={e['beta']:+.2f} [{lo:+.2f}, {hi:+.2f}] (p="
    return f"{e['metric']} {shown}{e['p_null']:.2g}; Holm p={e['p_holm']:.2g}){note}"


def _mixed_verdict(entries: Sequence[Mapping[str, Any]]) -> str | None:
    """The claim's word under the mixed model, or None when it leaves a measured,
    informative check unfitted (its word would rest on part of the claim)."""
    if any(e["verdict"] in (NOT_FITTED, NOT_FITTED_NI) for e in entries):
        return None
    return claim_verdict([e["verdict"] for e in entries])


def _seed_cell(e: Mapping[str, Any]) -> str:
    if "p_holm" not in e:
        return f"{e['metric']}: {e['verdict']}"
    t = f"{e['t']:+.2f}" if math.isfinite(e["t"]) else ("+inf" if e["t"] > 0 else "−inf")
    return (f"{e['metric']} {e['signs']} t({e['df']})={t} (p={e['p_null']:.2g}; "
            f"Holm p={e['p_holm']:.2g})")


def pool_claim(per_seed: Sequence[Sequence[Mapping[str, Any]]], alpha: float = ALPHA
               ) -> dict[str, Any]:
    """A claim's verdict over several seeds (:func:`pool_seed_checks`), its checks rebuilt
    from the first seed's entries (metric, expect, margin, margin_reason), with the
    seed-level analysis (:func:`seed_level`) and the mixed model (:func:`mixed_level`)
    beside it: ``{"checks", "verdict", "verdict_text", "seed_checks", "seed_verdict",
    "seed_cell", "mixed_checks", "mixed_verdict", "mixed_cell", "fragile"}``.
    ``mixed_verdict`` is None where the model leaves an informative check unfitted.
    ``fragile``: the pooled word differs from the seed-level word or the mixed model's;
    ``verdict_text`` then says which."""
    checks = [Check(e["id"], e["expect"], e.get("margin"), e.get("margin_reason", ""))
              for e in per_seed[0]]
    entries = pool_seed_checks(per_seed, checks, alpha)
    verdict = claim_verdict([e["verdict"] for e in entries])
    seed_checks = seed_level(per_seed, checks, alpha)
    seed_verdict = claim_verdict([e["verdict"] for e in seed_checks])
    mixed_checks = mixed_level(per_seed, checks, alpha)
    mixed_verdict = _mixed_verdict(mixed_checks)
    differ = [f"the {name} says {word}"
              for name, word in (("seed-level t-test", seed_verdict),
                                 ("mixed model", mixed_verdict))
              if word not in (None, "not run", UNINFORMATIVE) and word != verdict]
    text = verdict_text(entries)
    if differ:
        text += f" (*fragile*: {'; '.join(differ)})"
    return {"checks": entries, "verdict": verdict, "verdict_text": text,
            "seed_checks": seed_checks, "seed_verdict": seed_verdict,
            "seed_cell": "; ".join(_seed_cell(e) for e in seed_checks),
            "mixed_checks": mixed_checks, "mixed_verdict": mixed_verdict,
            "mixed_cell": "; ".join(_mixed_cell(e) for e in mixed_checks),
            "fragile": bool(differ)}


# --- Margins of the non-inferiority checks (fixed as data; docs/replication.md "Method") ---

RATE_MARGIN = 2.0
RATE_MARGIN_REASON = ("2 points: about the gains over DPR that PiCL and EADPR report (their "
                      "Table 2: +0.2 to +3.6 points); a larger loss would cancel a typical gain")


def not_worse(metric: str, margin: float = RATE_MARGIN,
              reason: str = RATE_MARGIN_REASON) -> Check:
    """A ``not_worse`` check of metric id ``metric`` with the registry's margin for rates
    (points) unless given."""
    return Check(metric, "not_worse", margin, reason)
