"""A mixed-effects logistic model of paired binary outcomes over training seeds (issue 50
item 2; docs/replication.md "Method"), fitted by maximum likelihood with numerical
integration. Pure numpy + scipy.

Model, per item i of seed s and run m (0 = A, 1 = B)::

    logit P(hit) = β0 + β·m + u_si + a_s + c_sm,
    u_si ~ N(0, σ_item²),  a_s ~ N(0, σ_seed²),  c_sm ~ N(0, σ_sm²)   (all independent)

β is B's log-odds ratio over A (conditional on the item and the seed). The seed × method
effect c_sm lets B − A vary from seed to seed, so β's standard error carries the spread of the
trained models that the pooled CMH test conditions on.

Items are nested in seeds (u_si: one intercept per item and seed). Under
``studies.replicate --vary_world`` every seed draws its own world, so this is the design; the
runs stored before it share one world, but their reports keep only counts, so the crossing of
items over seeds is not recoverable. Nested in seeds, a seed's items enter only through its
paired 2×2 table (both hit, A only, B only, neither): those four counts are the sufficient
statistics, so :func:`paired_table` of per-item hits and the stored counts fit the same model.

Fit (the likelihood is integrated, not approximated by a mode of the joint posterior):

* the item intercept by quadrature on a fixed grid of 241 points over ±8 σ_item (the
  integrand, a product of two logistic curves and a normal density, is smooth; a grid rather
  than Gauss–Hermite nodes keeps σ_item up to 20 resolved);
* each seed's (a_s + c_sA, a_s + c_sB), a bivariate normal, by adaptive Gauss–Hermite
  quadrature (3 × 3 nodes around the mode of the integrand, found by Newton's method; the
  integrand is log-concave, so the mode is unique);
* the marginal log-likelihood maximised over (β0, β, log σ_item, log σ_seed, log σ_sm) by
  L-BFGS-B, each σ in [1e-3, 20];
* β's standard error from the observed information (the curvature of the marginal
  log-likelihood, central differences) over (β0, β) and the log σs not at a bound (a σ at
  its lower bound is held fixed, as a zero variance is in lme4); z = β / SE, its two-sided
  normal p, and the 95 % Wald interval, in log-odds.

Caveat: with two or three seeds the maximum-likelihood σ_sm is biased low (often at its
lower bound), so the Wald test is more liberal than the seed-level t-test
(``stats.seed_level_test``, df = seeds − 1) and more conservative than CMH only when the seeds
disagree clearly. Under complete separation (one run never beats the other: no discordant
pair one way, over all seeds) β is infinite and a Wald p is not informative (Hauck–Donner):
separation is read off the counts and β held at its bound (±15), not left to where the
optimiser stops on the flat likelihood (which moved with the CPU: β ≈ 13.9 with a Wald p of
0.96 on one machine, the bound on another, for the same counts).

Why not ``statsmodels.BinomialBayesMixedGLM`` (checked 2026-11-28, statsmodels 0.15.0): its
variational posterior is mean-field, so β's posterior SD ignores its correlation with the
seed × method effects. On simulated seeds with log-odds effects +0.8, −0.3, +0.2 (300 items
each) it gave SD 0.083 where the between-seed standard error is about 0.3; ``fit_map`` put
σ_item at 4e-8; one fit took about 100 s on the shared CPU. This fit takes well under a second.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import numpy as np
import scipy  # scipy.optimize / scipy.stats are reached as attributes (see eval.stats)

__all__ = ["mixed_logit", "paired_table"]

_SIGMA_BOUNDS = (1e-3, 20.0)
_BETA_BOUND = 15.0  # |β| there: separation (odds ratio e^15 ≈ 3e6)
_BETA0_BOUND = 40.0
# L-BFGS-B's stopping rule. At scipy's defaults (ftol 2.2e-9) the fits stopped early enough
# that printed p values moved with the CPU and with the start (a separation's likelihood-ratio
# p 1.6e-05 where the converged fit gives 3.4e-04; a Wald p 3.7e-09 against 2.3e-09); at these
# the stored claims' cells equal those of ftol 1e-16 (which no longer converges everywhere).
_OPTS = {"ftol": 1e-14, "gtol": 1e-9, "maxiter": 2000}
# The item intercept: a fixed grid in standard-normal units, trapezoid weights × density.
_U = np.linspace(-8.0, 8.0, 241)
_W = np.exp(-0.5 * _U ** 2) * (_U[1] - _U[0]) / math.sqrt(2 * math.pi)
# The patterns of a paired 2×2 table (A hit, B hit), as signs of the logit.
_PATTERNS = np.array([(1, 1), (1, -1), (-1, 1), (-1, -1)], dtype=float)
# The seeds' bivariate integral: 3 × 3 Gauss–Hermite nodes around each seed's mode (its
# integrand is close to normal: a seed has hundreds of items).
_NODES, _WEIGHTS = np.polynomial.hermite.hermgauss(3)
_AGQ_X = np.array([(u, v) for u in _NODES for v in _NODES])
_AGQ_W = np.array([wu * wv for wu in _WEIGHTS for wv in _WEIGHTS])


def paired_table(a: Sequence[Any], b: Sequence[Any]) -> tuple[int, int, int, int]:
    """A seed's paired 2×2 table from per-item hits of runs A and B: (both hit, only A,
    only B, neither)."""
    x, y = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise ValueError(f"need two non-empty paired 1-D arrays, got {x.shape} and {y.shape}")
    return (int((x & y).sum()), int((x & ~y).sum()), int((~x & y).sum()),
            int((~x & ~y).sum()))


def _item_terms(eta: np.ndarray, sigma_item: float, derivatives: bool = True
                ) -> tuple[np.ndarray, ...]:
    """log f, ∇ log f and ∇² log f of each pattern's item integral
    f(ηA, ηB) = ∫ G(sA (ηA + σu)) G(sB (ηB + σu)) φ(u) du, G the logistic function, in the
    order of ``_PATTERNS``. ``eta``: (..., 2). Returns arrays shaped (..., 4), (..., 4, 2) and
    (..., 4, 2, 2) (only the first without ``derivatives``).

    dG(sx)/dx = s q and d²G(sx)/dx² = s r with q = G(x) G(−x) and r = q (G(−x) − G(x)).
    G(x) and G(−x) are both evaluated (not 1 − G): near a 0 % or 100 % rate the
    difference would cancel."""
    x = eta[..., :, None] + sigma_item * _U  # (..., 2, U)
    g, gm = scipy.special.expit(x), scipy.special.expit(-x)
    ga, gb, gma, gmb = g[..., 0, :], g[..., 1, :], gm[..., 0, :], gm[..., 1, :]
    # GA, GB per pattern: (g, g), (g, 1−g), (1−g, g), (1−g, 1−g).
    f = np.stack([(ga * gb) @ _W, (ga * gmb) @ _W, (gma * gb) @ _W, (gma * gmb) @ _W], -1)
    f = np.maximum(f, 1e-300)
    if not derivatives:
        return (np.log(f),)
    q = g * gm
    r = q * (gm - g)
    qa, qb, ra, rb = q[..., 0, :], q[..., 1, :], r[..., 0, :], r[..., 1, :]
    sign_a, sign_b = _PATTERNS[:, 0], _PATTERNS[:, 1]

    def times_gb(x: np.ndarray) -> np.ndarray:  # Σ w x GB for the four patterns
        hit, miss = (x * gb) @ _W, (x * gmb) @ _W
        return np.stack([hit, miss, hit, miss], -1)

    def times_ga(x: np.ndarray) -> np.ndarray:  # Σ w GA x for the four patterns
        hit, miss = (ga * x) @ _W, (gma * x) @ _W
        return np.stack([hit, hit, miss, miss], -1)

    fa, fb = sign_a * times_gb(qa), sign_b * times_ga(qb)
    faa, fbb = sign_a * times_gb(ra), sign_b * times_ga(rb)
    fab = sign_a * sign_b * ((qa * qb) @ _W)[..., None]
    grad = np.stack([fa, fb], axis=-1) / f[..., None]
    hess = np.stack([np.stack([faa, fab], -1), np.stack([fab, fbb], -1)], -2) / f[..., None, None]
    hess = hess - grad[..., :, None] * grad[..., None, :]
    return np.log(f), grad, hess


def _seed_loglik(counts: np.ndarray, mean: np.ndarray, chol: np.ndarray, sigma_item: float,
                 start: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """log ∫ φ(z) Π_patterns f(mean + chol z)^count dz per seed (adaptive Gauss–Hermite)
    and the modes (the next call's ``start``). ``counts``: (S, 4); ``mean``: (2,);
    ``chol``: (2, 2)."""
    n_seeds = counts.shape[0]
    z = np.zeros((n_seeds, 2)) if start is None else start.copy()
    eye = np.eye(2)

    def h(zz: np.ndarray) -> np.ndarray:  # zz: (S, K, 2) -> (S, K)
        (lf,) = _item_terms(mean + zz @ chol.T, sigma_item, derivatives=False)
        return -0.5 * (zz ** 2).sum(-1) + (lf * counts[:, None, :]).sum(-1)

    def newton_terms(zz: np.ndarray) -> tuple[np.ndarray, ...]:
        lf, g, hs = _item_terms(mean + zz @ chol.T, sigma_item)
        value = -0.5 * (zz ** 2).sum(-1) + (lf * counts).sum(-1)
        grad = -zz + np.einsum("sp,spi,ij->sj", counts, g, chol)
        hess = -eye + np.einsum("ji,sp,spjk,kl->sil", chol, counts, hs, chol)
        return value, grad, hess

    value, grad, hess = newton_terms(z)
    for _ in range(100):  # Newton on the log-concave integrand, with step halving
        step = -np.linalg.solve(hess, grad[..., None])[..., 0]
        t = np.ones(n_seeds)
        for _ in range(40):
            trial = z + t[:, None] * step
            new = newton_terms(trial)
            bad = ~(new[0] >= value - 1e-9 * np.abs(value))
            if not bad.any():
                break
            t = np.where(bad, t / 2, t)
        z, (value, grad, hess) = trial, new
        if np.abs(t[:, None] * step).max() < 1e-7:
            break
    # z = mode + sqrt(2) R x with R R^T = (-hess)^-1: ∫ e^h dz = |det √2 R| Σ w e^(h + |x|²).
    r = np.linalg.cholesky(np.linalg.inv(-hess))
    pts = z[:, None, :] + math.sqrt(2) * np.einsum("sij,kj->ski", r, _AGQ_X)
    vals = h(pts) + (_AGQ_X ** 2).sum(-1)[None, :]
    log_det = np.log(2.0) + np.log(np.abs(np.linalg.det(r)))
    top = vals.max(axis=1, keepdims=True)
    # ∫ φ(z) e^ℓ dz = (2π)^-1 ∫ e^h dz (h carries -|z|²/2 but not φ's constant).
    out = log_det + top[:, 0] + np.log(np.exp(vals - top) @ _AGQ_W) - math.log(2 * math.pi)
    return out, z


def _loglik(params: np.ndarray, counts: np.ndarray, modes: dict[str, np.ndarray]) -> float:
    """The marginal log-likelihood at (β0, β, log σ_item, log σ_seed, log σ_sm); ``modes``
    carries the seeds' modes from call to call (a warm start for Newton)."""
    beta0, beta, ls_item, ls_seed, ls_sm = params
    si, sa, sc = math.exp(ls_item), math.exp(ls_seed), math.exp(ls_sm)
    cov = np.array([[sa ** 2 + sc ** 2, sa ** 2], [sa ** 2, sa ** 2 + sc ** 2]])
    chol = np.linalg.cholesky(cov)
    mean = np.array([beta0, beta0 + beta])
    with np.errstate(all="ignore"):
        ll, z = _seed_loglik(counts, mean, chol, si, modes.get("z"))
        if not (np.all(np.isfinite(ll)) and np.all(np.isfinite(z))):
            # A warm start far from this point's mode (the optimiser's trial steps can
            # jump across the box) can underflow f: start from the prior mean instead.
            ll, z = _seed_loglik(counts, mean, chol, si)
    if np.all(np.isfinite(z)):
        modes["z"] = z
    total = float(ll.sum())
    return total if math.isfinite(total) else -math.inf


def _curvature(f: Any, p: np.ndarray, free: Sequence[int], h: float = 1e-3) -> np.ndarray:
    """−∇² f at ``p`` over the coordinates ``free`` (central differences)."""
    k = len(free)
    out = np.empty((k, k))
    f0 = f(p)

    def at(*moves: tuple[int, float]) -> float:
        q = p.copy()
        for i, d in moves:
            q[free[i]] += d
        return f(q)

    for i in range(k):
        out[i, i] = -(at((i, h)) - 2 * f0 + at((i, -h))) / h ** 2
        for j in range(i):
            out[i, j] = out[j, i] = -(at((i, h), (j, h)) - at((i, h), (j, -h))
                                      - at((i, -h), (j, h)) + at((i, -h), (j, -h))) / (4 * h * h)
    return out


@functools.lru_cache(maxsize=512)  # the claims tables refit the same stored counts
def _fit(tables: tuple[tuple[int, int, int, int], ...]) -> dict[str, Any]:
    counts = np.asarray(tables, dtype=float)
    n = counts.sum()
    a_rate = (counts[:, 0].sum() + counts[:, 1].sum() + 0.5) / (n + 1.0)
    b01, b10 = counts[:, 2].sum(), counts[:, 1].sum()
    lo, hi = (math.log(b) for b in _SIGMA_BOUNDS)
    start = np.array([math.log(a_rate / (1 - a_rate)), math.log((b01 + 0.5) / (b10 + 0.5)),
                      math.log(1.5), math.log(0.3), math.log(0.3)])
    modes: dict[str, np.ndarray] = {}

    def ll(q: np.ndarray) -> float:
        return _loglik(q, counts, modes)

    bounds = [(-_BETA0_BOUND, _BETA0_BOUND), (-_BETA_BOUND, _BETA_BOUND)] + [(lo, hi)] * 3

    def at_beta(beta: float, x0: np.ndarray) -> Any:
        """The other parameters' maximum with β held at ``beta``."""
        with np.errstate(invalid="ignore"):
            return scipy.optimize.minimize(lambda q: -ll(np.insert(q, 1, beta)), x0,
                                           method="L-BFGS-B", bounds=bounds[:1] + bounds[2:], options=_OPTS)

    # Complete separation: no discordant pair one way over all seeds (one run never beats
    # the other). The likelihood then rises towards |β| = ∞ and is flat far out, so β is held
    # at its bound rather than left where L-BFGS-B happens to stop.
    separated = (b10 == 0) != (b01 == 0)
    if separated:
        beta_sep = math.copysign(_BETA_BOUND, b01 - b10)
        res = at_beta(beta_sep, np.delete(start, 1))
        p = np.insert(res.x, 1, beta_sep)
    else:
        with np.errstate(invalid="ignore"):  # a trial step off the box's likely region: -inf
            res = scipy.optimize.minimize(lambda q: -ll(q), start, method="L-BFGS-B",
                                          bounds=bounds, options=_OPTS)
        p = res.x
    beta = float(p[1])
    zc = float(scipy.stats.norm.ppf(0.975))
    out = {"beta0": float(p[0]), "sigma_item": math.exp(p[2]), "sigma_seed": math.exp(p[3]),
           "sigma_seed_method": math.exp(p[4]), "loglik": -float(res.fun),
           "converged": bool(res.success), "seeds": len(tables), "n": int(n)}
    if separated or abs(beta) >= _BETA_BOUND - 1e-3:
        # Separation: β is infinite and its Wald test meaningless (Hauck–Donner), so the p
        # is the likelihood-ratio test of β = 0.
        null = at_beta(0.0, np.delete(p, 1))
        stat = max(0.0, 2.0 * (float(null.fun) - float(res.fun)))
        inf = math.copysign(math.inf, beta)
        return {**out, "beta": inf, "se": math.inf, "z": inf, "lr": stat,
                "p_value": float(scipy.stats.chi2.sf(stat, 1)), "lo": math.nan,
                "hi": math.nan, "separation": True, "method": "likelihood ratio"}
    # β's variance from the observed information over (β0, β) and every log σ not at a
    # bound (one there is held fixed: its likelihood is flat, as for a zero variance in lme4).
    free = [0, 1] + [i for i in (2, 3, 4) if lo + 0.05 < p[i] < hi - 0.05]
    try:
        var = float(np.linalg.inv(_curvature(ll, p, free))[1, 1])
    except np.linalg.LinAlgError:
        var = math.inf
    se = math.sqrt(var) if var > 0 else math.inf
    z = beta / se if math.isfinite(se) else 0.0
    return {**out, "beta": beta, "se": se, "z": z,
            "p_value": float(min(1.0, 2.0 * scipy.stats.norm.sf(abs(z)))),
            "lo": beta - zc * se, "hi": beta + zc * se, "separation": False, "method": "Wald"}


def mixed_logit(tables: Sequence[Sequence[int]]) -> dict[str, Any]:
    """Fits the module's model to one paired 2×2 table per seed ((both hit, only A, only B,
    neither): :func:`paired_table`). Deterministic (no random draws). Returns ``{"beta",
    "se", "z", "p_value", "lo", "hi", "method"}`` (β = B's log-odds ratio over A, its Wald
    test and 95 % interval) with ``beta0``, the three σs, ``loglik``, ``converged``,
    ``separation`` (no discordant pair one way over all seeds, or β ran to its bound: then
    β and z are ±inf, the interval is nan and
    ``p_value`` is the likelihood-ratio test of β = 0, ``lr`` its statistic), ``seeds`` and
    ``n`` (items over all seeds)."""
    rows = tuple(tuple(int(c) for c in t) for t in tables)
    if not rows or any(len(t) != 4 or min(t) < 0 or sum(t) == 0 for t in rows):
        raise ValueError(f"need one non-empty (both, only A, only B, neither) table per seed, "
                         f"got {rows}")
    return dict(_fit(rows))
