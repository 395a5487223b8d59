"""Verdicts of a paper's claims on a paired comparison (docs/replication.md).

A claim is checked on :func:`dense_cf.eval.compare.compare` rows: each :class:`Check` names a
row (``metric``) and what the claim expects of B − A. Pure functions; no I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from dense_cf.eval import stats

__all__ = ["EXPECTATIONS", "VERDICTS", "Check", "check_verdict", "claim_verdict",
           "evaluate_checks", "verdict_text"]

EXPECTATIONS = ("up", "down", "not_worse")
VERDICTS = ("reproduced", "not significant", "reversed")


@dataclasses.dataclass(frozen=True)
class Check:
    """A paired metric (a row label of ``dense_cf.eval.compare``) and what the claim expects
    of B − A: ``up``, ``down`` or ``not_worse``."""

    metric: str
    expect: str = "up"


def check_verdict(diff: float, p_value: float, expect: str, alpha: float = stats.ALPHA) -> str:
    """``reproduced`` (the expected direction, significant at ``alpha``; for ``not_worse``: no
    significant loss), ``not significant`` or ``reversed`` (significant the other way)."""
    if expect not in EXPECTATIONS:
        raise ValueError(f"expect must be one of {EXPECTATIONS}, got {expect!r}")
    significant = p_value < alpha
    sign = -1.0 if expect == "down" else 1.0
    if significant and sign * diff < 0:
        return "reversed"
    if expect == "not_worse":
        return "reproduced"
    return "reproduced" if significant and sign * diff > 0 else "not significant"


def claim_verdict(verdicts: Sequence[str]) -> str:
    """``reproduced`` when every check is, ``reversed`` when any is, else ``not significant``;
    ``not run`` without checks."""
    if not verdicts:
        return "not run"
    if any(v == "reversed" for v in verdicts):
        return "reversed"
    return "reproduced" if all(v == "reproduced" for v in verdicts) else "not significant"


def verdict_text(checks: Sequence[Mapping[str, Any]]) -> str:
    """The claim verdict in words, naming the checks that fall short."""
    v = claim_verdict([c["verdict"] for c in checks if c["verdict"] in VERDICTS])
    short = [f"{c['metric']} {c['verdict']}" for c in checks if c["verdict"] != "reproduced"]
    if v == "reproduced" or not short or len(checks) == 1:
        return v
    held = sum(c["verdict"] == "reproduced" for c in checks)
    return f"{v}: {held} of {len(checks)} checks hold; " + "; ".join(short)


def evaluate_checks(rows: Sequence[Mapping[str, Any]], checks: Sequence[Check],
                    names: tuple[str, str]) -> list[dict[str, Any]]:
    """One entry per check: the row's two figures, B − A, p (``p`` for display, ``p_value``),
    the test and the verdict (``not measured`` when no row has the check's metric)."""
    by_metric = {r["metric"]: r for r in rows}
    out = []
    for check in checks:
        r = by_metric.get(check.metric)
        if r is None:
            out.append({"metric": check.metric, "expect": check.expect,
                        "verdict": "not measured"})
            continue
        s = r["stats"]
        out.append({"metric": r["metric"], "expect": check.expect, "A": r[names[0]],
                    "B": r[names[1]], "B − A": r["B − A"], "diff": s["diff"],
                    "diff_shown": s["diff"] * r.get("scale", 1.0),  # as "B − A" shows it
                    "p": f"{s['p_value']:.3g}", "p_value": s["p_value"], "test": r["test"],
                    "verdict": check_verdict(s["diff"], s["p_value"], check.expect)})
    return out
