"""Paired comparison of two evaluated runs from their saved per-item outcomes (issues 16, 48).

``python -m dense_cf.cli.compare RUN_A RUN_B [--step_a N] [--step_b N]``. ``RUN`` is a run
directory (its latest ``eval/step_N``, or ``--step_*``) or an eval directory itself
(``.../eval/step_N``, or a ``corpora/<name>/eval/step_N`` of another corpus).

Every metric both runs saved is compared, on the items both evaluated: ``eval.outcomes`` reads
the outcomes and pairs the items (questions by text, runs on different question sets refused;
AAR triplets by gold record; robustness at the largest distractor count both runs evaluated;
docs/reports.md). A rate (top-k hits, AAR / AA outcomes, EM) gets the exact McNemar test, a mean
(MRR, the mean score gap, F1) a paired bootstrap. Each run's own figures over the paired items
carry 95 % intervals (Wilson for rates, percentile bootstrap for means); every row says whether
B − A is significant at 0.05.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dense_cf.eval import outcomes as outcomes_lib
from dense_cf.eval import report as report_lib
from dense_cf.eval import stats
from dense_cf.eval.aar_math import QUESTION_TYPES
from dense_cf.eval.outcomes import RunOutcomes
from dense_cf.text.answers import question_type

__all__ = ["aar_by_type_rows", "compare", "compare_outcome_sets", "load_outcomes", "markdown"]

load_outcomes = outcomes_lib.read  # one run's saved outcomes (the name callers know)


def compare_outcome_sets(a: RunOutcomes, b: RunOutcomes, *, seed: int = 0,
                         n_resamples: int = stats.DEFAULT_RESAMPLES,
                         names: tuple[str, str] | None = None) -> dict[str, Any]:
    """Paired rows (``stats.compare_outcomes``, each with its metric ``id``) for every metric
    both runs saved, and notes on the pairing. Raises ``ValueError`` when the runs' items
    cannot be paired (``outcomes.pair``)."""
    names = names or (f"A: {a.label}", f"B: {b.label}")
    paired, notes = outcomes_lib.pair(a, b)
    rows = []
    for p in paired:
        m = p.metric
        row = stats.compare_outcomes(m.label, p.a, p.b, kind=outcomes_lib.TESTS[m.kind],
                                     scale=m.scale, digits=m.digits, seed=seed,
                                     n_resamples=n_resamples, names=names)
        rows.append({**row, "id": m.id})
    return {"a": a.label, "b": b.label, "a_dir": a.eval_dir, "b_dir": b.eval_dir,
            "names": list(names), "rows": rows, "notes": notes, "seed": seed,
            "n_resamples": n_resamples}


def aar_by_type_rows(a: RunOutcomes, b: RunOutcomes, strategy: str = "sentence", *,
                     seed: int = 0, n_resamples: int = stats.DEFAULT_RESAMPLES,
                     names: tuple[str, str] = ("A", "B")) -> list[dict[str, Any]]:
    """Paired AAR rows per question type (PiCL Table 6; ``question_type``; ids
    ``aar.<strategy>.type.<type>``), exact McNemar on
    the triplets of each type both runs scored; ``[]`` when either run lacks the strategy's
    per-triplet scores or their question texts."""
    sa, sb = a.aar.get(strategy), b.aar.get(strategy)
    if not sa or not sb or sa["questions"] is None or sb["questions"] is None:
        return []
    _, ia, ib = np.intersect1d(sa["gold_index"], sb["gold_index"], return_indices=True)
    types = np.array([question_type(sa["questions"][i]) for i in ia], dtype=object)
    aware_a = sa["pos"][ia] > sa["cf"][ia]
    aware_b = sb["pos"][ib] > sb["cf"][ib]
    rows = []
    for t in QUESTION_TYPES:
        sel = types == t
        if sel.any():
            m = outcomes_lib.metric(f"aar.{strategy}.type.{t}")
            rows.append({**stats.compare_outcomes(m.label, aware_a[sel], aware_b[sel], seed=seed,
                                                  n_resamples=n_resamples, names=names),
                         "id": m.id})
    return rows


def markdown(result: dict[str, Any], title: bool = True) -> str:
    """The paired table, one sentence per row on significance, the pairing notes."""
    na, nb = result["names"]
    cols = ["metric", "n", na, nb, "B − A", "test", "p",
            f"significant at {stats.ALPHA:g}"]
    parts = []
    if title:
        parts.append(f"# Paired comparison: {na} vs {nb}\n\nA: `{result['a_dir']}`  \n"
                     f"B: `{result['b_dir']}`")
    parts.append(report_lib.markdown_table(result["rows"], cols))
    parts.append("\n".join(f"- {r['sentence']}" for r in result["rows"]))
    parts.append(
        "Figures over the paired items with 95 % intervals (Wilson for rates, percentile "
        f"bootstrap for means, {result['n_resamples']} resamples, seed {result['seed']}); "
        "B − A for means with its paired-bootstrap 95 % interval; McNemar counts are "
        "(only A right) vs (only B right).\n\n" + "\n".join(f"- {n}" for n in result["notes"]))
    return "\n\n".join(parts) + "\n"


def compare(run_a: str, run_b: str, *, step_a: int | None = None, step_b: int | None = None,
            seed: int = 0, n_resamples: int = stats.DEFAULT_RESAMPLES,
            names: tuple[str, str] | None = None, verbose: bool = True) -> dict[str, Any]:
    """Loads both runs' per-item outcomes, pairs them and returns ``compare_outcome_sets``'s
    result with its ``markdown`` (printed unless ``verbose=False``)."""
    result = compare_outcome_sets(outcomes_lib.read(run_a, step_a),
                                  outcomes_lib.read(run_b, step_b),
                                  seed=seed, n_resamples=n_resamples, names=names)
    result["markdown"] = markdown(result)
    if verbose:
        print(result["markdown"])
    return result
