"""DCSR: contrastive learning over contextual sentence vectors (docs/method.md §4).

Passages carry a ``<sent>`` marker before each sentence; a sentence's vector is the encoder
output at its marker. Training is DPR's loss over sentences (the positive sentence, sampled
negative sentences and every other sentence of the global batch); retrieval indexes sentences
and ranks passages by HasAns (``dense_cf.retrieval.sentence_ranking``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dense_cf.configs import checks
from dense_cf.inputs import dcsr as dcsr_inputs
from dense_cf.methods.base import DPR_LENGTH_GROUPS, Embeddings, Inputs, Method, SentenceIndex
from dense_cf.methods.contrastive import DPR_LOSS, contrastive_embeddings_loss
from dense_cf.models.dual_encoder import gather_positions
from dense_cf.models.hf import NEW_TOKEN_INITS
from dense_cf.models.tokenizer import SENT_TOKEN

__all__ = ["METHOD", "config_problems", "embed_sentences", "sentence_index"]


def embed_sentences(model, params, batch: dict[str, jax.Array], *, deterministic: bool,
                    rngs: dict[str, jax.Array] | None = None) -> Embeddings:
    """q [B,D], positive sentence [B,D], negative sentences [B,m,D] with ``neg_valid``; no
    counterfactual. p+ and each BM25 passage are encoded once; sentence vectors are the
    outputs at their markers (docs/method.md §4)."""
    q = model.apply({"params": params}, batch["q_ids"], batch["q_mask"],
                    deterministic=deterministic, rngs=rngs, method=model.encode_question)
    b, h, lp = batch["hard_ids"].shape
    ids = jnp.concatenate([batch["pos_ids"][:, None], batch["hard_ids"]], axis=1)
    mask = jnp.concatenate([batch["pos_mask"][:, None], batch["hard_mask"]], axis=1)
    hid = model.apply({"params": params}, ids.reshape(b * (1 + h), lp),
                      mask.reshape(b * (1 + h), lp), deterministic=deterministic, rngs=rngs,
                      method=model.encode_passage_tokens)
    hid = hid.reshape(b, (1 + h) * lp, hid.shape[-1])
    where = jnp.concatenate([batch["pos_pos"][:, None],
                             batch["neg_src"] * lp + batch["neg_pos"]], axis=1)
    # Scaled as the question and as the export's ``encode_passage_at`` (model.normalize).
    vec = model.apply({"params": params}, gather_positions(hid, where), method=model.unit)
    return Embeddings(q=q, pos=vec[:, 0], neg=vec[:, 1:], neg_valid=batch["neg_valid"])


def config_problems(config) -> list[str]:
    """``config.dcsr`` and ``config.loss`` (DPR's NLL over sentences: no counterfactual term)."""
    out: list[str] = []
    checks.enum(out, "dcsr.negatives", config.dcsr.negatives, dcsr_inputs.NEGATIVES)
    checks.enum(out, "dcsr.sent_init", config.dcsr.sent_init, NEW_TOKEN_INITS)
    if any(config.loss.get(k) for k in DPR_LOSS):
        out.append("config.method='dcsr' trains with the DPR NLL over sentences (docs/method.md §4): "
                   "config.loss.lam = tau1 = tau2 must be 0 or unset (counterfactual terms are "
                   "passage-level)")
    return out


def sentence_index(config) -> SentenceIndex:
    """Export and search settings of ``config.dcsr`` (docs/dcsr.md)."""
    d = config.dcsr
    return SentenceIndex(token=SENT_TOKEN, question_prefix=bool(d.question_prefix),
                         title=bool(d.title), max_sents=int(d.max_sents),
                         retrieve_sentences=int(d.retrieve_sentences))


METHOD = Method(
    name="dcsr",
    # DPR's NLL over sentences; config.loss must keep λ = τ1 = τ2 = 0 (config_problems).
    loss=lambda emb: contrastive_embeddings_loss(emb, use_dpr=True),
    loss_defaults=dict(DPR_LOSS),
    config_block="dcsr",
    config_problems=config_problems,
    sentence_index=sentence_index,
    embed=embed_sentences,
    inputs=Inputs(prepare=dcsr_inputs.prepare, spec=dcsr_inputs.spec_from_config,
                  make_dataset=dcsr_inputs.make_dataset,
                  batch_iterator=dcsr_inputs.BatchIterator,
                  # marker positions index tokens of their row, which a cut keeps
                  length_groups=DPR_LENGTH_GROUPS),
    unit="sentence",
    added_tokens=(SENT_TOKEN,),
    added_token_init=lambda config: str(config.dcsr.sent_init),
)
