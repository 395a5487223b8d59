"""Compact Flax (linen) T5 encoder-decoder, numerically equal to HF ``T5ForConditionalGeneration``.

Used as the generative QA model of EADPR's pseudo-evidence annotation (EADPR §3.1, docs/method.md §2
``evidence``: UnifiedQA-T5 scores P(answer | question, passage)) and the body of the
Fusion-in-Decoder reader (``fid.py``). Teacher-forced scoring (``decode``) and one cached decoder
step at a time (``init_cache`` / ``decode_step``, the generation loop is ``fid.greedy_decode``).

Covers both T5 generations found on the Hugging Face hub:

* T5 v1.0 (t5-small/base, UnifiedQA, UnifiedQA-v2): ReLU feed-forward ``wi``/``wo``, LM head
  tied to the shared embedding and decoder output scaled by ``d_model ** -0.5``;
* T5 v1.1 / LM-adapted / Flan-T5: gated-GELU feed-forward ``wi_0``/``wi_1``/``wo`` (tanh GELU,
  HF "gelu_new"), untied ``lm_head`` and no output scaling (``tie_word_embeddings: false``).

Architecture notes (they are what make T5 differ from BERT): RMS layer norm without mean or
bias (float32); pre-norm residual blocks; no ``1/sqrt(d)`` attention scaling (folded into the
init); bucketed relative position biases owned by the first layer of each stack and shared by
all its layers (bidirectional buckets in the encoder, causal in the decoder); no position bias
in cross-attention.

Parameter tree (names mirror HF so ``hf_t5.py`` is a transpose-only mapping; kernels [in, out])::

    shared/embedding                                         [V, d_model]
    encoder/block_{i}/SelfAttention/{q,k,v}/kernel           [d_model, H*d_kv]
    encoder/block_{i}/SelfAttention/o/kernel                 [H*d_kv, d_model]
    encoder/block_0/SelfAttention/relative_attention_bias/embedding  [buckets, H]
    encoder/block_{i}/self_attention_norm/scale              [d_model]
    encoder/block_{i}/DenseReluDense/{wi | wi_0, wi_1}/kernel [d_model, d_ff]
    encoder/block_{i}/DenseReluDense/wo/kernel               [d_ff, d_model]
    encoder/block_{i}/ff_norm/scale, encoder/final_layer_norm/scale
    decoder/...  as encoder plus block_{i}/EncDecAttention/{q,k,v,o} and cross_attention_norm
    lm_head/kernel                                           [d_model, V]  (untied only)
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

# Additive mask value. Finite (not finfo.min) so fully padded rows stay NaN-free; exp(-1e9)
# is exactly 0 in float32, so unpadded rows are exact.
MASK_NEG = -1e9

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
FEED_FORWARD = ("relu", "gated-gelu", "gated-relu", "gelu")


@dataclasses.dataclass(frozen=True)
class T5Config:
    """T5 hyper-parameters (HF ``T5Config`` names). ``dtype`` is the compute dtype."""

    vocab_size: int
    d_model: int
    d_kv: int
    d_ff: int
    num_layers: int
    num_heads: int
    num_decoder_layers: int | None = None
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    layer_norm_epsilon: float = 1e-6
    feed_forward_proj: str = "relu"
    tie_word_embeddings: bool = True     # lm_head = shared embedding (v1.0)
    scale_decoder_outputs: bool = True   # multiply by d_model**-0.5 before the head (v1.0)
    pad_token_id: int = 0
    eos_token_id: int = 1
    decoder_start_token_id: int = 0
    dtype: str = "float32"
    dropout_rate: float = 0.0            # HF's dropout places; active only when not deterministic

    def __post_init__(self) -> None:
        if self.feed_forward_proj not in FEED_FORWARD:
            raise ValueError(f"unsupported feed_forward_proj {self.feed_forward_proj!r}; one of {FEED_FORWARD}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"unsupported dtype {self.dtype!r}; one of {sorted(_DTYPES)}")
        if self.num_decoder_layers is None:
            object.__setattr__(self, "num_decoder_layers", self.num_layers)

    @property
    def is_gated(self) -> bool:
        return self.feed_forward_proj.startswith("gated-")

    @property
    def compute_dtype(self) -> Any:
        return _DTYPES[self.dtype]

    def replace(self, **kw: Any) -> "T5Config":
        return dataclasses.replace(self, **kw)

    @classmethod
    def from_hf_json(cls, path: str, **overrides: Any) -> "T5Config":
        """Reads a HF T5 ``config.json`` (file or directory).

        Output scaling: ``scale_decoder_outputs`` when present (configs saved by transformers
        >= 5, which always write ``tie_word_embeddings: true``), else ``tie_word_embeddings``
        (absent = true), as HF decides it. Whether the head is tied is finally decided by the
        checkpoint content (``hf_t5.load_hf_t5_params``).
        """
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        with open(path, encoding="utf-8") as f:
            hf = json.load(f)
        if hf.get("model_type", "t5") not in ("t5", "mt5"):
            raise ValueError(f"{path}: model_type={hf.get('model_type')!r} is not a T5 model")
        tie = hf.get("tie_word_embeddings", True) is not False
        scale = bool(hf["scale_decoder_outputs"]) if "scale_decoder_outputs" in hf else tie
        kw = dict(
            vocab_size=hf["vocab_size"], d_model=hf["d_model"], d_kv=hf["d_kv"], d_ff=hf["d_ff"],
            num_layers=hf["num_layers"], num_heads=hf["num_heads"],
            num_decoder_layers=hf.get("num_decoder_layers"),
            relative_attention_num_buckets=hf.get("relative_attention_num_buckets", 32),
            relative_attention_max_distance=hf.get("relative_attention_max_distance", 128),
            layer_norm_epsilon=hf.get("layer_norm_epsilon", 1e-6),
            feed_forward_proj=hf.get("feed_forward_proj", "relu"),
            tie_word_embeddings=tie, scale_decoder_outputs=scale,
            pad_token_id=_first(hf.get("pad_token_id"), 0),
            eos_token_id=_first(hf.get("eos_token_id"), 1),
            decoder_start_token_id=_first(hf.get("decoder_start_token_id"), 0),
            dropout_rate=float(hf.get("dropout_rate") or 0.0),
        )
        kw.update(overrides)
        return cls(**kw)


def _first(value: Any, default: int) -> int:
    """HF token-id fields may be null, an int or a list of ints (the first is the main one)."""
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    return default if value is None else int(value)


# ------------------------------------------------------------------------------ pure helpers


def relative_position_bucket(relative_position: jax.Array, bidirectional: bool, num_buckets: int,
                             max_distance: int) -> jax.Array:
    """Mesh-TF / HF T5 bucketing of ``key_pos - query_pos``: exact buckets for small distances,
    log-spaced up to ``max_distance``, one bucket beyond; the sign gets half the buckets when
    ``bidirectional``, future positions share bucket 0 otherwise."""
    buckets = jnp.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).astype(relative_position.dtype) * num_buckets
        n = jnp.abs(relative_position)
    else:
        n = -jnp.minimum(relative_position, 0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    # max(n, 1) avoids log(0); those positions take the exact branch anyway.
    large = max_exact + (
        jnp.log(jnp.maximum(n, 1).astype(jnp.float32) / max_exact)
        / jnp.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).astype(relative_position.dtype)
    large = jnp.minimum(large, num_buckets - 1)
    return buckets + jnp.where(is_small, n, large)


def shift_right(labels: jax.Array, start_id: int, pad_id: int) -> jax.Array:
    """Teacher-forcing decoder inputs: ``[start] + labels[:-1]`` with -100 replaced by pad."""
    shifted = jnp.concatenate([jnp.full_like(labels[:, :1], start_id), labels[:, :-1]], axis=1)
    return jnp.where(shifted == -100, pad_id, shifted)


def token_log_likelihoods(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """log p(label_t | ...) per position, float32 [B, T]; 0 where ``labels`` < 0 (ignored)."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    safe = jnp.maximum(labels, 0)
    ll = jnp.take_along_axis(logp, safe[..., None], axis=-1)[..., 0]
    return jnp.where(labels >= 0, ll, 0.0)


# ------------------------------------------------------------------------------ modules

_init = nn.initializers.normal(stddev=0.05)


class RMSNorm(nn.Module):
    """T5LayerNorm: x * rsqrt(mean(x²) + eps) * scale, no mean, no bias, in float32."""

    eps: float
    dtype: Any

    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), jnp.float32)
        x32 = x.astype(jnp.float32)
        var = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
        return (x32 * jax.lax.rsqrt(var + self.eps) * scale).astype(self.dtype)


class _Linear(nn.Module):
    features: int
    dtype: Any

    @nn.compact
    def __call__(self, x):
        kernel = self.param("kernel", _init, (x.shape[-1], self.features), jnp.float32)
        return jnp.einsum("...i,io->...o", x.astype(self.dtype), kernel.astype(self.dtype))


class T5Attention(nn.Module):
    config: T5Config
    has_relative_bias: bool = False
    bidirectional: bool = True

    def position_bias(self, q_len: int, k_len: int, q_offset: jax.Array | int = 0) -> jax.Array:
        """[1, H, q_len, k_len] float32 relative position bias (first layer of a stack only);
        queries sit at positions ``q_offset + arange(q_len)`` (a cached decoder step)."""
        cfg = self.config
        rel = jnp.arange(k_len)[None, :] - (jnp.arange(q_len)[:, None] + q_offset)
        bucket = relative_position_bucket(rel, self.bidirectional, cfg.relative_attention_num_buckets,
                                          cfg.relative_attention_max_distance)
        table = self.relative_attention_bias(bucket)  # [q, k, H]
        return jnp.transpose(table, (2, 0, 1))[None].astype(jnp.float32)

    def setup(self) -> None:
        cfg = self.config
        inner = cfg.num_heads * cfg.d_kv
        self.q = _Linear(inner, cfg.compute_dtype)
        self.k = _Linear(inner, cfg.compute_dtype)
        self.v = _Linear(inner, cfg.compute_dtype)
        self.o = _Linear(cfg.d_model, cfg.compute_dtype)
        if self.has_relative_bias:
            self.relative_attention_bias = nn.Embed(cfg.relative_attention_num_buckets, cfg.num_heads,
                                                    embedding_init=_init, dtype=jnp.float32)
        self.dropout = nn.Dropout(cfg.dropout_rate)

    def project_kv(self, kv):
        """(keys, values) [B, Lk, H, d_kv] of ``kv`` (what a decoding cache holds)."""
        cfg = self.config
        b, lk = kv.shape[:2]
        return (self.k(kv).reshape(b, lk, cfg.num_heads, cfg.d_kv),
                self.v(kv).reshape(b, lk, cfg.num_heads, cfg.d_kv))

    def __call__(self, x, kv, bias, kv_proj=None, deterministic: bool = True):
        """``bias``: float32 additive [B or 1, H or 1, Lq, Lk] (mask + position bias);
        ``kv_proj``: precomputed ``project_kv`` output, used instead of ``kv``; dropout on the
        attention weights when not ``deterministic`` (HF's place)."""
        cfg = self.config
        b, lq = x.shape[:2]
        q = self.q(x).reshape(b, lq, cfg.num_heads, cfg.d_kv)
        k, v = self.project_kv(kv) if kv_proj is None else kv_proj
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) + bias  # no 1/sqrt(d)
        probs = self.dropout(jax.nn.softmax(scores, axis=-1), deterministic=deterministic)
        probs = probs.astype(cfg.compute_dtype)
        ctx = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, lq, cfg.num_heads * cfg.d_kv)
        return self.o(ctx)


class T5FeedForward(nn.Module):
    config: T5Config

    @nn.compact
    def __call__(self, x, deterministic: bool = True):
        cfg = self.config
        dt = cfg.compute_dtype
        act = jax.nn.relu if cfg.feed_forward_proj.endswith("relu") else (
            lambda h: jax.nn.gelu(h, approximate=True))  # HF maps gated-gelu to "gelu_new" (tanh)
        if cfg.is_gated:
            h = act(_Linear(cfg.d_ff, dt, name="wi_0")(x)) * _Linear(cfg.d_ff, dt, name="wi_1")(x)
        else:
            h = act(_Linear(cfg.d_ff, dt, name="wi")(x))
        h = nn.Dropout(cfg.dropout_rate)(h, deterministic=deterministic)
        return _Linear(cfg.d_model, dt, name="wo")(h)


class T5Block(nn.Module):
    config: T5Config
    is_decoder: bool
    has_relative_bias: bool

    def setup(self) -> None:
        cfg = self.config
        norm = lambda: RMSNorm(cfg.layer_norm_epsilon, cfg.compute_dtype)  # noqa: E731
        self.self_attention_norm = norm()
        self.SelfAttention = T5Attention(cfg, self.has_relative_bias, bidirectional=not self.is_decoder)
        if self.is_decoder:
            self.cross_attention_norm = norm()
            self.EncDecAttention = T5Attention(cfg)
        self.ff_norm = norm()
        self.DenseReluDense = T5FeedForward(cfg)
        self.dropout = nn.Dropout(cfg.dropout_rate)

    def position_bias(self, q_len: int, k_len: int, q_offset: jax.Array | int = 0) -> jax.Array:
        return self.SelfAttention.position_bias(q_len, k_len, q_offset)

    def cross_kv(self, enc):
        return self.EncDecAttention.project_kv(enc)

    def __call__(self, x, self_bias, enc=None, cross_bias=None, deterministic: bool = True):
        det = deterministic
        drop = lambda y: self.dropout(y, deterministic=det)  # noqa: E731  (each sub-layer's output)
        h = self.self_attention_norm(x)
        x = x + drop(self.SelfAttention(h, h, self_bias, deterministic=det))
        if self.is_decoder:
            x = x + drop(self.EncDecAttention(self.cross_attention_norm(x), enc, cross_bias,
                                              deterministic=det))
        return x + drop(self.DenseReluDense(self.ff_norm(x), deterministic=det))

    def step(self, x, index, self_bias, self_kv, cross_kv, cross_bias):
        """Decoder block on the token at ``index``: its keys/values are written into the
        ``self_kv`` cache [B, T, H, d_kv] and attention runs over the cache. Returns (x, self_kv)."""
        h = self.self_attention_norm(x)
        k, v = self.SelfAttention.project_kv(h)
        k = jax.lax.dynamic_update_slice_in_dim(self_kv[0], k.astype(self_kv[0].dtype), index, axis=1)
        v = jax.lax.dynamic_update_slice_in_dim(self_kv[1], v.astype(self_kv[1].dtype), index, axis=1)
        x = x + self.SelfAttention(h, None, self_bias, kv_proj=(k, v))
        x = x + self.EncDecAttention(self.cross_attention_norm(x), None, cross_bias, kv_proj=cross_kv)
        return x + self.DenseReluDense(self.ff_norm(x)), (k, v)


def _mask_bias(mask: jax.Array) -> jax.Array:
    """[B, Lk] 0/1 key mask -> float32 additive [B, 1, 1, Lk]."""
    return jnp.where(mask[:, None, None, :] > 0, 0.0, MASK_NEG).astype(jnp.float32)


class T5Stack(nn.Module):
    config: T5Config
    is_decoder: bool

    def setup(self) -> None:
        cfg = self.config
        n = cfg.num_decoder_layers if self.is_decoder else cfg.num_layers
        # setattr keeps HF's "block_{i}" names (a list attribute would be named "blocks_{i}").
        for i in range(n):
            setattr(self, f"block_{i}", T5Block(cfg, self.is_decoder, i == 0))
        self.final_layer_norm = RMSNorm(cfg.layer_norm_epsilon, cfg.compute_dtype)
        self.dropout = nn.Dropout(cfg.dropout_rate)

    @property
    def blocks(self) -> list[T5Block]:
        n = self.config.num_decoder_layers if self.is_decoder else self.config.num_layers
        return [getattr(self, f"block_{i}") for i in range(n)]

    def __call__(self, x, mask, enc=None, enc_mask=None, deterministic: bool = True):
        blocks = self.blocks
        x = self.dropout(x, deterministic=deterministic)  # on the embeddings, as HF
        length = x.shape[1]
        # The first block owns the relative position table; every block reuses its bias.
        bias = blocks[0].position_bias(length, length) + _mask_bias(mask)
        cross = None
        if self.is_decoder:
            causal = jnp.tril(jnp.ones((length, length), bool))
            bias = bias + jnp.where(causal, 0.0, MASK_NEG)[None, None]
            cross = _mask_bias(enc_mask)
        for block in blocks:
            x = block(x, bias, enc, cross, deterministic)
        return self.dropout(self.final_layer_norm(x), deterministic=deterministic)

    def cross_kv(self, enc) -> tuple:
        """Per decoder layer, the cross-attention (keys, values) of the encoder output."""
        return tuple(block.cross_kv(enc) for block in self.blocks)

    def step(self, x, index, self_kv: tuple, cross_kv: tuple, enc_mask):
        """One decoder position ``x`` [B, 1, d] at ``index`` over the caches; (y, new self_kv)."""
        blocks = self.blocks
        length = self_kv[0][0].shape[1]
        # Cache slots after ``index`` are still empty: causal mask by position.
        bias = blocks[0].position_bias(1, length, index) + jnp.where(
            jnp.arange(length) <= index, 0.0, MASK_NEG)[None, None, None, :]
        cross = _mask_bias(enc_mask)
        new_kv = []
        for block, skv, ckv in zip(blocks, self_kv, cross_kv):
            x, skv = block.step(x, index, bias, skv, ckv, cross)
            new_kv.append(skv)
        return self.final_layer_norm(x), tuple(new_kv)


class T5ForConditionalGeneration(nn.Module):
    """``encode`` / ``decode`` / ``__call__(input_ids, attention_mask, decoder_input_ids,
    decoder_attention_mask) -> logits`` float32 [B, T, V]; ``init_cache`` / ``decode_step`` for
    generation. Dropout (``config.dropout_rate``, HF's places: embeddings, attention weights,
    feed-forward activations, each sub-layer's output, the final norm's output) runs when
    ``deterministic=False`` and a ``dropout`` rng is given; decoding steps never drop."""

    config: T5Config

    def setup(self) -> None:
        cfg = self.config
        self.shared = nn.Embed(cfg.vocab_size, cfg.d_model, embedding_init=nn.initializers.normal(1.0),
                               dtype=jnp.float32)
        self.encoder = T5Stack(cfg, is_decoder=False)
        self.decoder = T5Stack(cfg, is_decoder=True)
        if not cfg.tie_word_embeddings:
            self.lm_head = _Linear(cfg.vocab_size, jnp.float32)

    def encode(self, input_ids, attention_mask, deterministic: bool = True):
        x = self.shared(input_ids).astype(self.config.compute_dtype)
        return self.encoder(x, attention_mask, deterministic=deterministic)

    def decode(self, encoded, attention_mask, decoder_input_ids, decoder_attention_mask=None,
               deterministic: bool = True):
        cfg = self.config
        if decoder_attention_mask is None:
            decoder_attention_mask = jnp.ones_like(decoder_input_ids)
        y = self.shared(decoder_input_ids).astype(cfg.compute_dtype)
        return self._head(self.decoder(y, decoder_attention_mask, encoded, attention_mask,
                                       deterministic=deterministic))

    def _head(self, y):
        cfg = self.config
        y = y.astype(jnp.float32)
        if cfg.scale_decoder_outputs:
            y = y * (cfg.d_model ** -0.5)
        if cfg.tie_word_embeddings:
            return self.shared.attend(y)
        return self.lm_head(y)

    def init_cache(self, encoded, attention_mask, max_length: int) -> dict[str, Any]:
        """Decoding cache for ``decode_step``: the cross-attention keys/values of ``encoded``
        (computed once), empty self-attention slots for ``max_length`` tokens, the encoder mask."""
        cfg = self.config
        b = encoded.shape[0]
        empty = jnp.zeros((b, max_length, cfg.num_heads, cfg.d_kv), cfg.compute_dtype)
        return {"self": tuple((empty, empty) for _ in range(cfg.num_decoder_layers)),
                "cross": self.decoder.cross_kv(encoded), "enc_mask": attention_mask}

    def decode_step(self, cache: dict[str, Any], token, index):
        """Logits float32 [B, V] of the token after ``token`` [B], the decoder input at position
        ``index``; and the cache with that position filled. Equal to ``decode`` over the prefix."""
        y = self.shared(token[:, None]).astype(self.config.compute_dtype)
        y, self_kv = self.decoder.step(y, index, cache["self"], cache["cross"], cache["enc_mask"])
        return self._head(y)[:, 0], {**cache, "self": self_kv}

    def __call__(self, input_ids, attention_mask, decoder_input_ids, decoder_attention_mask=None,
                 deterministic: bool = True):
        return self.decode(self.encode(input_ids, attention_mask, deterministic), attention_mask,
                           decoder_input_ids, decoder_attention_mask, deterministic)


def init_params(config: T5Config, rng: jax.Array) -> dict[str, Any]:
    """Random params of :class:`T5ForConditionalGeneration` (tests, smoke runs)."""
    ids = jnp.ones((1, 4), jnp.int32)
    return jax.jit(lambda r: T5ForConditionalGeneration(config).init(r, ids, ids, ids)["params"])(rng)


def answer_log_likelihood(model: T5ForConditionalGeneration, params, input_ids, attention_mask,
                          labels) -> tuple[jax.Array, jax.Array]:
    """(total, per-token mean) log-likelihood of ``labels`` (-100 = padding) given the inputs,
    teacher-forced, float32 [B] each. A row without any label gets total 0 and mean 0."""
    cfg = model.config
    dec_in = shift_right(labels, cfg.decoder_start_token_id, cfg.pad_token_id)
    # Padded label positions are masked out of the loss; the causal mask already keeps them from
    # influencing real positions, so the decoder mask is all ones (as HF with labels only).
    logits = model.apply({"params": params}, input_ids, attention_mask, dec_in)
    ll = token_log_likelihoods(logits, labels)
    n = jnp.sum(labels >= 0, axis=-1)
    total = jnp.sum(ll, axis=-1)
    return total, total / jnp.maximum(n, 1)
