"""MDR (Xiong et al., ICLR 2021) with DPR or EADPR training on each hop (docs/multihop.md).

One question encoder reads the hop-1 query (the question) and the hop-2 query (question [SEP]
first supporting passage); the passage encoder (shared with it under ``model.shared``) reads
the two supporting passages, the hard negatives and, for EADPR, the counterfactuals of the
supporting passages (their supporting sentences removed).

The loss flattens the two hops of the GLOBAL batch into one contrastive batch of 2B rows,
queries ``[q ; q⊕p1]`` against positives ``[p1 ; p2]``, and applies the single-hop contrastive
loss (:func:`dense_cf.losses.contrastive_terms`, the same λ, τ1, τ2 terms as EADPR) to it:

* every query has every other row's positive as an in-batch negative (both hops' passages, as
  MDR's loss scores each query against all c1 and c2 of the batch), except that a hop-1 query
  does not count its own second passage p2 as a negative (``in_batch_valid``; MDR masks it
  too). A hop-2 query keeps its own p1 as a negative: it must move on from the passage it reads;
* hard negatives (the example's distractor paragraphs) sit on the hop-1 rows only, so each is a
  negative of every query once;
* counterfactual p1* pairs with the hop-1 query, p2* with the hop-2 query (L_dpr's λ term,
  L_HN and L_PP per row, docs/method.md §3);
* the loss is the sum of the two hops' mean losses (MDR adds its two cross-entropies); metrics
  are reported over both hops and per hop (``hop1_*``, ``hop2_*``).
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from dense_cf.configs import checks
from dense_cf.inputs import multihop as multihop_inputs
from dense_cf.losses import contrastive_terms, summarize_terms
from dense_cf.methods import contrastive
from dense_cf.methods.base import Inputs, Method

__all__ = ["HOP_METRICS", "INPUTS", "HopEmbeddings", "config_problems", "embed_hops",
           "flatten_hops", "make", "multihop_loss"]

# Per-hop metrics reported as hop1_<name>, hop2_<name>.
HOP_METRICS = ("loss", "l_dpr", "rank_acc", "mean_pos_rank", "cf_margin")


@flax.struct.dataclass
class HopEmbeddings:
    """Embeddings of one MDR batch, one row per example: queries ``q1`` (question) and ``q2``
    (question ⊕ p1), positives ``p1``, ``p2`` [B, D], hard negatives ``neg`` [B, H, D] with
    ``neg_valid`` [B, H], optional counterfactuals ``cf1``, ``cf2`` [B, D] with validity [B]."""

    q1: jax.Array
    q2: jax.Array
    p1: jax.Array
    p2: jax.Array
    neg: jax.Array
    neg_valid: jax.Array
    cf1: jax.Array | None = None
    cf2: jax.Array | None = None
    cf1_valid: jax.Array | None = None
    cf2_valid: jax.Array | None = None


def embed_hops(model, params, batch: dict[str, jax.Array], *, deterministic: bool,
               rngs: dict[str, jax.Array] | None = None) -> HopEmbeddings:
    """Both queries with the question encoder, every passage of an example in one passage-encoder
    call ([B, 2 + h (+2), Lp] flattened)."""
    def question(ids, mask):
        return model.apply({"params": params}, ids, mask, deterministic=deterministic, rngs=rngs,
                           method=model.encode_question)

    q1 = question(batch["q_ids"], batch["q_mask"])
    q2 = question(batch["q2_ids"], batch["q2_mask"])
    b, h = batch["hard_ids"].shape[:2]
    has_cf = "cf1_ids" in batch
    names = ["p1", "p2"] + (["cf1", "cf2"] if has_cf else [])
    ids = jnp.concatenate([batch[f"{n}_ids"][:, None] for n in names] + [batch["hard_ids"]], 1)
    mask = jnp.concatenate([batch[f"{n}_mask"][:, None] for n in names] + [batch["hard_mask"]],
                           1)
    n = ids.shape[1]
    p = model.apply({"params": params}, ids.reshape(b * n, -1), mask.reshape(b * n, -1),
                    deterministic=deterministic, rngs=rngs, method=model.encode_passage)
    p = p.reshape(b, n, -1)
    k = len(names)
    return HopEmbeddings(q1=q1, q2=q2, p1=p[:, 0], p2=p[:, 1], neg=p[:, k:],
                         neg_valid=batch["hard_valid"],
                         cf1=p[:, 2] if has_cf else None, cf2=p[:, 3] if has_cf else None,
                         cf1_valid=batch["cf1_valid"] if has_cf else None,
                         cf2_valid=batch["cf2_valid"] if has_cf else None)


def flatten_hops(emb: HopEmbeddings) -> dict[str, jax.Array | None]:
    """The 2B-row contrastive batch of the module docstring: ``q``, ``pos``, ``hard``,
    ``hard_valid``, ``cf``, ``cf_valid`` and ``in_batch_valid`` [2B, 2B] (False at (i, B + i):
    a hop-1 query's own p2)."""
    b = emb.q1.shape[0]
    hard = jnp.concatenate([emb.neg, jnp.zeros_like(emb.neg)], axis=0)
    hard_valid = jnp.concatenate([emb.neg_valid, jnp.zeros_like(emb.neg_valid)], axis=0)
    own_p2 = jnp.eye(2 * b, k=b, dtype=bool)  # row i < B, column B + i
    out = {"q": jnp.concatenate([emb.q1, emb.q2]), "pos": jnp.concatenate([emb.p1, emb.p2]),
           "hard": hard, "hard_valid": hard_valid, "cf": None, "cf_valid": None,
           "in_batch_valid": ~own_p2}
    if emb.cf1 is not None:
        out["cf"] = jnp.concatenate([emb.cf1, emb.cf2])
        out["cf_valid"] = jnp.concatenate([emb.cf1_valid, emb.cf2_valid])
    return out


def multihop_loss(emb: HopEmbeddings, **hparams) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Sum over the two hops of the mean contrastive loss (module docstring), with metrics over
    both hops and per hop."""
    b = emb.q1.shape[0]
    f = flatten_hops(emb)
    terms = contrastive_terms(f["q"], f["pos"], f["hard"], f["hard_valid"], f["cf"],
                              f["cf_valid"], in_batch_valid=f["in_batch_valid"], **hparams)
    loss = jnp.mean(terms["total"][:b]) + jnp.mean(terms["total"][b:])
    metrics = summarize_terms(terms)
    metrics["loss"] = loss
    for hop, rows in ((1, slice(0, b)), (2, slice(b, 2 * b))):
        per_hop = summarize_terms(terms, rows)
        metrics.update({f"hop{hop}_{k}": per_hop[k] for k in HOP_METRICS})
    return loss, metrics


INPUTS = Inputs(prepare=lambda config, tokenizer, data: data,
                spec=multihop_inputs.spec_from_config, make_dataset=multihop_inputs.make_dataset,
                batch_iterator=multihop_inputs.BatchIterator,
                load=multihop_inputs.load_config_split,
                # the two queries apart; every passage of an example in one encoder call
                length_groups=(("q",), ("q2",), ("p1", "p2", "cf1", "cf2", "hard")))


def config_problems(config) -> list[str]:
    """``config.multihop`` (docs/multihop.md)."""
    out: list[str] = []
    mh, d = config.multihop, config.data
    checks.enum(out, "multihop.comparison_order", mh.comparison_order,
                multihop_inputs.COMPARISON_ORDERS)
    checks.number(out, "multihop.max_hop2_len", mh.max_hop2_len, 2, 512)
    if isinstance(mh.max_hop2_len, int) and isinstance(d.max_q_len, int) and \
            mh.max_hop2_len <= d.max_q_len:
        out.append(f"config.multihop.max_hop2_len={mh.max_hop2_len} must exceed "
                   f"config.data.max_q_len={d.max_q_len} (the hop-2 query holds the question "
                   f"and a passage)")
    for f in ("beam_size", "hop2_k", "top_chains"):
        checks.number(out, f"multihop.{f}", mh[f], 1)
    for k in mh.ks:
        checks.number(out, "multihop.ks[]", k, 1, mh.top_chains)
    return out


def make(name: str, defaults) -> Method:
    """An MDR method whose ``config.loss`` weights default to ``defaults``: ``mdr`` (DPR's) and
    ``mdr-eadpr`` (EADPR's) differ only in them, as DPR and EADPR do."""
    return contrastive.make(name, defaults, loss=multihop_loss, embed=embed_hops, inputs=INPUTS,
                            hops=2, config_block="multihop", config_problems=config_problems)
