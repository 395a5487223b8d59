"""DPR-style bi-encoder: f_q and f_p BERT towers, sim(q, p) = f_q(q) · f_p(p) (docs/method.md §1).

DPR/PiCL/EADPR use separate towers and pooler-free [CLS] pooling (docs/method.md §9); ``shared``,
``pooling="mean"`` and ``normalize`` (unit-length embeddings, as sentence-transformers models such as
all-MiniLM-L6-v2 declare) are options. Each tower may start from its own checkpoint
(``model.question_path`` / ``model.passage_path``; layouts in :mod:`dense_cf.models.checkpoints`).
Params are ``{"question": bert, "passage": bert}`` or
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
from absl import logging

from dense_cf.models import checkpoints, hf
from dense_cf.models.bert import BertConfig, BertEncoder
from dense_cf.models.tokenizer import add_tokens, load_tokenizer

POOLINGS = ("cls", "mean")
AUTO = "auto"  # model.pooling: the checkpoint's own (sentence-transformers) pooling, else "cls"


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


def pool_packed(hidden: jax.Array, position_ids: jax.Array, segment_ids: jax.Array,
                starts: jax.Array, pooling: str) -> jax.Array:
    """Packed rows (``dense_cf.inputs.packing``) [R, L, H] -> one float32 [P, H] vector per
    passage, in passage order: "cls" at each passage's first token (``starts``, flat
    ``row * L + column``), "mean" over its segment. A token's segment is keyed by its own start,
    ``column - position`` (positions restart per passage), so no segment count is needed."""
    r, length, h = hidden.shape
    flat = hidden.astype(jnp.float32).reshape(r * length, h)
    if pooling == "cls":
        return flat[starts]
    if pooling == "mean":
        real = (segment_ids > 0).reshape(-1)
        key = (jnp.arange(r)[:, None] * length + jnp.arange(length)[None, :] - position_ids).reshape(-1)
        key = jnp.where(real, key, r * length)  # padding: one extra bucket, never read
        sums = jax.ops.segment_sum(flat * real[:, None], key, num_segments=r * length + 1)
        counts = jax.ops.segment_sum(real.astype(jnp.float32), key, num_segments=r * length + 1)
        return sums[starts] / jnp.maximum(counts[starts], 1.0)[:, None]
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
    normalize: bool = False

    def setup(self) -> None:
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}")
        if self.shared:
            # Explicit name: the attribute `shared` is taken by the bool field.
            self.tower = BertEncoder(self.config, name="shared")
        else:
            self.question = BertEncoder(self.config)
            self.passage = BertEncoder(self.config)

    def _unit(self, x: jax.Array) -> jax.Array:
        if not self.normalize:
            return x
        # eps as in torch.nn.functional.normalize (sentence-transformers' Normalize module).
        return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)

    def unit(self, x: jax.Array) -> jax.Array:
        """``x`` [..., H] scaled as this model's embeddings are (unit norm when ``normalize``)."""
        return self._unit(x)

    def _encode(self, tower: BertEncoder, ids, mask, deterministic: bool) -> jax.Array:
        return self._unit(pool(tower(ids, mask, deterministic=deterministic), mask, self.pooling))

    def encode_question(self, ids, mask, deterministic: bool = True) -> jax.Array:
        return self._encode(self.tower if self.shared else self.question, ids, mask, deterministic)

    def encode_passage(self, ids, mask, deterministic: bool = True) -> jax.Array:
        return self._encode(self.tower if self.shared else self.passage, ids, mask, deterministic)

    def _encode_packed(self, tower: BertEncoder, ids, mask, segment_ids, position_ids, starts,
                       deterministic: bool) -> jax.Array:
        # One pack per data shard ([S, R, L] rows, [S, P] starts local to the shard;
        # inputs.packing.pack_batch): the tower sees [S * R, L], pooling stays within a shard.
        # A single pack ([R, L] rows, [P] starts) is the case S = 1.
        if ids.ndim == 2:
            ids, mask, segment_ids, position_ids, starts = (
                x[None] for x in (ids, mask, segment_ids, position_ids, starts))
        s, r, length = ids.shape
        flat = lambda x: x.reshape(s * r, length)  # noqa: E731
        hidden = tower(flat(ids), flat(mask), deterministic=deterministic,
                       segment_ids=flat(segment_ids), position_ids=flat(position_ids))
        pooled = jax.vmap(lambda h, p, g, st: pool_packed(h, p, g, st, self.pooling))(
            hidden.reshape(s, r, length, -1), position_ids, segment_ids, starts)
        return self._unit(pooled.reshape(s * starts.shape[1], -1))

    def encode_passage_packed(self, ids, mask, segment_ids, position_ids, starts,
                              deterministic: bool = True) -> jax.Array:
        """Packed passages (``dense_cf.inputs.packing``: ``PackedBatch`` fields [R, L] / [P], or
        ``pack_batch``'s per-shard [S, R, L] / [S, P]) -> float32 [P or S * P, H] in passage
        order, equal to :meth:`encode_passage` of the same passages padded one per row."""
        return self._encode_packed(self.tower if self.shared else self.passage, ids, mask,
                                   segment_ids, position_ids, starts, deterministic)

    def encode_question_packed(self, ids, mask, segment_ids, position_ids, starts,
                               deterministic: bool = True) -> jax.Array:
        """:meth:`encode_passage_packed` with the question tower."""
        return self._encode_packed(self.tower if self.shared else self.question, ids, mask,
                                   segment_ids, position_ids, starts, deterministic)

    def encode_passage_tokens(self, ids, mask, deterministic: bool = True) -> jax.Array:
        """The passage tower's last hidden states, float32 [B, L, H] (DCSR sentence vectors)."""
        tower = self.tower if self.shared else self.passage
        return tower(ids, mask, deterministic=deterministic).astype(jnp.float32)

    def encode_passage_at(self, ids, mask, positions, deterministic: bool = True) -> jax.Array:
        """Passage-tower outputs at ``positions`` [B, S]: float32 [B, S, H] (docs/method.md §4)."""
        return self._unit(gather_positions(self.encode_passage_tokens(ids, mask, deterministic), positions))

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
    """Places HF BERT params in the towers: ``hf_params`` is one tree (from
    ``load_hf_bert_params``; every tower gets an independent copy) or ``{tower name: tree}``
    (from :func:`load_pretrained`). ``boxed=True`` wraps leaves like :func:`init_params`."""
    names = tower_names(model)
    per_tower = "embeddings" not in hf_params and set(hf_params) == set(names)
    if boxed:
        abstract = jax.eval_shape(lambda: init_params(model, jax.random.key(0)))
    out = {}
    for i, name in enumerate(names):
        tree = hf_params[name] if per_tower else (hf_params if i == 0 else copy.deepcopy(hf_params))
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


def tower_sources(m: Any) -> dict[str, checkpoints.TowerSource] | None:
    """``{"question": TowerSource, "passage": TowerSource}`` for ``cfg.model`` ``m``, or None
    for a random "tiny" model. A tower reads ``m.<role>_path`` if set, else ``m.name_or_path``."""
    q_path, p_path = m.get("question_path") or "", m.get("passage_path") or ""
    if m.name_or_path == "tiny" and not (q_path or p_path):
        return None
    out = {}
    for role, path in (("question", q_path), ("passage", p_path)):
        spec = path or m.name_or_path
        if spec == "tiny":
            raise ValueError(f"model.{role}_path is unset and model.name_or_path is 'tiny': "
                             "set both tower paths, or neither")
        out[role] = checkpoints.tower_source(hf.resolve_model_dir(spec), role)
    return out


def _resolve_pooling(m: Any, sources: dict[str, checkpoints.TowerSource] | None) -> tuple[str, bool]:
    """(pooling, normalize): "auto" takes the checkpoints' declared pooling (else "cls")."""
    declared = {(s.pooling, bool(s.normalize)) for s in (sources or {}).values() if s.pooling}
    if len(declared) > 1:
        raise checkpoints.ModelLayoutError(
            f"the towers declare different poolings {sorted(declared)}; set model.pooling")
    if m.pooling == AUTO:
        return next(iter(declared)) if declared else ("cls", bool(m.get("normalize", False)))
    normalize = bool(m.get("normalize", False))
    if declared and (m.pooling, normalize) not in declared:
        (own_pool, own_norm), = declared
        logging.info("model.pooling=%s%s overrides the checkpoint's own pooling (%s%s); "
                     "model.pooling='auto' uses the checkpoint's", m.pooling,
                     " + normalize" if normalize else "", own_pool, " + normalize" if own_norm else "")
    return m.pooling, normalize


def _arch(c: BertConfig) -> str:
    return (f"layers={c.num_layers}, hidden={c.hidden_size}, heads={c.num_heads}, "
            f"vocab={c.vocab_size}")


def runtime_overrides(m: Any) -> dict[str, Any]:
    """The :class:`BertConfig` fields ``config.model`` sets over a checkpoint's own (dtype, remat,
    dropout, attention kernel, matmul operand dtype): run-time choices, not part of the checkpoint."""
    over: dict[str, Any] = dict(dtype=m.dtype, remat=bool(m.remat), remat_policy=m.remat_policy,
                                attention_impl=m.attention_impl,
                                layer_norm_remat=bool(m.get("layer_norm_remat", False)),
                                fused_qkv=bool(m.get("fused_qkv", False)),
                                matmul_dtype=str(m.get("matmul_dtype", "") or ""))
    if m.get("hidden_act"):  # opt-in: changes the activation the checkpoint was trained with
        over.update(hidden_act=str(m.hidden_act))
    if m.dropout is not None:
        over.update(dropout_rate=float(m.dropout), attention_dropout_rate=float(m.dropout))
    if m.attention_dropout is not None:  # e.g. 0 so fused attention also runs in training
        over.update(attention_dropout_rate=float(m.attention_dropout))
    return over


def model_from_config(cfg: Any, num_added_tokens: int = 0
                      ) -> tuple[DualEncoder, dict[str, checkpoints.TowerSource] | None]:
    """Builds the model from a complete ``cfg.model`` (see ``configs.base``; name_or_path: "tiny" |
    "minilm" | local dir (HF BERT, DPR, sentence-transformers, an ``export_hf`` root) | hub name;
    question_path / passage_path; shared; pooling ("auto": the checkpoint's own); normalize; dtype;
    remat; remat_policy; dropout; attention_dropout (default: dropout); attention_impl; matmul_dtype; tiny_*).

    Returns ``(model, sources)``: ``sources`` (:func:`tower_sources`) is None for "tiny" (random
    init), else pass it to :func:`load_pretrained`.
    """
    m = cfg.model  # complete: run configs are merged over the base config (configs.base)
    n_added = int(num_added_tokens)
    over = runtime_overrides(m)
    sources = tower_sources(m)
    if sources is None:
        bert = BertConfig.tiny(
            vocab_size=m.tiny_vocab + n_added,
            hidden=m.tiny_hidden,
            layers=m.tiny_layers,
            heads=m.tiny_heads,
            max_position_embeddings=512,
            **over,
        )
    else:
        q_cfg, p_cfg = (BertConfig.from_hf_json(sources[r].model_dir, **over) for r in checkpoints.ROLES)
        if q_cfg != p_cfg:
            raise checkpoints.ModelLayoutError(
                f"the question tower ({sources['question'].model_dir}) and the passage tower "
                f"({sources['passage'].model_dir}) have different architectures: "
                f"{_arch(q_cfg)} vs {_arch(p_cfg)}")
        if m.shared and sources["question"] != sources["passage"]:
            raise checkpoints.ModelLayoutError(
                f"model.shared=True needs one checkpoint for both towers, got "
                f"{sources['question'].describe()} and {sources['passage'].describe()}")
        bert = p_cfg
        if n_added:  # e.g. DCSR's <sent> (docs/method.md §4): rows appended after the pretrained ones
            bert = bert.replace(vocab_size=bert.vocab_size + n_added)
    pooling, normalize = _resolve_pooling(m, sources)
    model = DualEncoder(bert, shared=bool(m.shared), pooling=pooling, normalize=normalize)
    return model, sources


def load_pretrained(model: DualEncoder, sources: dict[str, checkpoints.TowerSource], tok_dir: str,
                    *, extra: Sequence[str] = (), init: str = "mean", seed: int = 0
                    ) -> dict[str, Any]:
    """``{tower name: HF BERT params}`` for ``model``, each tower from its own source; a method
    that adds tokens (DCSR's ``<sent>``) gets the pretrained vocabulary extended: the checkpoint
    is read at its own vocabulary size and the new rows (ids from the run's tokenizer) are
    initialised per ``init`` (see :func:`dense_cf.models.hf.extend_word_embeddings`)."""
    extra = tuple(extra)
    roles = {"shared": "passage"} if model.shared else {"question": "question", "passage": "passage"}
    for role in checkpoints.ROLES:
        s = sources[role]
        if s.prefix and not s.prefix.startswith(checkpoints.DPR_PREFIXES[role]):
            logging.warning("the %s tower reads %s (a DPR encoder of the other role)", role, s.describe())
        else:
            logging.info("%s tower: %s", role, s.describe())
    if not extra:
        return {name: checkpoints.load_tower(sources[role], model.config) for name, role in roles.items()}
    base = BertConfig.from_hf_json(sources["passage"].model_dir)
    tok = load_tokenizer(tok_dir)
    source_ids = {"[CLS]": tok.token_to_id("[CLS]"), "[SEP]": tok.token_to_id("[SEP]")}
    new_ids = add_tokens(tok, extra)
    if max(new_ids) >= model.config.vocab_size:
        raise ValueError(f"added token ids {new_ids} do not fit the model vocabulary "
                         f"{model.config.vocab_size}: tokenizer {tok_dir} is larger than the "
                         f"checkpoint's vocabulary {base.vocab_size}")
    out = {}
    for name, role in roles.items():
        params = checkpoints.load_tower(sources[role], model.config.replace(vocab_size=base.vocab_size))
        out[name] = hf.extend_word_embeddings(params, model.config.vocab_size, new_ids, init=init,
                                              source_ids=source_ids, seed=seed)
    return out
