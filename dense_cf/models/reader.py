"""DPR's extractive reader (Karpukhin et al. 2020): BERT with span and passage-selection heads.

``ExtractiveReader`` reads one ``[CLS] question [SEP] title [SEP] text [SEP]`` row
(``dense_cf.inputs.tokens.reader_row``) and returns per-token start and end logits
(``qa_outputs``, a linear layer to 2) and one selection logit from the [CLS] vector
(``qa_classifier``, a linear layer to 1), as DPR's ``dpr/models/reader.py`` does; ``pooling``
"mean" takes the mask-weighted mean of the row instead (for checkpoints whose [CLS] output
carries no information, such as sentence-transformers' MiniLM: docs/readers.md). The heads start
from N(0, 0.02) weights and zero biases (DPR's ``init_weights``). Parameter tree::

    encoder/...                      BertEncoder (dense_cf.models.bert)
    qa_outputs/{kernel [H, 2], bias [2]}
    qa_classifier/{kernel [H, 1], bias [1]}

Decoding (docs/readers.md, "Inference"): :func:`best_spans` finds, per row, the span
``lo <= s <= e < hi`` of at most ``max_answer_len`` word pieces inside the passage text that
maximises ``start[s] + end[e]`` (DPR's ``get_best_spans`` with one span); :func:`extend_to_words`
widens it to whole words (DPR's ``_extend_span_to_full_words``). Both are pure.
"""

from __future__ import annotations

from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from dense_cf.models.bert import MASK_NEG, BertConfig, BertEncoder
from dense_cf.models.dual_encoder import pool

__all__ = ["ExtractiveReader", "best_spans", "extend_to_words", "head_params", "text_mask"]

_init = nn.initializers.normal(stddev=0.02)


class ExtractiveReader(nn.Module):
    """BERT + start/end logits per token + a selection logit per row (module docstring)."""

    config: BertConfig
    pooling: str = "cls"   # the selection head's input: "cls" (DPR) or "mean"

    @nn.compact
    def __call__(self, ids, mask, type_ids=None, deterministic: bool = True
                 ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """float32 ``start`` [N, L], ``end`` [N, L] and ``select`` [N] logits of N rows."""
        cfg = self.config
        h = BertEncoder(cfg, name="encoder")(ids, mask, type_ids, deterministic=deterministic)
        h = h.astype(jnp.float32)

        def head(n: int, name: str) -> nn.Dense:
            return nn.Dense(n, dtype=jnp.float32, param_dtype=cfg.params_dtype, name=name,
                            kernel_init=nn.with_logical_partitioning(_init, ("embed", None)),
                            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, (None,)))

        span = head(2, "qa_outputs")(h)
        select = head(1, "qa_classifier")(pool(h, mask, self.pooling))[:, 0]
        return span[..., 0], span[..., 1], select


def head_params(hidden: int, key: jax.Array) -> dict[str, Any]:
    """Freshly initialised ``qa_outputs`` / ``qa_classifier`` params (float32 numpy-able
    arrays), for a reader whose encoder comes from a checkpoint."""
    k1, k2 = jax.random.split(key)
    return {"qa_outputs": {"kernel": 0.02 * jax.random.normal(k1, (hidden, 2), jnp.float32),
                           "bias": jnp.zeros((2,), jnp.float32)},
            "qa_classifier": {"kernel": 0.02 * jax.random.normal(k2, (hidden, 1), jnp.float32),
                              "bias": jnp.zeros((1,), jnp.float32)}}


def text_mask(lo: jax.Array, hi: jax.Array, length: int) -> jax.Array:
    """bool [..., length]: positions in ``[lo, hi)`` (the passage text of each row)."""
    pos = jnp.arange(length)
    return (pos >= lo[..., None]) & (pos < hi[..., None])


def best_spans(start: jax.Array, end: jax.Array, lo: jax.Array, hi: jax.Array,
               max_answer_len: int) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Per row of ``start``/``end`` [N, L]: the best span inside ``[lo, hi)`` of length
    ``<= max_answer_len`` by ``start[s] + end[e]``.

    Returns ``(s, e, score, found)``; ``found`` is False where the row has no text (``lo >= hi``;
    s, e, score are then meaningless). Ties go to the smaller start, then the shorter span (the
    order DPR's stable sort leaves them in).
    """
    n, length = start.shape
    inside = text_mask(lo, hi, length)
    pos = jnp.arange(length)
    scores = []
    for d in range(max_answer_len):
        e_at = jnp.pad(end[:, d:], ((0, 0), (0, d)), constant_values=MASK_NEG)
        ok = inside & (pos[None, :] + d < hi[:, None])
        scores.append(jnp.where(ok, start + e_at, 2 * MASK_NEG))
    grid = jnp.stack(scores, axis=-1).reshape(n, length * max_answer_len)
    best = jnp.argmax(grid, axis=-1)
    s = best // max_answer_len
    return s, s + best % max_answer_len, jnp.max(grid, axis=-1), lo < hi


def extend_to_words(start: int, end: int, word_ids: Sequence[int | None]) -> tuple[int, int]:
    """Token span ``[start, end]`` widened so that it starts and ends on word boundaries
    (``word_ids`` per token, from the tokenizer's pre-tokenisation)."""
    if not 0 <= start <= end < len(word_ids):
        raise ValueError(f"span ({start}, {end}) outside {len(word_ids)} tokens")
    while start > 0 and word_ids[start] is not None and word_ids[start - 1] == word_ids[start]:
        start -= 1
    while end + 1 < len(word_ids) and word_ids[end] is not None and word_ids[end + 1] == word_ids[end]:
        end += 1
    return start, end
