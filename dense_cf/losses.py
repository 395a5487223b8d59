"""Contrastive losses for DPR / PiCL / EADPR (docs/method.md §3; PiCL eq. 7-10; EADPR eq. 3, 5, 7, 8),
and the extractive reader's loss (:func:`reader_loss`, docs/readers.md, "Loss") at the end.

Every function here is a pure, jittable function of GLOBAL-batch embeddings: the caller gathers
question/passage embeddings across the data axis first (docs/method.md §1), so that "in-batch" means the
whole global batch. Scores are dot products computed in float32 whatever the input dtype.

Notation (question i of B): p_i+ positive, p_i* counterfactual of p_i+ (may be missing,
``cf_valid[i] == False``), h_{j,k} the k-th hard negative of question j (may be padding,
``hard_valid[j, k] == False``), s(i, x) = q_i . x.

* N_i (in-batch negatives of question i) = {p_j+ : j != i} U {every valid h_{j,k}, all j incl. i}.
  Other questions' counterfactuals are NOT in N_i (docs/method.md §3).
* L_dpr (PiCL eq. 7 / EADPR eq. 7)
      -log e^{s(i,p_i+)} / (e^{s(i,p_i+)} + sum_{n in N_i} e^{s(i,n)} + lam e^{s(i,p_i*)})
  with the lam term present only when lam > 0 and p_i* is valid; lam e^x is written x + log lam.
* L_chn (PiCL eq. 8 / EADPR eq. 3, "L_HN")
      -log e^{s(i,p_i+)} / (e^{s(i,p_i+)} + e^{s(i,p_i*)}),     0 when p_i* is missing.
* L_cpp (PiCL eq. 9 / EADPR eq. 5, "L_PP")
      -log e^{s(i,p_i*)} / (e^{s(i,p_i*)} + sum_{j != i} (e^{s(i,p_j-)} + e^{s(i,p_j*)})),
  0 when p_i* is missing. Decision on {p_j-}: eq. 9 uses exactly the same negative set
  {p_j-}_{j != i} as eq. 7, and eq. 6 (the constraint L_cpp implements) requires
  s(i,p_i*) > s(i,p_j-) "for all p_j-", i.e. all of question i's negatives. In DPR those are the
  in-batch negatives N_i = other questions' positives + hard negatives, so the L_cpp denominator
  is  {p_i*} U N_i U {valid p_j* : j != i}.  p_i+ is excluded (docs/method.md §3); question i's own hard
  negatives are included (docs/method.md §3: "Question i's own hard negatives count among the p-").
* L = use_dpr * L_dpr + tau1 * L_chn + tau2 * L_cpp  (PiCL eq. 10 / EADPR eq. 8); the batch loss
  is the mean over ALL B questions (terms of questions without p_i* are 0, not re-normalised).
* ``in_batch_valid`` (optional bool [B, B]) removes pairs from the in-batch sets: p_j+ (and
  p_j*) is a negative of question i only where it is True. MDR (docs/multihop.md) uses it so
  that a hop-1 query does not count its own second supporting passage as a negative.
  :func:`contrastive_terms` returns the per-question terms, for losses that average over parts
  of the batch (per hop).

Masking: excluded logits are set to -inf with ``jnp.where`` BEFORE the logsumexp (never scaled by
0/1, docs/method.md §3). Every row always contains its own finite target logit, so no row is all -inf and
gradients stay finite. Padding embeddings (invalid hard negatives / counterfactuals) are also
zeroed before scoring so that garbage (even NaN) in padding cannot leak into gradients.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["answer_nll_loss", "contrastive_loss", "contrastive_terms", "dpr_nll", "reader_loss",
           "summarize_terms"]

_NEG_INF = -jnp.inf


def _is_static_zero(x: Any) -> bool:
    """True for a Python/numpy scalar equal to 0 (any jax.Array, traced or not, is not)."""
    if isinstance(x, (bool, int, float, np.number)):
        return float(x) == 0.0
    return False


def _scores(a: jax.Array, b: jax.Array) -> jax.Array:
    """[B, D] x [M, D] -> [B, M] float32 dot products (full float32 precision)."""
    return jnp.einsum(
        "bd,md->bm",
        a,
        b,
        precision=jax.lax.Precision.HIGHEST,
        preferred_element_type=jnp.float32,
    )


def contrastive_loss(
    q: jax.Array,
    pos: jax.Array,
    hard: jax.Array | None,
    hard_valid: jax.Array | None,
    cf: jax.Array | None,
    cf_valid: jax.Array | None,
    *,
    lam: float | jax.Array = 0.0,
    tau1: float | jax.Array = 0.0,
    tau2: float | jax.Array = 0.0,
    use_dpr: bool = True,
    in_batch_valid: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """PiCL / EADPR loss L = use_dpr*L_dpr + tau1*L_chn + tau2*L_cpp over a global batch.

    See the module docstring for the exact terms (docs/method.md §3, PiCL eq. 7-10, EADPR eq. 3/5/7/8).

    Args:
      q: [B, D] question embeddings.  pos: [B, D] positive-passage embeddings.
      hard: [B, H, D] hard-negative embeddings (H may be 0) or None.
      hard_valid: bool [B, H]; False slots are padding and are excluded everywhere. None = all valid.
      cf: [B, D] counterfactual embeddings or None (no counterfactual terms at all).
      cf_valid: bool [B]; None with a given ``cf`` means all valid.
      lam: weight of e^{s(i,p_i*)} in L_dpr's denominator (0 = term absent; may be traced).
      tau1, tau2: weights of L_chn and L_cpp (a Python 0 skips the term; may be traced).
      use_dpr: include L_dpr (Python bool; False for the L_chn + L_cpp ablation, PiCL Table 4).
      in_batch_valid: bool [B, B] or None: p_j+ and p_j* are in-batch negatives of question i
        only where True (the diagonal is never one). None = every j != i.

    Returns:
      (loss, metrics): scalar float32 loss = mean over all B questions of the per-question total;
      metrics are float32 scalars averaged over all B questions the same way:
      loss; l_dpr, l_chn, l_cpp = unweighted term means (l_dpr and l_chn are always reported,
      also when use_dpr=False / tau1=0, as they reuse scores needed anyway; l_cpp is not computed
      and reads 0 when tau2 is a Python 0); rank_acc = share with s(i,p_i+) > every score in N_i;
      mean_pos_rank = 1-based rank of p_i+ among {p_i+} U N_i (ties count against p_i+);
      cf_valid_frac; cf_margin = mean of s(i,p_i+) - s(i,p_i*) over the valid counterfactuals
      (the one metric averaged over valid cfs, by definition; 0 if none).
    """
    terms = contrastive_terms(q, pos, hard, hard_valid, cf, cf_valid, lam=lam, tau1=tau1,
                              tau2=tau2, use_dpr=use_dpr, in_batch_valid=in_batch_valid)
    return jnp.mean(terms["total"]), summarize_terms(terms)


def contrastive_terms(
    q: jax.Array,
    pos: jax.Array,
    hard: jax.Array | None,
    hard_valid: jax.Array | None,
    cf: jax.Array | None,
    cf_valid: jax.Array | None,
    *,
    lam: float | jax.Array = 0.0,
    tau1: float | jax.Array = 0.0,
    tau2: float | jax.Array = 0.0,
    use_dpr: bool = True,
    in_batch_valid: jax.Array | None = None,
) -> dict[str, jax.Array]:
    """Per-question terms of :func:`contrastive_loss` (same arguments), float32 [B] arrays:
    ``total`` (the per-question loss), ``l_dpr``, ``l_chn``, ``l_cpp``; and, without gradient,
    ``n_ge`` (negatives scoring >= the positive), ``cf_valid`` (0/1) and ``margin``
    (s(i,p_i+) - s(i,p_i*), 0 without p_i*)."""
    if q.ndim != 2 or pos.shape != q.shape:
        raise ValueError(f"q and pos must both be [B, D]; got {q.shape} and {pos.shape}")
    B, D = q.shape
    f32 = jnp.float32
    q = q.astype(f32)
    pos = pos.astype(f32)

    # ---- hard negatives: flatten [B, H, D] -> [B*H, D], validity [B*H] ----------------------
    if hard is None:
        hard = jnp.zeros((B, 0, D), f32)
    if hard.ndim != 3 or hard.shape[0] != B or hard.shape[2] != D:
        raise ValueError(f"hard must be [B, H, D] = [{B}, H, {D}]; got {hard.shape}")
    H = hard.shape[1]
    if hard_valid is None:
        hard_valid = jnp.ones((B, H), bool)
    if hard_valid.shape != (B, H):
        raise ValueError(f"hard_valid must be [{B}, {H}]; got {hard_valid.shape}")
    hard_valid = hard_valid.astype(bool).reshape(B * H)
    hard = jnp.where(hard_valid[:, None], hard.astype(f32).reshape(B * H, D), 0.0)

    # ---- counterfactuals -----------------------------------------------------------------
    have_cf = cf is not None
    if have_cf:
        if cf.shape != (B, D):
            raise ValueError(f"cf must be [{B}, {D}]; got {cf.shape}")
        if cf_valid is None:
            cf_valid = jnp.ones((B,), bool)
        if cf_valid.shape != (B,):
            raise ValueError(f"cf_valid must be [{B}]; got {cf_valid.shape}")
        cf_valid = cf_valid.astype(bool)
        cf = jnp.where(cf_valid[:, None], cf.astype(f32), 0.0)
    else:
        cf_valid = jnp.zeros((B,), bool)

    # ---- scores: ONE float32 matmul against [pos; hard; cf] so equal passages tie exactly ----
    cols = [pos, hard] + ([cf] if have_cf else [])
    s_all = _scores(q, jnp.concatenate(cols, axis=0))  # [B, B + B*H (+ B)]
    s_pp = s_all[:, :B]  # s(i, p_j+)
    s_hard = s_all[:, B : B + B * H]  # s(i, h)
    eye = jnp.eye(B, dtype=bool)
    if in_batch_valid is not None:
        if in_batch_valid.shape != (B, B):
            raise ValueError(f"in_batch_valid must be [{B}, {B}]; got {in_batch_valid.shape}")
        not_in_batch = eye | ~in_batch_valid.astype(bool)
    else:
        not_in_batch = eye
    s_pos = jnp.diagonal(s_pp)  # s(i, p_i+)
    # N_i: other questions' positives + every valid hard negative.
    neg_pp = jnp.where(not_in_batch, _NEG_INF, s_pp)
    neg_hard = jnp.where(hard_valid[None, :], s_hard, _NEG_INF)
    neg = jnp.concatenate([neg_pp, neg_hard], axis=1)  # [B, B + B*H]

    zero = jnp.zeros((B,), f32)
    if have_cf:
        s_cc = s_all[:, B + B * H :]  # s(i, p_j*)
        s_cf = jnp.diagonal(s_cc)  # s(i, p_i*)
    else:
        s_cc = None
        s_cf = zero

    # ---- L_dpr (PiCL eq. 7) -----------------------------------------------------------------
    dpr_logits = [s_pos[:, None], neg]
    if have_cf and not _is_static_zero(lam):
        lam_arr = jnp.asarray(lam, f32)
        lam_on = lam_arr > 0
        log_lam = jnp.log(jnp.where(lam_on, lam_arr, 1.0))  # safe: never log(0)
        lam_logit = jnp.where(cf_valid & lam_on, s_cf + log_lam, _NEG_INF)
        dpr_logits.append(lam_logit[:, None])
    l_dpr = jax.nn.logsumexp(jnp.concatenate(dpr_logits, axis=1), axis=1) - s_pos

    # ---- L_chn (PiCL eq. 8) -----------------------------------------------------------------
    if have_cf:
        # -log sigmoid(s+ - s*) = softplus(s* - s+), stable.
        l_chn = jnp.where(cf_valid, jax.nn.softplus(s_cf - s_pos), 0.0)
    else:
        l_chn = zero

    # ---- L_cpp (PiCL eq. 9) -----------------------------------------------------------------
    if have_cf and not _is_static_zero(tau2):
        other_cf = jnp.where(~not_in_batch & cf_valid[None, :], s_cc, _NEG_INF)
        cpp_logits = jnp.concatenate([s_cf[:, None], neg, other_cf], axis=1)
        l_cpp = jnp.where(cf_valid, jax.nn.logsumexp(cpp_logits, axis=1) - s_cf, 0.0)
    else:
        l_cpp = zero

    # ---- total (PiCL eq. 10) ----------------------------------------------------------------
    per_q = zero
    if use_dpr:
        per_q = per_q + l_dpr
    if have_cf and not _is_static_zero(tau1):
        per_q = per_q + jnp.asarray(tau1, f32) * l_chn
    if have_cf and not _is_static_zero(tau2):
        per_q = per_q + jnp.asarray(tau2, f32) * l_cpp

    # ---- metric inputs (no gradient) --------------------------------------------------------
    sp = jax.lax.stop_gradient(s_pos)
    ng = jax.lax.stop_gradient(neg)
    n_ge = jnp.sum(ng >= sp[:, None], axis=1)  # -inf never >= a finite score
    margin = jnp.where(cf_valid, sp - jax.lax.stop_gradient(s_cf), 0.0)
    return {"total": per_q, "l_dpr": l_dpr, "l_chn": l_chn, "l_cpp": l_cpp,
            "n_ge": n_ge.astype(f32), "cf_valid": cf_valid.astype(f32), "margin": margin}


def summarize_terms(terms: dict[str, jax.Array], rows: slice | None = None
                    ) -> dict[str, jax.Array]:
    """The metrics of :func:`contrastive_loss` over the questions ``rows`` (default all) of
    :func:`contrastive_terms`' output: means over those questions; ``cf_margin`` over their
    valid counterfactuals (0 if none)."""
    t = {k: jax.lax.stop_gradient(v if rows is None else v[rows]) for k, v in terms.items()}
    n = t["total"].shape[0]
    f32 = jnp.float32
    n_cf = jnp.sum(t["cf_valid"])
    return {
        "loss": jnp.mean(t["total"]),
        "l_dpr": jnp.mean(t["l_dpr"]),
        "l_chn": jnp.mean(t["l_chn"]),
        "l_cpp": jnp.mean(t["l_cpp"]),
        "rank_acc": jnp.mean((t["n_ge"] == 0).astype(f32)),
        "mean_pos_rank": jnp.mean(1.0 + t["n_ge"]),
        "cf_valid_frac": n_cf / n,
        "cf_margin": jnp.sum(t["margin"]) / jnp.maximum(n_cf, 1.0),
    }


def dpr_nll(
    q: jax.Array,
    pos: jax.Array,
    hard: jax.Array | None = None,
    hard_valid: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Plain DPR NLL (Karpukhin et al. 2020; docs/method.md §3 with lam = tau1 = tau2 = 0): positive vs.
    other questions' positives + every valid hard negative of the global batch."""
    return contrastive_loss(q, pos, hard, hard_valid, None, None, use_dpr=True)


# --------------------------------------------------------------------------- extractive reader

_READER_NEG = -1e9  # excluded logits (finite: a row that is all masked stays NaN-free)


def reader_loss(select: jax.Array, passage_valid: jax.Array, start: jax.Array, end: jax.Array,
                text: jax.Array, starts: jax.Array, ends: jax.Array, span_valid: jax.Array
                ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """DPR's reader loss per question, averaged over the batch (docs/readers.md, "Loss").

    ``select`` [B, P] selection logits of 1 positive (column 0) + P-1 negatives, ``passage_valid``
    [B, P] (missing negatives are masked out of the softmax); ``start``/``end`` [B, L] token logits
    of the positive, ``text`` [B, L] bool (the positions of its passage text: every other position
    is excluded from the span softmaxes); ``starts``/``ends`` [B, A] gold spans in the positive
    (token positions, inclusive) with ``span_valid`` [B, A].

    ``l_select = -log softmax(select)[0]``; ``l_span = -log sum_a p_start(s_a) p_end(e_a)``, the
    likelihood marginalised over every gold occurrence (DPR's ``_calc_mml``); loss = mean over
    questions of ``l_select + l_span`` (a question without a valid span adds no span term).
    Metrics: ``rank_acc`` (the positive has the top selection logit), ``span_acc`` (the argmax
    start and end form a gold span).
    """
    select = jnp.where(passage_valid, select.astype(jnp.float32), _READER_NEG)
    l_select = -jax.nn.log_softmax(select, axis=-1)[:, 0]
    s_lp = jax.nn.log_softmax(jnp.where(text, start.astype(jnp.float32), _READER_NEG), axis=-1)
    e_lp = jax.nn.log_softmax(jnp.where(text, end.astype(jnp.float32), _READER_NEG), axis=-1)
    gold = (jnp.take_along_axis(s_lp, starts, axis=-1)
            + jnp.take_along_axis(e_lp, ends, axis=-1))
    gold = jnp.where(span_valid, gold, 2 * _READER_NEG)
    has_span = span_valid.any(axis=-1)
    l_span = jnp.where(has_span, -jax.nn.logsumexp(gold, axis=-1), 0.0)
    loss = jnp.mean(l_select + l_span)
    pred_s = jnp.argmax(s_lp, axis=-1)[:, None]
    pred_e = jnp.argmax(e_lp, axis=-1)[:, None]
    span_hit = ((starts == pred_s) & (ends == pred_e) & span_valid).any(axis=-1)
    metrics = {"loss": loss, "l_select": jnp.mean(l_select), "l_span": jnp.mean(l_span),
               "rank_acc": jnp.mean(jnp.argmax(select, axis=-1) == 0),
               "span_acc": jnp.mean(span_hit)}
    return loss, metrics


def answer_nll_loss(ll: jax.Array, correct: jax.Array, valid: jax.Array
                    ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """A generative reader's teacher-forced loss (docs/readers.md, "Fusion-in-Decoder"): the mean
    negative log-likelihood over the batch's answer tokens (HF's seq2seq loss; FiD's).

    ``ll`` float [B, T] log p(label_t | ...), ``correct`` bool [B, T] (argmax = label), ``valid``
    bool [B, T] (False: padding after ``</s>``). Metrics: ``loss``, ``token_accuracy``,
    ``sequence_accuracy`` (every answer token right, over rows with an answer), ``tokens``.
    """
    valid = valid.astype(bool)
    n_tok = jnp.sum(valid)
    denom = jnp.maximum(n_tok, 1)
    loss = -jnp.sum(jnp.where(valid, ll.astype(jnp.float32), 0.0)) / denom
    correct = correct.astype(bool) & valid
    has_answer = jnp.any(valid, axis=-1)
    row_right = jnp.all(correct | ~valid, axis=-1) & has_answer
    return loss, {"loss": loss, "token_accuracy": jnp.sum(correct) / denom,
                  "sequence_accuracy": jnp.sum(row_right) / jnp.maximum(jnp.sum(has_answer), 1),
                  "tokens": n_tok}
