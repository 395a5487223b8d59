"""Fusion-in-Decoder reader (Izacard & Grave, 2021) on our Flax T5 (docs/readers.md).

Each (question, passage) pair is one encoder row "question: {q} title: {t} context: {p}"
(FiD's format); the rows of an example are encoded separately, their outputs concatenated to
[B, n*L, d] with mask [B, n*L], and the decoder cross-attends over all of them. T5 has no
position bias in cross-attention, so the concatenation order carries no positional signal.

:class:`FiD` only reshapes around :class:`~dense_cf.models.t5.T5ForConditionalGeneration`: its
parameter tree IS the T5 tree, so ``hf_t5.load_hf_t5_params`` loads a T5 / FiD checkpoint into
it and ``hf_t5.save_hf_t5`` writes one back. ``fid_loss`` and ``greedy_decode`` are pure
functions of (model, params, arrays), the shape a training method needs.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dense_cf.losses import answer_nll_loss
from dense_cf.models.t5 import T5ForConditionalGeneration, shift_right, token_log_likelihoods

__all__ = ["FiD", "fused_mask", "fid_loss", "fid_token_outputs", "greedy_decode", "greedy_decode_scored",
           "format_fid_inputs", "fid_batch", "decode_answers"]


class FiD(T5ForConditionalGeneration):
    """T5 reading ``input_ids`` / ``attention_mask`` int [B, n_passages, L].

    ``encode`` -> [B, n*L, d]; ``__call__(input_ids, attention_mask, decoder_input_ids,
    decoder_attention_mask) -> logits`` float32 [B, T, V]. ``decode``, ``init_cache`` and
    ``decode_step`` are T5's, with the encoder mask given as ``fused_mask(attention_mask)``.
    """

    def encode(self, input_ids, attention_mask, deterministic: bool = True):
        b, n, length = input_ids.shape
        enc = super().encode(input_ids.reshape(b * n, length), attention_mask.reshape(b * n, length),
                             deterministic)
        return enc.reshape(b, n * length, enc.shape[-1])

    def __call__(self, input_ids, attention_mask, decoder_input_ids, decoder_attention_mask=None,
                 deterministic: bool = True):
        return self.decode(self.encode(input_ids, attention_mask, deterministic), fused_mask(attention_mask),
                           decoder_input_ids, decoder_attention_mask, deterministic)


def fused_mask(attention_mask: jax.Array) -> jax.Array:
    """[B, n, L] passage masks -> the [B, n*L] mask of the concatenated encoder output
    ([B, L] stays as it is, so the same code serves plain T5)."""
    return attention_mask.reshape(attention_mask.shape[0], -1)


def fid_token_outputs(model: T5ForConditionalGeneration, params: Any, batch: dict[str, Any], *,
                      deterministic: bool = True, rngs: dict[str, jax.Array] | None = None,
                      ) -> dict[str, jax.Array]:
    """Teacher forcing on ``shift_right(labels)``: per answer position ``ll`` float32 [B, T]
    (log p(label)), ``correct`` bool [B, T] (argmax = label) and ``valid`` bool [B, T] (what
    :func:`dense_cf.losses.answer_nll_loss` reduces). Small outputs, not [B, T, V] logits.

    ``batch``: ``input_ids``, ``attention_mask`` [B, n, L] (or [B, L] with a plain T5 model),
    ``labels`` int [B, T] ending in ``</s>``, padded with -100, or padded with anything and
    ``labels_mask`` [B, T] (0 = padding). Dropout runs when ``deterministic`` is False (``rngs``
    holds the ``dropout`` key).
    """
    cfg = model.config
    labels = jnp.asarray(batch["labels"])
    if "labels_mask" in batch:
        labels = jnp.where(jnp.asarray(batch["labels_mask"]) > 0, labels, -100)
    dec_in = shift_right(labels, cfg.decoder_start_token_id, cfg.pad_token_id)
    # Padded label positions sit after the answer, so the causal mask already keeps them from
    # the real positions; they are only dropped from the sums.
    logits = model.apply({"params": params}, batch["input_ids"], batch["attention_mask"], dec_in,
                         deterministic=deterministic, rngs=rngs)
    return {"ll": token_log_likelihoods(logits, labels),
            "correct": jnp.argmax(logits, axis=-1) == labels, "valid": labels >= 0}


def fid_loss(model: T5ForConditionalGeneration, params: Any, batch: dict[str, Any], *,
             deterministic: bool = True, rngs: dict[str, jax.Array] | None = None,
             ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Teacher-forced answer NLL: (mean over the batch's answer tokens, metrics), i.e.
    :func:`dense_cf.losses.answer_nll_loss` of :func:`fid_token_outputs` (its ``batch``).
    Metrics: ``loss``, ``token_accuracy``, ``sequence_accuracy``, ``tokens``.
    """
    return answer_nll_loss(**fid_token_outputs(model, params, batch, deterministic=deterministic,
                                                rngs=rngs))


@functools.partial(jax.jit, static_argnames=("model", "max_length", "start_id", "eos_id", "pad_id"))
def _greedy(model, params, input_ids, attention_mask, max_length, start_id, eos_id, pad_id):
    v = {"params": params}
    b = input_ids.shape[0]
    mask = fused_mask(attention_mask)
    enc = model.apply(v, input_ids, attention_mask, method=model.encode)  # once
    cache = model.apply(v, enc, mask, max_length, method=model.init_cache)

    def cond(state):
        i, _, _, done, _, _ = state
        return (i < max_length) & ~jnp.all(done)

    def body(state):
        i, token, out, done, score, cache = state
        logits, cache = model.apply(v, cache, token, i, method=model.decode_step)
        best = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1),
                                   best[:, None], axis=-1)[:, 0]
        score = score + jnp.where(done, 0.0, logp)
        nxt = jnp.where(done, pad_id, best)
        out = jax.lax.dynamic_update_slice_in_dim(out, nxt[:, None], i, axis=1)
        return i + 1, nxt, out, done | (nxt == eos_id), score, cache

    state = (jnp.int32(0), jnp.full((b,), start_id, jnp.int32), jnp.full((b, max_length), pad_id, jnp.int32),
             jnp.zeros((b,), bool), jnp.zeros((b,), jnp.float32), cache)
    out = jax.lax.while_loop(cond, body, state)
    return out[2], out[4]


def greedy_decode(model: T5ForConditionalGeneration, params: Any, input_ids: Any, attention_mask: Any, *,
                  max_length: int, start_id: int | None = None, eos_id: int | None = None,
                  pad_id: int | None = None) -> jax.Array:
    """Greedy answers, int32 [B, max_length]: the generated tokens (no start token), ``</s>``
    included, ``pad_id`` after it (HF ``generate(do_sample=False, num_beams=1,
    max_new_tokens=max_length)`` minus its leading start token).

    Jitted (one compile per model, shape and ids); the encoder runs once, the decoder one cached
    step per token (cross-attention keys/values computed once), and the loop stops when every
    row has ended. Ids default to the model config's. ``input_ids`` [B, n, L] for :class:`FiD`,
    [B, L] for plain T5.
    """
    return greedy_decode_scored(model, params, input_ids, attention_mask, max_length=max_length,
                                start_id=start_id, eos_id=eos_id, pad_id=pad_id)[0]


def greedy_decode_scored(model: T5ForConditionalGeneration, params: Any, input_ids: Any,
                         attention_mask: Any, *, max_length: int, start_id: int | None = None,
                         eos_id: int | None = None, pad_id: int | None = None
                         ) -> tuple[jax.Array, jax.Array]:
    """:func:`greedy_decode`'s ids and each row's sequence log-probability float32 [B]: the sum
    of log p of its generated tokens, ``</s>`` included (a row cut at ``max_length`` without
    ``</s>`` sums what it generated)."""
    cfg = model.config
    return _greedy(model, params, jnp.asarray(input_ids, jnp.int32), jnp.asarray(attention_mask, jnp.int32),
                   max_length=int(max_length),
                   start_id=cfg.decoder_start_token_id if start_id is None else int(start_id),
                   eos_id=cfg.eos_token_id if eos_id is None else int(eos_id),
                   pad_id=cfg.pad_token_id if pad_id is None else int(pad_id))


# ------------------------------------------------------------------------------ text side


def format_fid_inputs(question: str, passages: Sequence[tuple[str, str]]) -> list[str]:
    """One encoder text per (title, text) passage, FiD's format."""
    return [f"question: {question} title: {title} context: {text}" for title, text in passages]


def _fit(ids: Sequence[int], special: Sequence[int], length: int) -> list[int]:
    """``ids`` cut to ``length``, keeping a closing special token (``</s>``) at the end."""
    ids = list(ids)
    if len(ids) <= length:
        return ids
    if special and special[-1]:
        return ids[:length - 1] + ids[-1:]
    return ids[:length]


def fid_batch(tokenizer: Any, questions: Sequence[str], passages: Sequence[Sequence[tuple[str, str]]],
              answers: Sequence[str] | None = None, *, n_passages: int, max_length: int,
              max_answer_length: int = 32, pad_id: int = 0) -> dict[str, np.ndarray]:
    """A FiD batch as numpy: ``input_ids`` / ``attention_mask`` int32 [B, n_passages, max_length],
    ``passage_mask`` bool [B, n_passages], and with ``answers``, ``labels`` int32
    [B, max_answer_length] padded with -100.

    ``tokenizer``: a ``tokenizers.Tokenizer`` that appends ``</s>`` (``hf_t5.load_t5_tokenizer``).
    Each example keeps its first ``n_passages`` passages (retrieval order); missing ones are
    all-padding rows with mask 0, which change no output. Rows and answers longer than the
    limit are cut, keeping the closing ``</s>``. One answer per example: a caller with several
    gold answers picks one (FiD samples one per epoch).
    """
    if len(questions) != len(passages) or (answers is not None and len(answers) != len(questions)):
        raise ValueError("questions, passages and answers must have the same length")
    b = len(questions)
    ids = np.full((b, n_passages, max_length), pad_id, np.int32)
    mask = np.zeros((b, n_passages, max_length), np.int32)
    texts, where = [], []
    for i, (q, ps) in enumerate(zip(questions, passages)):
        for j, text in enumerate(format_fid_inputs(q, list(ps)[:n_passages])):
            texts.append(text)
            where.append((i, j))
    for (i, j), enc in zip(where, tokenizer.encode_batch(texts) if texts else []):
        row = _fit(enc.ids, enc.special_tokens_mask, max_length)
        ids[i, j, :len(row)] = row
        mask[i, j, :len(row)] = 1
    out = {"input_ids": ids, "attention_mask": mask, "passage_mask": mask.any(axis=-1)}
    if answers is not None:
        labels = np.full((b, max_answer_length), -100, np.int32)
        for i, enc in enumerate(tokenizer.encode_batch(list(answers))):
            row = _fit(enc.ids, enc.special_tokens_mask, max_answer_length)
            labels[i, :len(row)] = row
        out["labels"] = labels
    return out


def decode_answers(tokenizer: Any, ids: Any, eos_id: int = 1) -> list[str]:
    """Answer strings of generated ids [B, T]: each row up to its first ``eos_id``, special
    tokens dropped."""
    rows = []
    for row in np.asarray(ids).tolist():
        rows.append(row[:row.index(eos_id)] if eos_id in row else row)
    return tokenizer.decode_batch(rows, skip_special_tokens=True)
