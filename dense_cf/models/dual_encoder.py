"""DPR-style bi-encoder: f_q and f_p BERT towers, sim(q, p) = f_q(q) · f_p(p) (docs/method.md §1).

DPR/PiCL/EADPR use separate towers and pooler-free [CLS] pooling (docs/method.md §9); ``shared`` and
``pooling="mean"`` are options. Params are ``{"question": bert, "passage": bert}`` or
``{"shared": bert}``.

DCSR (docs/method.md §4) reads one vector per sentence from the passage tower's outputs at the ``<sent>``
markers (:meth:`DualEncoder.encode_passage_tokens` + :func:`gather_positions`); its vocabulary
has the marker appended (:func:`model_from_config` grows ``vocab_size`` by the method's added
tokens, :func:`load_pretrained` initialises their rows).
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from dense_cf.models import hf
from dense_cf.models.bert import BertConfig, BertEncoder
from dense_cf.models.tokenizer import add_tokens, load_tokenizer

POOLINGS = ("cls", "mean")


def pool(hidden: jax.Array, mask: jax.Array, pooling: str) -> jax.Array:
    """[B, L, H] -> [B, H] float32. "cls": position 0 (no pooler); "mean": mask-weighted mean."""
    hidden = hidden.astype(jnp.float32)
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "mean":
        m = mask.astype(jnp.float32)[..., None]
        # max(.,1) keeps an all-padding row (batch filler) at 0 instead of NaN.
        return (hidden * m).sum(axis=1) / jnp.maximum(m.sum(axis=1), 1.0)
    raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")


def gather_positions(hidden: jax.Array, positions: jax.Array) -> jax.Array:
    """``hidden`` [B, L, H] at ``positions`` [B, S] (int, in [0, L)) -> float32 [B, S, H].

    A per-row gather (``take_along_axis``), so it stays local to the device holding the row.
    """
    pos = jnp.clip(positions.astype(jnp.int32), 0, hidden.shape[1] - 1)
    return jnp.take_along_axis(hidden.astype(jnp.float32), pos[..., None], axis=1)


class DualEncoder(nn.Module):
    """Question/passage encoders returning float32 [B, H] embeddings."""

    config: BertConfig
    shared: bool = False
    pooling: str = "cls"

    def setup(self) -> None:
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}")
        if self.shared:
            # Explicit name: the attribute `shared` is taken by the bool field.
            self.tower = BertEncoder(self.config, name="shared")
        else:
            self.question = BertEncoder(self.config)
            self.passage = BertEncoder(self.config)

    def _encode(self, tower: BertEncoder, ids, mask, deterministic: bool) -> jax.Array:
        return pool(tower(ids, mask, deterministic=deterministic), mask, self.pooling)

    def encode_question(self, ids, mask, deterministic: bool = True) -> jax.Array:
        return self._encode(self.tower if self.shared else self.question, ids, mask, deterministic)

    def encode_passage(self, ids, mask, deterministic: bool = True) -> jax.Array:
        return self._encode(self.tower if self.shared else self.passage, ids, mask, deterministic)

    def encode_passage_tokens(self, ids, mask, deterministic: bool = True) -> jax.Array:
        """The passage tower's last hidden states, float32 [B, L, H] (DCSR sentence vectors)."""
        tower = self.tower if self.shared else self.passage
        return tower(ids, mask, deterministic=deterministic).astype(jnp.float32)

    def encode_passage_at(self, ids, mask, positions, deterministic: bool = True) -> jax.Array:
        """Passage-tower outputs at ``positions`` [B, S]: float32 [B, S, H] (docs/method.md §4)."""
        return gather_positions(self.encode_passage_tokens(ids, mask, deterministic), positions)

    def __call__(self, q_ids, q_mask, p_ids, p_mask, deterministic: bool = True):
        return (
            self.encode_question(q_ids, q_mask, deterministic),
            self.encode_passage(p_ids, p_mask, deterministic),
        )


def tower_names(model: DualEncoder) -> tuple[str, ...]:
    return ("shared",) if model.shared else ("question", "passage")


def init_params(model: DualEncoder, rng: jax.Array, seq_len: int = 8) -> dict[str, Any]:
    """Random params (boxed ``nn.LogicallyPartitioned`` leaves, as ``model.init`` returns them;
    ``nn.get_partition_spec`` gives their logical specs, ``nn.unbox`` the arrays)."""
    ids = jnp.zeros((1, seq_len), jnp.int32)
    return model.init(rng, ids, ids, ids, ids)["params"]


def pretrained_params(model: DualEncoder, hf_params: dict[str, Any], boxed: bool = True) -> dict[str, Any]:
    """Places HF BERT params (from ``load_hf_bert_params``) in every tower; separate towers get
    independent copies. ``boxed=True`` wraps leaves like :func:`init_params` (same tree type)."""
    if boxed:
        abstract = jax.eval_shape(lambda: init_params(model, jax.random.key(0)))
    out = {}
    for i, name in enumerate(tower_names(model)):
        tree = hf_params if i == 0 else copy.deepcopy(hf_params)
        tree = jax.tree.map(lambda x: np.asarray(x, dtype=np.float32), tree)
        if boxed:
            tree = jax.tree.map(
                lambda box, v: box.replace_boxed(v),
                abstract[name],
                tree,
                is_leaf=lambda x: isinstance(x, nn.Partitioned),
            )
        out[name] = tree
    return out


def model_from_config(cfg: Any, num_added_tokens: int = 0) -> tuple[DualEncoder, str | None]:
    """Builds the model from a complete ``cfg.model`` (see ``configs.base``; name_or_path: "tiny" |
    "minilm" | local dir | hub name; shared; pooling; dtype; remat; remat_policy; dropout;
    attention_dropout (default: dropout); attention_impl (see ``bert.ATTENTION_IMPLS``); tiny_*).

    Returns ``(model, model_dir)``; ``model_dir`` is None for "tiny" (random init), else pass
    it to ``load_hf_bert_params(model_dir, model.config)`` and :func:`pretrained_params`.
    """
    m = cfg.model  # complete: run configs are merged over the base config (configs.base)
    n_added = int(num_added_tokens)
    over: dict[str, Any] = dict(dtype=m.dtype, remat=bool(m.remat), remat_policy=m.remat_policy,
                                attention_impl=m.attention_impl)
    if m.dropout is not None:
        over.update(dropout_rate=float(m.dropout), attention_dropout_rate=float(m.dropout))
    if m.attention_dropout is not None:  # e.g. 0 so fused attention also runs in training
        over.update(attention_dropout_rate=float(m.attention_dropout))
    if m.name_or_path == "tiny":
        bert = BertConfig.tiny(
            vocab_size=m.tiny_vocab + n_added,
            hidden=m.tiny_hidden,
            layers=m.tiny_layers,
            heads=m.tiny_heads,
            max_position_embeddings=512,
            **over,
        )
        model_dir = None
    else:
        model_dir = hf.resolve_model_dir(m.name_or_path)
        bert = BertConfig.from_hf_json(model_dir, **over)
        if n_added:  # e.g. DCSR's <sent> (docs/method.md §4): rows appended after the pretrained ones
            bert = bert.replace(vocab_size=bert.vocab_size + n_added)
    model = DualEncoder(bert, shared=bool(m.shared), pooling=m.pooling)
    return model, model_dir


def load_pretrained(model: DualEncoder, model_dir: str, tok_dir: str, *,
                    extra: Sequence[str] = (), init: str = "mean", seed: int = 0
                    ) -> dict[str, Any]:
    """HF BERT params for ``model``; a method that adds tokens (DCSR's ``<sent>``) gets the
    pretrained vocabulary extended: the checkpoint is read at its own vocabulary size and the
    new rows (ids from the run's tokenizer) are initialised per ``init``
    (see :func:`dense_cf.models.hf.extend_word_embeddings`)."""
    extra = tuple(extra)
    if not extra:
        return hf.load_hf_bert_params(model_dir, model.config)
    base = BertConfig.from_hf_json(model_dir)
    params = hf.load_hf_bert_params(model_dir, model.config.replace(vocab_size=base.vocab_size))
    tok = load_tokenizer(tok_dir)
    source = {"[CLS]": tok.token_to_id("[CLS]"), "[SEP]": tok.token_to_id("[SEP]")}
    new_ids = add_tokens(tok, extra)
    if max(new_ids) >= model.config.vocab_size:
        raise ValueError(f"added token ids {new_ids} do not fit the model vocabulary "
                         f"{model.config.vocab_size}: tokenizer {tok_dir} is larger than the "
                         f"checkpoint's vocabulary {base.vocab_size}")
    return hf.extend_word_embeddings(params, model.config.vocab_size, new_ids, init=init,
                                     source_ids=source, seed=seed)
