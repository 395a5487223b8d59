"""Intervals and paired tests for evaluation reports (docs/method.md §5/§6; issue 16).

* Single-run figures: :func:`wilson_interval` for rates (top-k accuracy, AAR / AA score) and
  :func:`bootstrap_mean_ci` (percentile bootstrap) for means (MRR, the mean score gap
  sim(q,p+) − sim(q,p*)).
* Two runs on the same items: :func:`mcnemar_exact` for paired binary outcomes (per-question
  top-k hits, per-triplet AAR outcomes) and :func:`paired_bootstrap_ci` for the difference of
  two means (MRR from reciprocal ranks, mean score gaps).
* A trend over a few settings (docs/replication.md, encoder attribution): :func:`spearman_test`,
  Spearman's rank correlation with an exact permutation p-value.
* :func:`compare_outcomes` turns one paired metric into a report row with the run's intervals,
  the test, its p-value and, in words, whether the difference is significant at ``alpha``.

Every bootstrap takes a seed and is deterministic given it. Differences are always B − A.
Pure numpy + scipy.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any, Callable, Sequence

import numpy as np
import scipy  # its subpackages load on first use (scipy.stats: ~1.4 s of CPU); see below

# ``scipy.stats`` and ``scipy.optimize`` are reached as attributes, not imported: every binary
# imports this module (through eval.report), and most compute no statistic.

__all__ = [
    "ALPHA",
    "DEFAULT_RESAMPLES",
    "bootstrap_mean_ci",
    "compare_outcomes",
    "mcnemar_exact",
    "normal_two_sided_p",
    "paired_bootstrap_ci",
    "rank_intervals",
    "seed_diff_table",
    "seed_spread",
    "seed_table",
    "significance_sentence",
    "spearman_pooled", "spearman_test",
    "did_pooled", "did_sign_flip_p", "did_test", "seed_level_test",
    "wilson_interval",
]

ALPHA = 0.05
DEFAULT_RESAMPLES = 10_000
_CHUNK_ELEMENTS = 4_000_000  # resample indices drawn per chunk (bounds memory for large n)


def normal_two_sided_p(z: float) -> float:
    """Two-sided p of a standard-normal statistic ``z``."""
    return float(min(1.0, 2.0 * scipy.stats.norm.sf(abs(z))))


def _exact_mcnemar_p(b01: int, b10: int) -> float:
    """Exact two-sided McNemar p: the binomial test of the discordant counts at 1/2."""
    m = b01 + b10
    return 1.0 if m == 0 else min(1.0, 2.0 * float(scipy.stats.binom.cdf(min(b01, b10), m, 0.5)))


@functools.lru_cache(maxsize=64)  # scipy's ppf costs ~5 ms a call; every interval asks it
def _z(conf: float) -> float:
    if not 0.0 < conf < 1.0:
        raise ValueError(f"conf must lie in (0, 1), got {conf}")
    return float(scipy.stats.norm.ppf(0.5 + conf / 2.0))


def wilson_interval(successes: int, n: int, conf: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial rate ``successes / n`` (fractions in [0, 1]).

    ``(p̂ + z²/2n ± z·sqrt(p̂(1−p̂)/n + z²/4n²)) / (1 + z²/n)``, z the normal quantile of
    ``0.5 + conf/2``. Unlike the normal (Wald) interval it stays inside [0, 1] and is not
    degenerate at 0/n or n/n. ``n == 0`` raises: a rate over nothing has no interval.
    """
    successes, n = int(successes), int(n)
    if n <= 0:
        raise ValueError(f"a rate needs n >= 1 items, got n={n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in [0, n={n}], got {successes}")
    z = _z(conf)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At 0/n and n/n the bound is exactly 0 / 1; rounding must not exclude the estimate.
    lo = 0.0 if successes == 0 else max(0.0, min(p, centre - half))
    hi = 1.0 if successes == n else min(1.0, max(p, centre + half))
    return lo, hi


def mcnemar_exact(a: Any, b: Any) -> dict[str, Any]:
    """Exact (binomial) two-sided McNemar test of two paired binary outcome vectors.

    ``a[i]`` / ``b[i]``: whether run A / run B got item i right. ``b01`` counts items only B got
    right, ``b10`` items only A got right. Under H0 (equal success rates) each of the
    ``b01 + b10`` discordant pairs is B's with probability 1/2, so
    ``p = min(1, 2 · P[Bin(b01 + b10, 1/2) <= min(b01, b10)])``; p = 1 without discordant pairs.
    Returns ``{"b01", "b10", "p_value", "n"}`` (``n``: paired items).
    """
    a = np.asarray(a, dtype=bool)
    b = np.asarray(b, dtype=bool)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"need two 1-D outcome vectors of equal length, got {a.shape} and "
                         f"{b.shape}")
    b01 = int((~a & b).sum())
    b10 = int((a & ~b).sum())
    return {"b01": b01, "b10": b10, "p_value": _exact_mcnemar_p(b01, b10), "n": int(a.size)}


def _as_values(x: Any, name: str = "x") -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"{name}: need a non-empty 1-D array, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name}: values must be finite")
    return x


def _resampled_means(x: np.ndarray, seed: int, n_resamples: int) -> np.ndarray:
    """Means of ``n_resamples`` bootstrap resamples of the rows of ``x`` ([n] or [n, c]),
    drawn in chunks; the draws depend only on ``seed``, ``n`` and ``n_resamples``."""
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    n = x.shape[0]
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_ELEMENTS // n)
    out = []
    for start in range(0, n_resamples, chunk):
        idx = rng.integers(0, n, size=(min(chunk, n_resamples - start), n))
        out.append(x[idx].mean(axis=1))
    return np.concatenate(out)


def _percentiles(values: np.ndarray, conf: float) -> tuple[float, float]:
    _z(conf)  # validates conf
    lo, hi = np.quantile(values, [(1 - conf) / 2, (1 + conf) / 2])
    return float(lo), float(hi)


def bootstrap_mean_ci(x: Any, seed: int = 0, n_resamples: int = DEFAULT_RESAMPLES,
                      conf: float = 0.95) -> dict[str, float]:
    """Percentile bootstrap interval of the mean of ``x``: ``{"mean", "lo", "hi"}``.

    Used for MRR (mean reciprocal rank, 0 for a question without a hit) and the mean score gap
    sim(q,p+) − sim(q,p*). Deterministic given ``seed``.
    """
    x = _as_values(x)
    lo, hi = _percentiles(_resampled_means(x, seed, n_resamples), conf)
    return {"mean": float(x.mean()), "lo": lo, "hi": hi}


def paired_bootstrap_ci(a: Any, b: Any, stat: Callable[[np.ndarray], float] | None = None,
                        seed: int = 0, n_resamples: int = DEFAULT_RESAMPLES,
                        conf: float = 0.95) -> dict[str, float]:
    """Paired bootstrap of ``stat(b) − stat(a)`` over items (the same resampled items for both).

    ``stat`` defaults to the mean (vectorised); any other callable is applied per resample.
    Returns ``{"diff", "lo", "hi", "p_value"}``: the observed difference, its percentile
    interval and a two-sided bootstrap p-value ``min(1, 2 · (1 + min(#[d* <= 0], #[d* >= 0]))
    / (1 + n_resamples))`` over the resampled differences d* (never 0; 1 when every d* is 0,
    e.g. identical runs).
    """
    a = _as_values(a, "a")
    b = _as_values(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"paired values need equal lengths, got {a.size} and {b.size}")
    if stat is None or stat is np.mean:
        diff = float(b.mean() - a.mean())
        d = _resampled_means(b - a, seed, n_resamples)
    else:
        diff = float(stat(b) - stat(a))
        rng = np.random.default_rng(seed)
        d = np.empty(n_resamples)
        for r in range(n_resamples):
            idx = rng.integers(0, a.size, size=a.size)
            d[r] = stat(b[idx]) - stat(a[idx])
    lo, hi = _percentiles(d, conf)
    extreme = min(int((d <= 0).sum()), int((d >= 0).sum()))
    p = min(1.0, 2.0 * (extreme + 1) / (d.size + 1))
    return {"diff": diff, "lo": lo, "hi": hi, "p_value": p}


def rank_intervals(first_hit_rank: Sequence[int | None], ks: Sequence[int], *, seed: int = 0,
                   n_resamples: int = DEFAULT_RESAMPLES, conf: float = 0.95) -> dict[str, Any]:
    """Intervals of one run's retrieval figures from its per-question first-hit ranks (None: no
    hit; docs/method.md §6): ``top_k_ci`` {k: [lo, hi]} in percent (Wilson) and ``mrr_ci``
    [lo, hi] as a fraction (percentile bootstrap over reciprocal ranks, 0 without a hit)."""
    n = len(first_hit_rank)
    top = {int(k): [100 * x for x in wilson_interval(
        sum(1 for r in first_hit_rank if r is not None and r <= k), n, conf)] for k in ks}
    rr = [0.0 if r is None else 1.0 / r for r in first_hit_rank]
    boot = bootstrap_mean_ci(rr, seed=seed, n_resamples=n_resamples, conf=conf)
    return {"top_k_ci": top, "mrr_ci": [boot["lo"], boot["hi"]]}


def seed_spread(values: Any) -> dict[str, float]:
    """Mean and spread of one figure over training seeds: ``{"n", "mean", "std", "min",
    "max"}`` (``std`` the sample standard deviation, ddof=1; 0 for a single seed)."""
    x = _as_values(values, "values")
    return {"n": int(x.size), "mean": float(x.mean()),
            "std": float(x.std(ddof=1)) if x.size > 1 else 0.0,
            "min": float(x.min()), "max": float(x.max())}


def seed_table(rows: Sequence[dict[str, Any]], by: Sequence[str], metrics: Sequence[str],
               digits: int = 2) -> list[dict[str, Any]]:
    """One row per group of ``rows`` (grouped by the ``by`` keys, in first-seen order): the
    number of seeds and, per metric, ``mean ± std [min, max]`` over the group's rows (one row
    per seed; :func:`seed_spread`), or ``n/a`` where a row lacks it or it is not finite (e.g.
    a share of a tandem figure of 0)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in by), []).append(r)
    out = []
    for key, members in groups.items():
        row: dict[str, Any] = dict(zip(by, key))
        row["seeds"] = len(members)
        for m in metrics:
            values = [r.get(m) for r in members]
            if any(v is None or not math.isfinite(float(v)) for v in values):
                row[m] = "n/a"
                continue
            sp = seed_spread(values)
            row[m] = (f"{sp['mean']:.{digits}f} ± {sp['std']:.{digits}f} "
                      f"[{sp['min']:.{digits}f}, {sp['max']:.{digits}f}]")
        out.append(row)
    return out


def seed_diff_table(rows: Sequence[dict[str, Any]], by: Sequence[str] = ("metric",),
                    digits: int = 2, alpha: float = ALPHA) -> list[dict[str, Any]]:
    """One row per group of paired report rows (:func:`compare_outcomes` rows of several seeds,
    or any with ``stats["diff"]``, ``stats["p_value"]`` and optionally ``scale``), grouped by
    the ``by`` keys in first-seen order: the number of seeds, ``B − A`` as ``mean ± std [min,
    max]`` in the units of the rows' "B − A" column (``diff × scale``; :func:`seed_spread`, its
    numbers under ``spread``) and in how many seeds it is significant at ``alpha``; ``n/a``
    where a seed's difference is missing or not finite (ρ of a constant series)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in by), []).append(r)
    out = []
    for key, members in groups.items():
        diffs = [None if m["stats"]["diff"] is None
                 else float(m["stats"]["diff"]) * float(m.get("scale", 1.0)) for m in members]
        ok = all(d is not None and math.isfinite(d) for d in diffs)
        sp = seed_spread(diffs) if ok else None
        row: dict[str, Any] = dict(zip(by, key))
        row["seeds"] = len(members)
        row["B − A"] = (f"{sp['mean']:+.{digits}f} ± {sp['std']:.{digits}f} "
                        f"[{sp['min']:+.{digits}f}, {sp['max']:+.{digits}f}]" if sp else "n/a")
        n_sig = sum(float(m["stats"]["p_value"]) < alpha for m in members)
        row[f"significant at {alpha:g}"] = f"{n_sig} of {len(members)}"
        row["spread"] = sp
        out.append(row)
    return out


_EXACT_MAX_N = 8  # 8! = 40,320 orderings: enumerated; more points: seeded random orderings


def _centred_ranks(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray, float]:
    """Centred ranks of paired ``x``, ``y`` (ties: average ranks) and the norm of their product;
    the norm is 0 when either side is constant."""
    xv, yv = _as_values(x, "x"), _as_values(y, "y")
    if xv.shape != yv.shape or xv.size < 3:
        raise ValueError(f"need two paired 1-D arrays of >= 3 values, got {xv.shape} and "
                         f"{yv.shape}")
    rx, ry = scipy.stats.rankdata(xv), scipy.stats.rankdata(yv)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return rx, ry, math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))


def _orderings(n: int, seed: int, n_resamples: int) -> tuple[np.ndarray, bool]:
    """All n! orderings for n <= 8 (exact), else ``n_resamples`` seeded random ones."""
    if n <= _EXACT_MAX_N:
        return np.array(list(itertools.permutations(range(n)))), True
    rng = np.random.default_rng(seed)
    return np.array([rng.permutation(n) for _ in range(n_resamples)]), False


def spearman_test(x: Any, y: Any, *, seed: int = 0, n_resamples: int = DEFAULT_RESAMPLES
                  ) -> dict[str, Any]:
    """Spearman's rank correlation ρ of paired ``x``, ``y`` and its two-sided permutation p-value.

    ρ is Pearson's correlation of the ranks (ties: average ranks). Under H0 (no association)
    every pairing of the y ranks with the x ranks is equally likely, so
    ``p = #[|ρ*| >= |ρ|] / #orderings`` over all n! orderings of y for n <= 8 (exact), else
    ``(1 + #[|ρ*| >= |ρ|]) / (1 + n_resamples)`` over seeded random orderings. With n = 5 the
    smallest possible p is 2/120 ≈ 0.017, reached only by ρ = ±1: a weak test. Returns
    ``{"rho", "p_value", "n", "method"}``; ρ is NaN and p = 1 when either side is constant.
    """
    rx, ry, denom = _centred_ranks(x, y)
    n = int(rx.size)
    if denom == 0.0:
        return {"rho": float("nan"), "p_value": 1.0, "n": n, "method": "constant input"}
    perms, exact = _orderings(n, seed, n_resamples)
    method = (f"exact permutation ({len(perms)} orderings)" if exact
              else f"permutation ({n_resamples} random orderings)")
    rho = float((rx * ry).sum() / denom)
    null = (ry[perms] * rx).sum(axis=1) / denom
    # Orderings tied with the observed |ρ| count as extreme (float round-off tolerance).
    extreme = int((np.abs(null) >= abs(rho) - 1e-12).sum())
    p = extreme / len(perms) if exact else (1 + extreme) / (1 + len(perms))
    return {"rho": rho, "p_value": min(1.0, p), "n": n, "method": method}


def spearman_pooled(xs: Sequence[Any], ys: Sequence[Any], *, seed: int = 0,
                    n_resamples: int = DEFAULT_RESAMPLES) -> dict[str, Any]:
    """Spearman's ρ over several strata (training seeds), tested once: the statistic is the mean
    of the strata's ρ; under H0 (no association in any stratum) y's ranks are permuted within
    each stratum independently (a stratified permutation test, as CMH is for McNemar).

    Exact when every stratum has <= 8 points: the null of the mean is the convolution of each
    stratum's n!-ordering null (three strata of 5 points: 120³ equally likely combinations).
    Else ``n_resamples`` seeded draws of one random ordering per stratum, p = (1 + #) / (1 + R).
    Two-sided: ``P(|mean ρ*| >= |mean ρ|)``. Strata with a constant side carry no ρ and are
    left out (counted in ``left_out``). Returns ``{"rho" (the mean), "rhos", "p_value",
    "strata", "left_out", "method"}``."""
    if len(xs) != len(ys) or not xs:
        raise ValueError(f"need one x and one y series per stratum, got {len(xs)} and {len(ys)}")
    parts = [_centred_ranks(x, y) for x, y in zip(xs, ys)]
    kept = [(rx, ry, d) for rx, ry, d in parts if d > 0.0]
    left_out = len(parts) - len(kept)
    if not kept:
        return {"rho": float("nan"), "rhos": [], "p_value": 1.0, "strata": 0,
                "left_out": left_out, "method": "constant input in every stratum"}
    rhos = [float((rx * ry).sum() / d) for rx, ry, d in kept]
    k, obs = len(kept), abs(float(np.mean(rhos)))
    if all(rx.size <= _EXACT_MAX_N for rx, _, _ in kept):
        # Distribution of the sum of the strata's ρ*: values (rounded to merge float twins)
        # with their probabilities, convolved stratum by stratum.
        vals, probs = np.zeros(1), np.ones(1)
        for rx, ry, d in kept:
            null = (ry[_orderings(rx.size, seed, n_resamples)[0]] * rx).sum(axis=1) / d
            v, c = np.unique(np.round(null, 12), return_counts=True)
            sums = np.round((vals[:, None] + v[None, :]).ravel(), 12)
            joint = (probs[:, None] * (c / c.sum())[None, :]).ravel()
            vals, inverse = np.unique(sums, return_inverse=True)
            probs = np.bincount(inverse, weights=joint)
        p = float(probs[np.abs(vals) / k >= obs - 1e-12].sum())
        method = f"stratified exact permutation over {k} strata"
    else:
        rng = np.random.default_rng(seed)
        total = np.zeros(n_resamples)
        for rx, ry, d in kept:
            perms = np.array([rng.permutation(rx.size) for _ in range(n_resamples)])
            total += (ry[perms] * rx).sum(axis=1) / d
        extreme = int((np.abs(total) / k >= obs - 1e-12).sum())
        p = (1 + extreme) / (1 + n_resamples)
        method = f"stratified permutation over {k} strata ({n_resamples} random draws)"
    return {"rho": float(np.mean(rhos)), "rhos": rhos, "p_value": min(1.0, p), "strata": k,
            "left_out": left_out, "method": method}


def significance_sentence(metric: str, name_a: str, name_b: str, diff: float, p_value: float,
                          test: str, unit: str = "", alpha: float = ALPHA) -> str:
    """One sentence saying whether B − A on ``metric`` is significant at ``alpha``."""
    verdict = "significant" if p_value < alpha else "not significant"
    if diff == 0:
        return (f"{metric}: {name_a} and {name_b} are equal ({verdict} at {alpha:g}; {test}, "
                f"p = {p_value:.3g}).")
    return (f"{metric}: {name_b} is {'higher' if diff > 0 else 'lower'} than {name_a} by "
            f"{abs(diff):.3g}{unit}; the difference is {verdict} at {alpha:g} ({test}, "
            f"p = {p_value:.3g}).")


def _fmt_ci(value: float, lo: float, hi: float, digits: int, sign: str = "") -> str:
    return f"{value:{sign}.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def compare_outcomes(metric: str, a: Any, b: Any, *, kind: str | None = None,
                     scale: float | None = None, seed: int = 0,
                     n_resamples: int = DEFAULT_RESAMPLES, conf: float = 0.95,
                     alpha: float = ALPHA, names: tuple[str, str] = ("A", "B"),
                     digits: int = 2) -> dict[str, Any]:
    """One report row comparing paired per-item outcomes of runs A and B.

    ``kind="binary"`` (the default for boolean inputs): the rates with Wilson intervals, the
    exact McNemar test. ``kind="mean"``: the means with bootstrap intervals, the paired
    bootstrap interval and p-value of B − A. ``scale`` multiplies the displayed figures (100 for
    rates by default: percent). The row has the display cells (``metric``, ``n``, the two
    ``names``, ``B − A``, ``test``, ``p``, ``significant at 0.05``) and the raw numbers under
    ``stats``; ``sentence`` says in words whether the difference is significant.
    """
    a_arr, b_arr = np.asarray(a), np.asarray(b)
    if a_arr.shape != b_arr.shape or a_arr.ndim != 1 or a_arr.size == 0:
        raise ValueError(f"{metric}: need two non-empty paired 1-D arrays, got {a_arr.shape} "
                         f"and {b_arr.shape}")
    if kind is None:
        kind = "binary" if a_arr.dtype == bool and b_arr.dtype == bool else "mean"
    n = int(a_arr.size)
    na, nb = names
    if na == nb or "B − A" in names:
        raise ValueError(f"names must be two distinct labels other than 'B − A', got {names}")
    if kind == "binary":
        scale = 100.0 if scale is None else scale
        a_b, b_b = a_arr.astype(bool), b_arr.astype(bool)
        ra, rb = float(a_b.mean()), float(b_b.mean())
        ca, cb = wilson_interval(int(a_b.sum()), n, conf), wilson_interval(int(b_b.sum()), n, conf)
        test = mcnemar_exact(a_b, b_b)
        p = test["p_value"]
        diff = rb - ra
        test_cell = f"McNemar exact ({test['b10']} vs {test['b01']} discordant)"
        raw = {"kind": kind, "a": ra, "b": rb, "a_ci": ca, "b_ci": cb, "diff": diff, **test}
        diff_cell = f"{scale * diff:+.{digits}f}"
    elif kind == "mean":
        scale = 1.0 if scale is None else scale
        ba = bootstrap_mean_ci(a_arr, seed, n_resamples, conf)
        bb = bootstrap_mean_ci(b_arr, seed, n_resamples, conf)
        pb = paired_bootstrap_ci(a_arr, b_arr, seed=seed, n_resamples=n_resamples, conf=conf)
        ra, rb, ca, cb = ba["mean"], bb["mean"], (ba["lo"], ba["hi"]), (bb["lo"], bb["hi"])
        p, diff = pb["p_value"], pb["diff"]
        test_cell = "paired bootstrap"
        raw = {"kind": kind, "a": ra, "b": rb, "a_ci": ca, "b_ci": cb, "n": n, **pb}
        d, lo, hi = scale * diff, scale * pb["lo"], scale * pb["hi"]
        if d != 0 and abs(d) < 10 ** -digits:  # too small for ``digits``: 3 significant digits
            diff_cell = f"{d:+.3g} [{lo:.3g}, {hi:.3g}]"
        else:
            diff_cell = _fmt_ci(d, lo, hi, digits, "+")
    else:
        raise ValueError(f"kind must be 'binary' or 'mean', got {kind!r}")
    significant = p < alpha
    unit = " points" if kind == "binary" and scale == 100.0 else ""
    return {"metric": metric, "n": n,
            na: _fmt_ci(scale * ra, scale * ca[0], scale * ca[1], digits),
            nb: _fmt_ci(scale * rb, scale * cb[0], scale * cb[1], digits),
            "B − A": diff_cell, "test": test_cell, "p": f"{p:.3g}",
            f"significant at {alpha:g}": "yes" if significant else "no",
            "sentence": significance_sentence(metric, na, nb, scale * diff, p,
                                              test_cell.split(" (")[0], unit, alpha),
            "stats": raw, "scale": scale}


# --- Verdict statistics (docs/replication.md "Method"; eval.claims) -------------------------

def _tango_q(b01: int, b10: int, n: int, delta: float) -> float:
    """Restricted MLE of P(only A right) under H0: P(only B right) − P(only A right) = delta
    (the root of 2n·q² + W·q − b10·δ(1−δ) = 0, W = −(b01 + b10) + (2n − b01 + b10)·δ)."""
    w = -(b01 + b10) + (2 * n - b01 + b10) * delta
    return (math.sqrt(max(0.0, w * w + 8.0 * n * b10 * delta * (1.0 - delta))) - w) / (4.0 * n)


def tango_score_z(b01: int, b10: int, n: int, delta: float) -> float:
    """Tango's (1998) score statistic for H0: B − A = ``delta`` on paired binary outcomes.

    ``b01``: items only B got right, ``b10``: only A, ``n``: paired items; B − A is the
    difference of the two success rates as a fraction. ``z = (b01 − b10 − n·δ) /
    sqrt(n·(2q̃ + δ(1 − δ)))``, q̃ the restricted MLE of P(only A right) (:func:`_tango_q`).
    At δ = 0 it is McNemar's z, (b01 − b10)/sqrt(b01 + b10). ±inf where the null variance is 0.
    """
    b01, b10, n = int(b01), int(b10), int(n)
    if n <= 0 or b01 < 0 or b10 < 0 or b01 + b10 > n:
        raise ValueError(f"need 0 <= b01 + b10 <= n, n >= 1; got {b01}, {b10}, {n}")
    if not -1.0 <= delta <= 1.0:
        raise ValueError(f"delta must lie in [-1, 1], got {delta}")
    num = b01 - b10 - n * delta
    var = n * (2.0 * _tango_q(b01, b10, n, delta) + delta * (1.0 - delta))
    if var <= 1e-300:
        return 0.0 if abs(num) < 1e-12 else math.copysign(math.inf, num)
    return num / math.sqrt(var)


def tango_test(b01: int, b10: int, n: int, delta: float = 0.0) -> dict[str, float]:
    """Two-sided score test of H0: B − A = ``delta`` (:func:`tango_score_z`):
    ``{"z", "p_value"}``, ``p = 2·(1 − Φ(|z|))``. A non-inferiority check with margin m tests
    δ = −m: p < α with z > 0 is exactly "the (1 − α) Tango interval's lower end is above −m"."""
    z = tango_score_z(b01, b10, n, delta)
    return {"z": z, "p_value": normal_two_sided_p(z)}


def tango_interval(b01: int, b10: int, n: int, conf: float = 0.95) -> tuple[float, float]:
    """Tango's score interval for B − A of paired proportions (fractions): every δ the score
    test of :func:`tango_score_z` does not reject at 1 − ``conf``.

    Chosen for the verdicts (docs/replication.md "Method") because it is the inversion of the
    test the non-inferiority check uses, holds its level near nominal for small discordant
    counts (Tango 1998; Newcombe 1998), and does not collapse to [0, 0] when no pair is
    discordant (Wald and the paired bootstrap do): with b01 = b10 = 0 it is ±z²/(n + z²).
    """
    z = _z(conf)
    d_hat = (int(b01) - int(b10)) / int(n)
    f = lambda d: tango_score_z(b01, b10, n, d)  # noqa: E731 - decreasing in d
    eps = 1e-12

    def root(lo: float, hi: float, target: float) -> float:
        if (f(lo) - target) * (f(hi) - target) > 0:
            return lo if abs(f(lo) - target) < abs(f(hi) - target) else hi
        return float(scipy.optimize.brentq(lambda d: f(d) - target, lo, hi, xtol=1e-12))

    lower = -1.0 if f(-1.0 + eps) <= z else root(-1.0 + eps, d_hat, z)
    upper = 1.0 if f(1.0 - eps) >= -z else root(d_hat, 1.0 - eps, -z)
    return min(lower, d_hat), max(upper, d_hat)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error at α over the family): sort p
    ascending, p̃_(j) = max_{i <= j} min(1, (m − i + 1)·p_(i)); reject H_j when p̃_j < α.
    Returned in the input order."""
    p = [float(x) for x in p_values]
    if any(not 0.0 <= x <= 1.0 for x in p):
        raise ValueError(f"p-values must lie in [0, 1], got {p}")
    m, out, running = len(p), [0.0] * len(p), 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: p[i])):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def mcnemar_pooled(b01: Sequence[int], b10: Sequence[int]) -> dict[str, Any]:
    """Paired binary outcomes over several strata (training seeds): the Cochran–Mantel–Haenszel
    test with one stratum per (item, seed) pair, which reduces to McNemar on the summed
    discordant counts (docs/replication.md "Method").

    Derivation: a stratum is the 2×2 table (run × right/wrong) of one item in one seed. A
    concordant pair has zero variance under H0; a discordant one has E[B right] = 1/2 and
    variance 1/4. So Σ(O − E) = (Σb01 − Σb10)/2, Σvar = (Σb01 + Σb10)/4, and
    χ²_CMH = (Σb01 − Σb10)² / (Σb01 + Σb10) (1 df, no continuity correction). Its exact
    conditional version: each discordant pair is B's with probability 1/2, independently
    across strata (the seeds train independent models), so Σb01 ~ Bin(Σb01 + Σb10, 1/2).
    Returns ``{"b01", "b10", "chi2", "p_chi2", "p_value"}`` (``p_value``: the exact one).
    """
    if len(b01) != len(b10) or not len(b01):
        raise ValueError(f"need one (b01, b10) per stratum, got {len(b01)} and {len(b10)}")
    s01, s10 = int(sum(b01)), int(sum(b10))
    m = s01 + s10
    chi2 = 0.0 if m == 0 else (s01 - s10) ** 2 / m
    return {"b01": s01, "b10": s10, "chi2": chi2, "p_chi2": float(scipy.stats.chi2.sf(chi2, 1)),
            "p_value": _exact_mcnemar_p(s01, s10)}


def pooled_mean_diff(diffs: Sequence[float], los: Sequence[float], his: Sequence[float],
                     conf: float = 0.95) -> dict[str, float]:
    """Fixed-effect (inverse-variance) pooling of per-seed paired mean differences, each given
    with its ``conf`` interval (a paired bootstrap's): se_s = (hi − lo)/(2z), weights 1/se²,
    ``{"diff", "lo", "hi", "p_value"}`` (normal; for stored results where only the intervals
    are kept). Every se must be > 0."""
    z = _z(conf)
    d = np.asarray(diffs, float)
    se = (np.asarray(his, float) - np.asarray(los, float)) / (2 * z)
    if d.shape != se.shape or d.size == 0 or (se <= 0).any():
        raise ValueError("need equal-length diffs and intervals of positive width")
    w = 1.0 / se ** 2
    est, s = float((w * d).sum() / w.sum()), float(1.0 / math.sqrt(w.sum()))
    return {"diff": est, "lo": est - z * s, "hi": est + z * s,
            "p_value": normal_two_sided_p(est / s)}


def seed_level_test(diffs: Sequence[float], delta0: float = 0.0) -> dict[str, Any]:
    """A random-effects check of a pooled verdict: the one-sample t-test of the per-seed
    differences B − A against ``delta0`` (df = seeds − 1), so the seed-to-seed spread of the
    trained models, which the pooled CMH test conditions on, enters the test.

    Returns ``{"n", "mean", "sd", "t", "df", "p_value", "signs"}``; ``signs`` is one of
    ``+``/``−``/``0`` per seed for the sign of d − δ0. With no spread (every seed the same
    difference) t is ±inf and p is its limit, 0 (1 when that difference is δ0). Needs two or
    more seeds."""
    d = _as_values(diffs, "diffs")
    if d.size < 2:
        raise ValueError(f"a seed-level test needs two or more seeds, got {d.size}")
    dev = d - float(delta0)
    signs = "".join("+" if x > 1e-12 else "−" if x < -1e-12 else "0" for x in dev)
    mean, sd, df = float(d.mean()), float(d.std(ddof=1)), int(d.size - 1)
    if sd <= 1e-12:
        t = 0.0 if abs(float(dev.mean())) <= 1e-12 else math.copysign(math.inf, float(dev.mean()))
        p = 1.0 if t == 0.0 else 0.0
    else:
        t = float(dev.mean() / (sd / math.sqrt(d.size)))
        p = float(min(1.0, 2.0 * scipy.stats.t.sf(abs(t), df)))
    return {"n": int(d.size), "mean": mean, "sd": sd, "t": t, "df": df, "p_value": p,
            "signs": signs}


def did_sign_flip_p(d: Any) -> float:
    """Exact two-sided sign-flip p of the sum of paired integer differences ``d`` (each in
    {−2, …, 2}): under the sharp null that runs A and B are exchangeable on every item, each
    non-zero d_i keeps or flips its sign with probability 1/2, independently (items of
    different seeds included: independent models). The sum of ±1's and ±2's is
    (2·B1 − n1) + 2·(2·B2 − n2), B1 ~ Bin(n1, ½), B2 ~ Bin(n2, ½): convolved exactly.
    p = P(|S*| >= |S|). With |d_i| <= 1 only, it is the exact McNemar test."""
    x = np.asarray(d)
    if x.ndim != 1 or not np.isin(x, (-2, -1, 0, 1, 2)).all():
        raise ValueError("need a 1-D array of paired differences in {-2, -1, 0, 1, 2}")
    n1, n2 = int((np.abs(x) == 1).sum()), int((np.abs(x) == 2).sum())
    s_obs = abs(int(x.sum()))
    if n1 + n2 == 0:
        return 1.0
    k1, k2 = np.arange(n1 + 1), np.arange(n2 + 1)
    p1, p2 = scipy.stats.binom.pmf(k1, n1, 0.5), scipy.stats.binom.pmf(k2, n2, 0.5)
    sums = (2 * k1 - n1)[:, None] + 2 * (2 * k2 - n2)[None, :]
    prob = p1[:, None] * p2[None, :]
    return float(min(1.0, prob[np.abs(sums) >= s_obs].sum() * (1 + 1e-12)))


def did_test(a_clean: Sequence[Any], a_hard: Sequence[Any], b_clean: Sequence[Any],
             b_hard: Sequence[Any], *, seed: int = 0, n_resamples: int = DEFAULT_RESAMPLES,
             conf: float = 0.95) -> dict[str, Any]:
    """Paired per-item difference-in-differences of a robustness drop (EADPR Fig. 5 shades the
    drop, not the level): per item i of stratum s (a training seed),
    ``d_i = (hard_B − clean_B) − (hard_A − clean_A)``, hits as 0/1 (e.g. top-1 with K = 5
    distractors and with none); > 0 when B loses less than A.

    Each argument is a list of per-stratum 0/1 vectors (one stratum: a one-element list), the
    four vectors of a stratum paired by item. Returns ``{"diff"`` (mean d, a fraction),
    ``"lo", "hi"`` (stratified percentile bootstrap over items within strata), ``"p_value"``
    (exact sign-flip test, :func:`did_sign_flip_p`), ``"n"``, ``"n1", "n2"`` (items with
    |d| = 1, 2), ``"hist"`` (items with d = −2, −1, 0, 1, 2: enough to pool strata) ``}``."""
    if not (len(a_clean) == len(a_hard) == len(b_clean) == len(b_hard)) or not len(a_clean):
        raise ValueError("need the same number (>= 1) of strata for the four outcome sets")
    ds = []
    for s, vecs in enumerate(zip(a_clean, a_hard, b_clean, b_hard)):
        arrs = [np.asarray(v) for v in vecs]
        if any(v.ndim != 1 or v.shape != arrs[0].shape or v.size == 0 for v in arrs):
            raise ValueError(f"stratum {s}: need four non-empty paired 1-D outcome vectors, "
                             f"got shapes {[v.shape for v in arrs]}")
        ac, ah, bc, bh = (v.astype(bool).astype(np.int64) for v in arrs)
        ds.append((bh - bc) - (ah - ac))
    d = np.concatenate(ds)
    rng = np.random.default_rng(seed)
    total = np.zeros(n_resamples)
    for x in ds:  # strata resampled separately: the mean over all items, seed sizes kept
        sub = _resampled_means(x.astype(np.float64), int(rng.integers(2 ** 31)), n_resamples)
        total += sub * x.size
    lo, hi = _percentiles(total / d.size, conf)
    return {"diff": float(d.mean()), "lo": lo, "hi": hi, "p_value": did_sign_flip_p(d),
            "n": int(d.size), "n1": int((np.abs(d) == 1).sum()),
            "n2": int((np.abs(d) == 2).sum()),
            "hist": [int((d == v).sum()) for v in (-2, -1, 0, 1, 2)]}


def did_pooled(hists: Sequence[Sequence[int]]) -> dict[str, Any]:
    """Difference-in-differences over strata from each stratum's ``hist`` (:func:`did_test`):
    the mean d over all items and the exact sign-flip p of their sum (strata independent)."""
    h = np.asarray(hists, dtype=np.int64)
    if h.ndim != 2 or h.shape[1] != 5 or (h < 0).any() or h.sum() == 0:
        raise ValueError(f"need per-stratum counts of d = -2..2, got {h.tolist()}")
    total = h.sum(axis=0)
    d = np.repeat(np.arange(-2, 3), total)
    return {"diff": float(d.mean()), "p_value": did_sign_flip_p(d), "n": int(d.size),
            "hist": total.tolist()}
