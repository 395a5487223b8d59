"""Tests for dense_cf.losses (docs/method.md §3; PiCL eq. 7-10; EADPR eq. 3, 5, 7, 8).

The reference below is written per element with Python loops and float64 math, deliberately NOT
sharing any vectorised code with the implementation.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from dense_cf.losses import contrastive_loss, dpr_nll
from dense_cf.methods.contrastive import LossConfig, loss_hparams

# --------------------------------------------------------------------------------------------
# Per-element reference
# --------------------------------------------------------------------------------------------


def _dot(a, b):
    return sum(float(a[d]) * float(b[d]) for d in range(len(a)))


def _lse(xs):
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs))


def ref_loss(q, pos, hard, hv, cf, cv, lam=0.0, tau1=0.0, tau2=0.0, use_dpr=True):
    """Returns (loss, metrics) computed question by question, passage by passage."""
    q, pos = np.asarray(q, np.float64), np.asarray(pos, np.float64)
    B = q.shape[0]
    H = 0 if hard is None else hard.shape[1]
    hard = None if hard is None else np.asarray(hard, np.float64)
    cf = None if cf is None else np.asarray(cf, np.float64)
    tot = dpr_sum = chn_sum = cpp_sum = 0.0
    acc = rank_sum = 0.0
    n_cf = 0
    margin_sum = 0.0
    for i in range(B):
        s_pos = _dot(q[i], pos[i])
        negs = []
        for j in range(B):
            if j != i:
                negs.append(_dot(q[i], pos[j]))
        for j in range(B):
            for k in range(H):
                if hv[j][k]:
                    negs.append(_dot(q[i], hard[j][k]))
        has_cf = cf is not None and bool(cv[i])
        # L_dpr (eq. 7)
        den = [s_pos] + negs
        if has_cf and lam > 0:
            den.append(_dot(q[i], cf[i]) + math.log(lam))
        l_dpr = _lse(den) - s_pos
        l_chn = l_cpp = 0.0
        if has_cf:
            s_star = _dot(q[i], cf[i])
            # L_chn (eq. 8)
            l_chn = -math.log(math.exp(s_pos) / (math.exp(s_pos) + math.exp(s_star)))
            # L_cpp (eq. 9): p_i* vs N_i plus other questions' valid counterfactuals
            den_c = [s_star] + negs
            for j in range(B):
                if j != i and cv[j]:
                    den_c.append(_dot(q[i], cf[j]))
            l_cpp = _lse(den_c) - s_star
            n_cf += 1
            margin_sum += s_pos - s_star
        tot += (l_dpr if use_dpr else 0.0) + tau1 * l_chn + tau2 * l_cpp
        dpr_sum += l_dpr
        chn_sum += l_chn
        cpp_sum += l_cpp
        n_ge = sum(1 for s in negs if s >= s_pos)
        acc += 1.0 if n_ge == 0 else 0.0
        rank_sum += 1 + n_ge
    metrics = {
        "loss": tot / B,
        "l_dpr": dpr_sum / B,
        "l_chn": chn_sum / B,
        "l_cpp": cpp_sum / B,
        "rank_acc": acc / B,
        "mean_pos_rank": rank_sum / B,
        "cf_valid_frac": n_cf / B,
        "cf_margin": margin_sum / n_cf if n_cf else 0.0,
    }
    return tot / B, metrics


def make_batch(seed, B=5, H=2, D=6, scale=1.0, dtype=np.float32):
    r = np.random.default_rng(seed)
    q = (scale * r.normal(size=(B, D))).astype(dtype)
    pos = (scale * r.normal(size=(B, D))).astype(dtype)
    hard = (scale * r.normal(size=(B, H, D))).astype(dtype)
    cf = (scale * r.normal(size=(B, D))).astype(dtype)
    hv = r.random((B, H)) < 0.7
    cv = r.random(B) < 0.6
    cv[0] = True  # at least one valid and
    cv[-1] = False  # at least one missing counterfactual
    return q, pos, hard, hv, cf, cv


# Compiled once per shape (faster than eager op-by-op). `_loss_static` keeps the hyper-parameters
# as Python scalars (the production path: Python-0 terms are skipped); `_loss_traced` passes them
# as traced arrays (one compile serves every value; exercises the jnp.where / safe-log paths).
_loss_static = jax.jit(contrastive_loss, static_argnames=("lam", "tau1", "tau2", "use_dpr"))
_loss_traced = jax.jit(contrastive_loss, static_argnames=("use_dpr",))


def _j(x):
    return None if x is None else jnp.asarray(x)


def _traced(kw):
    return {k: jnp.float32(kw.get(k, 0.0)) for k in ("lam", "tau1", "tau2")}


def run(q, pos, hard, hv, cf, cv, *, static=False, use_dpr=True, **kw):
    if static:
        fn = _loss_static
        kw = {k: float(kw.get(k, 0.0)) for k in ("lam", "tau1", "tau2")}
    else:
        fn = _loss_traced
        kw = _traced(kw)
    loss, m = fn(_j(q), _j(pos), _j(hard), _j(hv), _j(cf), _j(cv), use_dpr=use_dpr, **kw)
    return float(loss), {k: float(v) for k, v in m.items()}


def _loss_of(q, pos, hard, cf, hv, cv, lam, tau1, tau2, use_dpr):
    return contrastive_loss(q, pos, hard, hv, cf, cv, lam=lam, tau1=tau1, tau2=tau2, use_dpr=use_dpr)


_value_and_grad = jax.jit(
    jax.value_and_grad(_loss_of, argnums=(0, 1, 2, 3), has_aux=True), static_argnames=("use_dpr",)
)


def grads_of(q, pos, hard, hv, cf, cv, *, use_dpr=True, **kw):
    """(loss, (dq, dpos, dhard, dcf)) with traced hyper-parameters."""
    (loss, _), g = _value_and_grad(
        _j(q), _j(pos), _j(hard), _j(cf), _j(hv), _j(cv), use_dpr=use_dpr, **_traced(kw)
    )
    return float(loss), tuple(None if x is None else np.asarray(x) for x in g)


# --------------------------------------------------------------------------------------------
# Hand-computed closed forms
# --------------------------------------------------------------------------------------------


def test_hand_computed_two_questions():
    # q0 = e0, q1 = e1; scores are read off directly.
    q = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    pos = np.array([[2.0, 0.0], [0.5, 1.0]], np.float32)  # s(0,p0)=2 s(0,p1)=.5 s(1,p0)=0 s(1,p1)=1
    hard = np.array([[[1.0, 3.0]], [[-1.0, 0.0]]], np.float32)  # s(0,h0)=1 s(0,h1)=-1 s(1,h0)=3 s(1,h1)=0
    hv = np.array([[True], [True]])
    cf = np.array([[1.5, 0.0], [0.0, 0.25]], np.float32)  # s(0,c0)=1.5 s(0,c1)=0 s(1,c0)=0 s(1,c1)=.25
    cv = np.array([True, True])
    e = math.exp
    lam, t1, t2 = 0.5, 0.3, 0.7
    dpr0 = -math.log(e(2) / (e(2) + e(0.5) + e(1) + e(-1) + lam * e(1.5)))
    dpr1 = -math.log(e(1) / (e(1) + e(0) + e(3) + e(0) + lam * e(0.25)))
    chn0 = -math.log(e(2) / (e(2) + e(1.5)))
    chn1 = -math.log(e(1) / (e(1) + e(0.25)))
    # L_cpp: p_i* over {other positive, all hard negatives (own included), other cf}; no p_i+.
    cpp0 = -math.log(e(1.5) / (e(1.5) + e(0.5) + e(1) + e(-1) + e(0)))
    cpp1 = -math.log(e(0.25) / (e(0.25) + e(0) + e(3) + e(0) + e(0)))
    want = ((dpr0 + t1 * chn0 + t2 * cpp0) + (dpr1 + t1 * chn1 + t2 * cpp1)) / 2
    loss, m = run(q, pos, hard, hv, cf, cv, lam=lam, tau1=t1, tau2=t2)
    assert loss == pytest.approx(want, rel=1e-6)
    assert m["l_dpr"] == pytest.approx((dpr0 + dpr1) / 2, rel=1e-6)
    assert m["l_chn"] == pytest.approx((chn0 + chn1) / 2, rel=1e-6)
    assert m["l_cpp"] == pytest.approx((cpp0 + cpp1) / 2, rel=1e-6)
    # q0: p+ = 2 beats {.5, 1, -1}; q1: p+ = 1 loses to h0 = 3 -> rank 2.
    assert m["rank_acc"] == pytest.approx(0.5)
    assert m["mean_pos_rank"] == pytest.approx((1 + 2) / 2)
    assert m["cf_valid_frac"] == pytest.approx(1.0)
    assert m["cf_margin"] == pytest.approx(((2 - 1.5) + (1 - 0.25)) / 2, rel=1e-6)


def test_ties_all_equal_scores():
    B, H, D = 5, 2, 6
    v = np.full((D,), 0.5, np.float32)
    q = np.tile(v, (B, 1))
    pos = np.tile(v, (B, 1))
    hard = np.tile(v, (B, H, 1))
    cf = np.tile(v, (B, 1))
    hv = np.ones((B, H), bool)
    cv = np.ones(B, bool)
    loss, m = run(q, pos, hard, hv, cf, cv, lam=0.2, tau1=1.0, tau2=1.0)
    n_neg = (B - 1) + B * H  # 14 in-batch negatives, all tied with the positive
    assert m["l_dpr"] == pytest.approx(math.log(1 + n_neg + 0.2), rel=1e-6)
    assert m["l_chn"] == pytest.approx(math.log(2), rel=1e-6)
    assert m["l_cpp"] == pytest.approx(math.log(1 + n_neg + (B - 1)), rel=1e-6)
    assert loss == pytest.approx(math.log(15.2) + math.log(2) + math.log(19), rel=1e-6)
    # Ties count against the positive.
    assert m["rank_acc"] == 0.0
    assert m["mean_pos_rank"] == pytest.approx(1 + n_neg)
    assert m["cf_margin"] == 0.0


def test_partial_tie_ranks():
    # q0: p+ ties with one negative, beats the other -> rank 2, not accurate.
    q = np.array([[1.0, 0.0], [1.0, 0.0]], np.float32)
    pos = np.array([[2.0, 7.0], [2.0, -1.0]], np.float32)  # s(0,p1) = s(0,p0) = 2
    hard = np.array([[[1.0, 0.0]], [[3.0, 0.0]]], np.float32)
    hv = np.array([[True], [False]])  # the 3.0 negative is padding: must not count
    cf = np.full((2, 2), 9.0, np.float32)
    cv = np.array([False, False])  # no counterfactuals: lambda / tau terms must vanish
    loss, m = run(q, pos, hard, hv, cf, cv, lam=0.5, tau1=1.0, tau2=1.0)
    assert m["rank_acc"] == 0.0
    assert m["mean_pos_rank"] == pytest.approx(2.0)  # each: tie with the other positive
    want = math.log(math.exp(2) + math.exp(2) + math.exp(1)) - 2
    assert loss == pytest.approx(want, rel=1e-6)


# --------------------------------------------------------------------------------------------
# Against the per-element reference
# --------------------------------------------------------------------------------------------

CONFIGS = [
    dict(lam=0.0, tau1=0.0, tau2=0.0, use_dpr=True),  # plain DPR
    dict(lam=0.2, tau1=1.0, tau2=1.0, use_dpr=True),  # PiCL
    dict(lam=1.0, tau1=1.0, tau2=1.0, use_dpr=True),  # EADPR
    dict(lam=0.2, tau1=0.0, tau2=1.0, use_dpr=True),  # L_dpr + L_cpp
    dict(lam=0.2, tau1=1.0, tau2=0.0, use_dpr=True),  # L_dpr + L_chn
    dict(lam=0.0, tau1=1.0, tau2=1.0, use_dpr=False),  # L_cpp + L_chn
    dict(lam=0.0, tau1=0.3, tau2=0.0, use_dpr=False),  # L_chn only
    dict(lam=0.0, tau1=0.0, tau2=0.5, use_dpr=False),  # L_cpp only
]


@pytest.mark.parametrize("kw", CONFIGS, ids=lambda k: "-".join(f"{a}{b}" for a, b in k.items()))
def test_matches_reference(kw):
    q, pos, hard, hv, cf, cv = make_batch(1)
    want, wm = ref_loss(q, pos, hard, hv, cf, cv, **kw)
    loss, m = run(q, pos, hard, hv, cf, cv, **kw)  # traced hyper-parameters
    assert loss == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert m == pytest.approx(wm, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("i", [0, 1, 4])
def test_static_hyperparameters_match_reference_and_skip_zero_terms(i):
    kw = CONFIGS[i]
    q, pos, hard, hv, cf, cv = make_batch(1)
    want, wm = ref_loss(q, pos, hard, hv, cf, cv, **kw)
    loss, m = run(q, pos, hard, hv, cf, cv, static=True, **kw)
    assert loss == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert m["loss"] == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert m["l_dpr"] == pytest.approx(wm["l_dpr"], rel=1e-5)  # always reported
    assert m["l_chn"] == pytest.approx(wm["l_chn"], rel=1e-5)  # always reported
    if kw["tau2"]:
        assert m["l_cpp"] == pytest.approx(wm["l_cpp"], rel=1e-5)
    else:  # a Python-0 weighted L_cpp is not computed and reads 0
        assert m["l_cpp"] == 0.0
    for k in ("rank_acc", "mean_pos_rank", "cf_valid_frac", "cf_margin"):
        assert m[k] == pytest.approx(wm[k], rel=1e-5, abs=1e-6), k


def test_large_scores_stable():
    q, pos, hard, hv, cf, cv = make_batch(2, scale=12.0)  # scores in the hundreds: e^s overflows f32
    kw = dict(lam=0.2, tau1=1.0, tau2=1.0)
    want, _ = ref_loss(q, pos, hard, hv, cf, cv, **kw)
    loss, _ = run(q, pos, hard, hv, cf, cv, **kw)
    assert math.isfinite(loss)
    assert loss == pytest.approx(want, rel=1e-4)


# --------------------------------------------------------------------------------------------
# lambda
# --------------------------------------------------------------------------------------------


def test_lambda_zero_is_plain_dpr():
    q, pos, hard, hv, cf, cv = make_batch(3)
    base, bm = run(q, pos, hard, hv, None, None, static=True)
    l0, m0 = run(q, pos, hard, hv, cf, cv, lam=0.0, static=True)
    assert np.isfinite(l0)
    # Equal up to float rounding: the two programs fuse differently (1-ulp differences seen).
    assert l0 == pytest.approx(base, rel=1e-6)
    assert m0["l_dpr"] == pytest.approx(bm["l_dpr"], rel=1e-6)
    want, _ = ref_loss(q, pos, hard, hv, None, None)
    assert base == pytest.approx(want, rel=1e-5)


def test_lambda_traced_zero_no_nan():
    q, pos, hard, hv, cf, cv = make_batch(4)
    val0, grads0 = grads_of(q, pos, hard, hv, cf, cv, lam=0.0, tau1=1.0, tau2=1.0)
    static0, _ = run(q, pos, hard, hv, cf, cv, lam=0.0, tau1=1.0, tau2=1.0, static=True)
    assert val0 == pytest.approx(static0, rel=1e-6)
    for gr in grads0:
        assert np.all(np.isfinite(gr))
    val, _ = grads_of(q, pos, hard, hv, cf, cv, lam=0.2, tau1=1.0, tau2=1.0)
    want, _ = ref_loss(q, pos, hard, hv, cf, cv, lam=0.2, tau1=1.0, tau2=1.0)
    assert val == pytest.approx(want, rel=1e-5)


def test_lambda_positive_adds_cf_only_for_valid():
    q, pos, hard, hv, cf, cv = make_batch(5)
    l0, m0 = run(q, pos, hard, hv, cf, cv, lam=0.0)
    l1, m1 = run(q, pos, hard, hv, cf, cv, lam=0.5)
    assert l1 > l0
    want, _ = ref_loss(q, pos, hard, hv, cf, cv, lam=0.5)
    assert l1 == pytest.approx(want, rel=1e-5)
    # With no valid cf at all, lambda has no effect.
    l2, _ = run(q, pos, hard, hv, cf, np.zeros_like(cv), lam=0.5)
    assert l2 == pytest.approx(l0, rel=1e-6)


# --------------------------------------------------------------------------------------------
# Missing counterfactuals / hard negatives
# --------------------------------------------------------------------------------------------


def test_missing_counterfactuals_contribute_dpr_only_and_mean_over_all_B():
    q, pos, hard, hv, cf, _ = make_batch(6)
    cv = np.array([True, False, True, False, False])
    kw = dict(lam=0.2, tau1=0.7, tau2=0.4)
    loss, m = run(q, pos, hard, hv, cf, cv, **kw)
    # Per question by hand: rows 1, 3, 4 have only the plain DPR term (no lambda term).
    def s(i, x):
        return float(np.dot(q[i].astype(np.float64), x.astype(np.float64)))

    B, H = q.shape[0], hard.shape[1]

    def negs(i):
        out = [s(i, pos[j]) for j in range(B) if j != i]
        return out + [s(i, hard[j, k]) for j in range(B) for k in range(H) if hv[j, k]]

    total = 0.0
    chn_rows = []
    for i in range(B):
        den = [s(i, pos[i])] + negs(i)
        if cv[i]:
            den.append(s(i, cf[i]) + math.log(0.2))
            chn = math.log1p(math.exp(s(i, cf[i]) - s(i, pos[i])))
            cden = [s(i, cf[i])] + negs(i) + [s(i, cf[j]) for j in range(B) if j != i and cv[j]]
            cpp = _lse(cden) - s(i, cf[i])
            chn_rows.append(chn)
        else:
            chn = cpp = 0.0
        total += _lse(den) - s(i, pos[i]) + 0.7 * chn + 0.4 * cpp
    assert loss == pytest.approx(total / B, rel=1e-5)
    # Term means are over all B = 5 questions, not over the 2 with a counterfactual.
    assert m["l_chn"] == pytest.approx(sum(chn_rows) / B, rel=1e-5)
    assert m["cf_valid_frac"] == pytest.approx(2 / 5)
    # Rows without a cf are untouched by lambda: their L_dpr equals the no-cf L_dpr, so the
    # batch L_dpr difference comes from rows 0 and 2 only (and is positive).
    _, m_nocf = run(q, pos, hard, hv, None, None)
    lam_only = 0.0
    for i in (0, 2):
        base = [s(i, pos[i])] + negs(i)
        lam_only += _lse(base + [s(i, cf[i]) + math.log(0.2)]) - _lse(base)
    assert m["l_dpr"] - m_nocf["l_dpr"] == pytest.approx(lam_only / B, rel=1e-3, abs=2e-6)
    assert lam_only > 0


def test_invalid_cf_content_is_ignored_even_nan():
    q, pos, hard, hv, cf, cv = make_batch(7)
    kw = dict(lam=0.2, tau1=1.0, tau2=1.0)
    loss, m = run(q, pos, hard, hv, cf, cv, **kw)
    cf2 = cf.copy()
    cf2[~cv] = np.nan
    loss2, m2 = run(q, pos, hard, hv, cf2, cv, **kw)
    assert loss2 == pytest.approx(loss, rel=1e-6)
    assert m2 == pytest.approx(m, rel=1e-6)
    _, grads = grads_of(q, pos, hard, hv, cf2, cv, **kw)
    for g in grads:
        assert np.all(np.isfinite(g))
    assert np.all(grads[3][~cv] == 0)  # no gradient into padding


def test_no_valid_cf_at_all():
    q, pos, hard, hv, cf, cv = make_batch(8)
    loss, m = run(q, pos, hard, hv, cf, np.zeros_like(cv), lam=0.2, tau1=1.0, tau2=1.0)
    base, _ = run(q, pos, hard, hv, None, None)
    assert loss == pytest.approx(base, rel=1e-6)
    assert m["l_chn"] == 0.0 and m["l_cpp"] == 0.0
    assert m["cf_margin"] == 0.0 and m["cf_valid_frac"] == 0.0


def test_invalid_hard_negatives_equal_dropping_them():
    q, pos, hard, _, cf, cv = make_batch(9, H=3)
    B = q.shape[0]
    hv = np.ones((B, 3), bool)
    hv[:, 2] = False  # the third slot is padding everywhere
    hv[1, 1] = False  # and question 1 has only one hard negative
    kw = dict(lam=0.2, tau1=1.0, tau2=1.0)
    loss, m = run(q, pos, hard, hv, cf, cv, **kw)
    # Same as physically removing slot 2 ...
    loss_drop, m_drop = run(q, pos, hard[:, :2], hv[:, :2], cf, cv, **kw)
    assert loss == pytest.approx(loss_drop, rel=1e-6)
    # ... and the padding content does not matter (not even a huge score, which a 0/1 multiply
    # would turn into a logit of 0 instead of removing it).
    hard2 = hard.copy()
    hard2[~hv] = 1e3
    loss2, m2 = run(q, pos, hard2, hv, cf, cv, **kw)
    assert loss2 == pytest.approx(loss, rel=1e-6)
    assert m2["mean_pos_rank"] == m["mean_pos_rank"]
    want, _ = ref_loss(q, pos, hard, hv, cf, cv, **kw)
    assert loss == pytest.approx(want, rel=1e-5)


def test_masked_logits_are_removed_not_zeroed():
    # All real scores are very negative relative to 0: a "masked -> 0" bug would dominate.
    q = np.array([[1.0, 0.0], [1.0, 0.0]], np.float32)
    pos = np.array([[-50.0, 1.0], [-60.0, 2.0]], np.float32)
    hard = np.array([[[-70.0, 3.0]], [[5.0, 4.0]]], np.float32)
    hv = np.array([[True], [False]])
    cf = np.zeros((2, 2), np.float32)
    loss, _ = run(q, pos, hard, hv, cf, np.array([False, False]))
    want = ((math.log(1 + math.exp(-10) + math.exp(-20))) + (math.log(1 + math.exp(10) + math.exp(-10)))) / 2
    assert loss == pytest.approx(want, rel=1e-6)


def test_h_zero():
    q, pos, hard, hv, cf, cv = make_batch(10, H=0)
    assert hard.shape[1] == 0
    kw = dict(lam=0.2, tau1=1.0, tau2=1.0)
    loss, m = run(q, pos, hard, hv, cf, cv, **kw)
    want, wm = ref_loss(q, pos, None, None, cf, cv, **kw)
    assert loss == pytest.approx(want, rel=1e-5)
    assert m == pytest.approx(wm, rel=1e-5, abs=1e-6)
    # (hard=None is covered by test_single_question_no_negatives)


def test_single_question_no_negatives():
    # B=1, H=0: N is empty, so L_dpr = 0 and L_cpp = 0 (only the target in each row); finite grads.
    q = np.array([[1.0, 2.0]], np.float32)
    pos = np.array([[0.5, 0.5]], np.float32)
    cf = np.array([[0.5, 0.0]], np.float32)
    kw = dict(lam=0.0, tau1=1.0, tau2=1.0)
    loss, m = run(q, pos, None, None, cf, np.array([True]), **kw)
    assert m["l_dpr"] == pytest.approx(0.0, abs=1e-7)
    assert m["l_cpp"] == pytest.approx(0.0, abs=1e-7)
    assert m["l_chn"] == pytest.approx(math.log1p(math.exp(0.5 - 1.5)), rel=1e-6)
    assert m["rank_acc"] == 1.0 and m["mean_pos_rank"] == 1.0
    _, g = grads_of(q, pos, None, None, cf, np.array([True]), **kw)
    for x in (g[0], g[1], g[3]):
        assert np.all(np.isfinite(x))


# --------------------------------------------------------------------------------------------
# Ablations
# --------------------------------------------------------------------------------------------


def test_use_dpr_false_and_tau_subsets_add_up():
    q, pos, hard, hv, cf, cv = make_batch(11)
    terms = {}
    for name, kw in {
        "dpr": dict(lam=0.2),
        "chn": dict(use_dpr=False, tau1=1.0),
        "cpp": dict(use_dpr=False, tau2=1.0),
    }.items():
        terms[name], _ = run(q, pos, hard, hv, cf, cv, **kw)
    full, m = run(q, pos, hard, hv, cf, cv, lam=0.2, tau1=0.3, tau2=0.6)
    assert full == pytest.approx(terms["dpr"] + 0.3 * terms["chn"] + 0.6 * terms["cpp"], rel=1e-5)
    assert m["l_chn"] == pytest.approx(terms["chn"], rel=1e-5)
    assert m["l_cpp"] == pytest.approx(terms["cpp"], rel=1e-5)
    nothing, m0 = run(q, pos, hard, hv, cf, cv, use_dpr=False)
    assert nothing == 0.0
    assert m0["l_dpr"] > 0  # still reported for monitoring


# --------------------------------------------------------------------------------------------
# Gradients, jit, dtypes, invariance
# --------------------------------------------------------------------------------------------


def test_dpr_gradient_matches_softmax_formula():
    # d L_dpr / d q_i = (sum_x softmax_x * x - p_i+) / B over x in {p_i+} U N_i.
    q, pos, hard, hv, _, _ = make_batch(12)
    # dpr_nll is the plain-DPR wrapper: same value as contrastive_loss without counterfactuals.
    val, g = jax.jit(jax.value_and_grad(lambda *a: dpr_nll(*a)[0]))(*[jnp.asarray(x) for x in (q, pos, hard, hv)])
    base, _ = run(q, pos, hard, hv, None, None, static=True)
    assert float(val) == pytest.approx(base, rel=1e-6)
    g = np.asarray(g)
    B, H, D = hard.shape
    for i in range(B):
        cands = [pos[i]] + [pos[j] for j in range(B) if j != i]
        cands += [hard[j, k] for j in range(B) for k in range(H) if hv[j, k]]
        logits = [_dot(q[i], c) for c in cands]
        z = _lse(logits)
        want = [0.0] * D
        for c, lg in zip(cands, logits):
            for d in range(D):
                want[d] += math.exp(lg - z) * float(c[d])
        for d in range(D):
            want[d] = (want[d] - float(pos[i][d])) / B
            assert g[i, d] == pytest.approx(want[d], rel=1e-4, abs=1e-6)


def test_gradients_finite_with_masks():
    q, pos, hard, hv, cf, cv = make_batch(13, scale=8.0)
    hv[:, 0] = False
    kw = dict(lam=0.2, tau1=1.0, tau2=1.0)
    _, grads = grads_of(q, pos, hard, hv, cf, cv, **kw)
    for g in grads:
        assert np.all(np.isfinite(g))
    assert np.any(grads[0] != 0)
    assert np.all(grads[2][~hv] == 0)  # padded hard negatives get no gradient


def test_jit_static_and_traced_agree():
    q, pos, hard, hv, cf, cv = make_batch(14)
    kw = dict(lam=0.2, tau1=1.0, tau2=1.0)
    ls, ms = run(q, pos, hard, hv, cf, cv, static=True, **kw)
    lt, mt = run(q, pos, hard, hv, cf, cv, static=False, **kw)
    want, wm = ref_loss(q, pos, hard, hv, cf, cv, **kw)
    assert ls == pytest.approx(want, rel=1e-5) and lt == pytest.approx(want, rel=1e-5)
    assert ms == pytest.approx(mt, rel=1e-6, abs=1e-7)
    assert ms == pytest.approx(wm, rel=1e-5, abs=1e-6)


def test_bfloat16_inputs_give_float32_loss():
    q, pos, hard, hv, cf, cv = make_batch(15)
    kw = dict(lam=0.2, tau1=1.0, tau2=1.0)
    bf = [jnp.asarray(x, jnp.bfloat16) for x in (q, pos, hard)] + [jnp.asarray(hv)]
    bf += [jnp.asarray(cf, jnp.bfloat16), jnp.asarray(cv)]
    (loss, m), g = _value_and_grad(bf[0], bf[1], bf[2], bf[4], bf[3], bf[5], use_dpr=True, **_traced(kw))
    assert loss.dtype == jnp.float32
    assert all(v.dtype == jnp.float32 for v in m.values())
    # equals the float32 computation on the bf16-rounded values
    rounded = [np.asarray(x.astype(jnp.float32)) if x.dtype == jnp.bfloat16 else np.asarray(x) for x in bf]
    want, _ = ref_loss(*rounded, **kw)
    assert float(loss) == pytest.approx(want, rel=1e-5)
    assert all(x.dtype == jnp.bfloat16 for x in g)  # gradients come back in the input dtype
    assert all(np.all(np.isfinite(np.asarray(x, np.float32))) for x in g)


def test_batch_permutation_invariance():
    q, pos, hard, hv, cf, cv = make_batch(16)
    kw = dict(lam=0.2, tau1=1.0, tau2=1.0)
    loss, m = run(q, pos, hard, hv, cf, cv, **kw)
    perm = np.array([3, 0, 4, 1, 2])
    loss_p, m_p = run(q[perm], pos[perm], hard[perm], hv[perm], cf[perm], cv[perm], **kw)
    assert loss_p == pytest.approx(loss, rel=1e-6)
    assert m_p == pytest.approx(m, rel=1e-6)
    # permuting hard negatives within an example also changes nothing
    loss_h, _ = run(q, pos, hard[:, ::-1], hv[:, ::-1], cf, cv, **kw)
    assert loss_h == pytest.approx(loss, rel=1e-6)


# --------------------------------------------------------------------------------------------
# Config plumbing
# --------------------------------------------------------------------------------------------


def test_loss_hparams_from_config():
    cfg = ml_collections.ConfigDict(
        {"loss": {"lam": 0.2, "tau1": 1.0, "tau2": 0.5, "use_dpr": False}, "other": 1}
    )
    kw = loss_hparams(cfg.loss)
    assert kw == {"lam": 0.2, "tau1": 1.0, "tau2": 0.5, "use_dpr": False}
    assert loss_hparams({}) == LossConfig().kwargs()
    assert LossConfig().kwargs() == {"lam": 0.0, "tau1": 0.0, "tau2": 0.0, "use_dpr": True}
    with pytest.raises(ValueError):
        loss_hparams({"lam": -1.0})
    q, pos, hard, hv, cf, cv = make_batch(17)
    loss, _ = run(q, pos, hard, hv, cf, cv, **kw)
    want, _ = ref_loss(q, pos, hard, hv, cf, cv, **kw)
    assert loss == pytest.approx(want, rel=1e-5)


def test_shape_errors():
    q = jnp.zeros((2, 3))
    with pytest.raises(ValueError):
        contrastive_loss(q, jnp.zeros((3, 3)), None, None, None, None)
    with pytest.raises(ValueError):
        contrastive_loss(q, q, jnp.zeros((2, 1, 4)), None, None, None)
    with pytest.raises(ValueError):
        contrastive_loss(q, q, None, None, jnp.zeros((2, 3)), jnp.zeros((3,), bool))
