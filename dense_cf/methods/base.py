"""What a retrieval method is: one registry entry (docs/ARCHITECTURE.md, "The method seam").

A :class:`Method` names everything that differs between methods and nothing else:
- ``embed``: per-example embeddings of a (device-local) batch, as an :class:`Embeddings`
  pytree that carries its own validity masks;
- ``loss``: a pure function of GLOBAL-batch :class:`Embeddings` (the train step gathers them
  over every device and host first, docs/method.md §1) returning ``(loss, metrics)``;
- ``loss_hparams``: the static loss keyword arguments read from ``config.loss``;
- ``inputs``: how training files become batches (:class:`Inputs`);
- ``unit``: what is exported and indexed for retrieval, ``"passage"`` or ``"sentence"``;
- ``added_tokens``: tokens appended to the pretrained vocabulary, in id order.

The train step, export, retrieval and evaluation read these fields; no module outside
``dense_cf.methods`` branches on a method's name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax.struct
import jax
import jax.numpy as jnp

from dense_cf.inputs import dpr as dpr_inputs

__all__ = ["Embeddings", "Inputs", "Method", "embed_passages"]


@flax.struct.dataclass
class Embeddings:
    """Embeddings of one batch; every row belongs to one example.

    ``q`` [B, D] questions, ``pos`` [B, D] positives, ``neg`` [B, M, D] the example's own
    negatives (hard passages, or negative sentences) with ``neg_valid`` [B, M] bool, and
    optionally ``cf`` [B, D] counterfactual positives with ``cf_valid`` [B] bool.
    """

    q: jax.Array
    pos: jax.Array
    neg: jax.Array
    neg_valid: jax.Array
    cf: jax.Array | None = None
    cf_valid: jax.Array | None = None


EmbedFn = Callable[..., Embeddings]
LossFn = Callable[..., tuple[jax.Array, dict[str, jax.Array]]]


def embed_passages(model, params, batch: dict[str, jax.Array], *, deterministic: bool,
                   rngs: dict[str, jax.Array] | None = None) -> Embeddings:
    """DPR-format batches: q [B,D], pos [B,D], hard negatives [B,h,D] and, when the batch has
    them, counterfactual positives [B,D].

    The passages of an example are stacked as [B, 1 + h (+1), L] and flattened, so each device
    encodes the passages of its own examples in one encoder call.
    """
    q = model.apply({"params": params}, batch["q_ids"], batch["q_mask"], deterministic=deterministic,
                    rngs=rngs, method=model.encode_question)
    b, h = batch["hard_ids"].shape[:2]
    has_cf = "cf_ids" in batch
    parts_ids = [batch["pos_ids"][:, None], batch["hard_ids"]]
    parts_mask = [batch["pos_mask"][:, None], batch["hard_mask"]]
    if has_cf:
        parts_ids.append(batch["cf_ids"][:, None])
        parts_mask.append(batch["cf_mask"][:, None])
    ids = jnp.concatenate(parts_ids, axis=1)
    mask = jnp.concatenate(parts_mask, axis=1)
    n = ids.shape[1]
    p = model.apply({"params": params}, ids.reshape(b * n, -1), mask.reshape(b * n, -1),
                    deterministic=deterministic, rngs=rngs, method=model.encode_passage)
    p = p.reshape(b, n, -1)
    return Embeddings(q=q, pos=p[:, 0], neg=p[:, 1:1 + h], neg_valid=batch["hard_valid"],
                      cf=p[:, 1 + h] if has_cf else None,
                      cf_valid=batch["cf_valid"] if has_cf else None)


@dataclasses.dataclass(frozen=True)
class Inputs:
    """How a method's training files become batches.

    ``prepare(config, tokenizer, data)`` turns a preprocessed split (or None) into the method's
    data; ``spec(config, tokenizer, shuffle=...)`` builds its batch spec; ``make_dataset`` and
    ``batch_iterator`` are the tf.data dataset and the resumable iterator over it.
    """

    prepare: Callable[..., Any]
    spec: Callable[..., Any]
    make_dataset: Callable[..., Any]
    batch_iterator: type


DPR_INPUTS = Inputs(prepare=lambda config, tokenizer, data: data, spec=dpr_inputs.spec_from_config,
                    make_dataset=dpr_inputs.make_dataset, batch_iterator=dpr_inputs.BatchIterator)


@dataclasses.dataclass(frozen=True)
class Method:
    """One retrieval method (module docstring)."""

    name: str
    loss: LossFn
    loss_hparams: Callable[[Any], dict[str, Any]] = lambda loss_config: {}
    embed: EmbedFn = embed_passages
    inputs: Inputs = DPR_INPUTS
    unit: str = "passage"
    added_tokens: tuple[str, ...] = ()
    # Whether batches carry counterfactual passages, given config.loss (docs/method.md §2).
    needs_counterfactual: Callable[[Any], bool] = lambda loss_config: False
    # How the rows of added tokens start, given the run config ("mean" when it has no say).
    added_token_init: Callable[[Any], str] = lambda config: "mean"

    def __post_init__(self) -> None:
        if self.unit not in ("passage", "sentence"):
            raise ValueError(f"method {self.name}: unit must be 'passage' or 'sentence', "
                             f"got {self.unit!r}")
