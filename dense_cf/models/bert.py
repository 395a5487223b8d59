"""Compact Flax (linen) BERT encoder, numerically equal to Hugging Face ``BertModel``.

Post-LN BERT without the pooler: DPR/PiCL/EADPR score with the pooler-free [CLS] vector
(docs/method.md §1, §9). Every parameter carries logical axis names (``nn.with_logical_partitioning``)
so the trainer can turn them into ``NamedSharding``s with :data:`DEFAULT_LOGICAL_AXIS_RULES`
(see ``docs/ARCHITECTURE.md``, models section).

Parameter tree of :class:`BertEncoder` (H hidden, N heads, D = H/N, I intermediate)::

    embeddings/word_embeddings/embedding        [V, H]     ("vocab", "embed")
    embeddings/position_embeddings/embedding    [P, H]     (None, "embed")
    embeddings/token_type_embeddings/embedding  [T, H]     (None, "embed")
    embeddings/LayerNorm/{scale,bias}           [H]        ("embed",)
    layer_{i}/attention/{query,key,value}/kernel [H, N, D] ("embed", "heads", "kv")
    layer_{i}/attention/{query,key,value}/bias   [N, D]    ("heads", "kv")
    layer_{i}/attention/output/kernel            [N, D, H] ("heads", "kv", "embed")
    layer_{i}/attention/output/bias              [H]       ("embed",)
    layer_{i}/attention_norm/{scale,bias}        [H]       ("embed",)
    layer_{i}/intermediate/{kernel [H, I], bias [I]}       ("embed", "mlp"), ("mlp",)
    layer_{i}/output/{kernel [I, H], bias [H]}             ("mlp", "embed"), ("embed",)
    layer_{i}/output_norm/{scale,bias}           [H]       ("embed",)
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from dense_cf.models.matmul import mixed_einsum

LogicalRules = tuple[tuple[str, str | None], ...]

# Mesh axes are ("data", "model").
# - batch -> "data": data parallelism; the trainer gathers passage embeddings across "data"
#   for in-batch negatives (docs/method.md §1).
# - mlp / heads -> "model": Megatron-style tensor parallelism. The QKV kernels are split by
#   head and the FFN by its inner dimension, so each attention/FFN block needs one
#   reduction at its output projection and no resharding in between.
# - vocab -> None: BERT's vocabulary (30522 = 2·3·5087) is not divisible by usual model-axis
#   sizes (4, 8) and jax refuses uneven NamedShardings; the table is small (23M params for
#   BERT-base), so it is replicated. Use :func:`axis_rules_for` to shard it when it divides.
# - embed / kv / length -> None: the residual stream stays replicated over "model" (it is
#   what every block reads), and sequence lengths here (<= 256) are too short to split.
DEFAULT_LOGICAL_AXIS_RULES: LogicalRules = (
    ("batch", "data"),
    ("length", None),
    ("embed", None),
    ("mlp", "model"),
    ("heads", "model"),
    ("kv", None),
    ("vocab", None),
)

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
DTYPES = tuple(_DTYPES)  # compute dtypes by name (config.model.dtype)

# ``jax.checkpoint_policies`` usable as ``remat_policy`` (what a remat'ed layer keeps for the
# backward pass): "nothing_saveable" keeps only layer inputs (least memory, one extra forward);
# "dots_with_no_batch_dims_saveable" keeps the weight matmuls' outputs and recomputes the
# attention einsums, softmax, GELU and dropout (less recompute, more memory); "dots_saveable"
# keeps every matmul output including attention scores.
# "matmul_outputs" (MaxText's "minimal") keeps exactly the outputs of the six weight matmuls
# (tagged with :data:`MATMUL_NAMES` via ``checkpoint_name``) and recomputes LayerNorm, GELU,
# dropout and bias adds from them inside the backward fusions.
REMAT_POLICIES = ("nothing_saveable", "dots_with_no_batch_dims_saveable", "dots_saveable",
                  "matmul_outputs")
MATMUL_NAMES = ("query_proj", "key_proj", "value_proj", "qkv_proj", "attention_out", "mlp_in",
                "mlp_out")


def remat_policy(name: str) -> Any:
    """The ``jax.checkpoint_policies`` policy called ``name`` (:data:`REMAT_POLICIES`)."""
    if name == "matmul_outputs":
        return jax.checkpoint_policies.save_only_these_names(*MATMUL_NAMES)
    return getattr(jax.checkpoint_policies, name)

# How BertSelfAttention computes softmax(QK^T/sqrt(d) + mask) V (``BertConfig.attention_impl``):
# - "einsum": two einsums around a float32 softmax (the original path; default, so results on
#   existing configs do not move).
# - "dot_product": ``jax.nn.dot_product_attention``; cuDNN's fused (flash) kernel when the
#   backend is GPU, the compute dtype is bfloat16/float16 and no attention dropout is active;
#   on the CPU the einsum path (faster there, measured); else XLA's implementation (softmax in
#   float32 as well).
# - "xla" / "cudnn": ``jax.nn.dot_product_attention`` with that implementation forced ("cudnn"
#   raises where cuDNN cannot run it, e.g. on CPU or in float32).
# ``jax.nn.dot_product_attention`` has no dropout: a call that trains with
# attention_dropout_rate > 0 (deterministic=False) takes the einsum path for every impl, so
# attention-probability dropout is never silently dropped. Accelerator configs that want the
# fused kernel in training set attention dropout to 0 (configs/picl_nq_accel.py).
ATTENTION_IMPLS = ("einsum", "dot_product", "xla", "cudnn")


def _dtype_name(d: Any) -> str:
    """Normalises jnp.float32 / np.dtype / "float32" to a hashable string."""
    if isinstance(d, str):
        name = d
    else:
        name = jnp.dtype(d).name
    if name not in _DTYPES:
        raise ValueError(f"unsupported dtype {d!r}; expected one of {sorted(_DTYPES)}")
    return name


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """BERT hyper-parameters. ``dtype``/``param_dtype`` are stored as strings (hashable, JSON-able).

    ``dtype`` is the compute dtype (activations, matmuls); softmax and LayerNorm always run in
    float32. ``param_dtype`` is the storage dtype of the (master) weights, float32 by default even
    with bfloat16 compute: kernels are cast to ``dtype`` inside each matmul, so gradients and the
    optimizer state stay float32. ``remat`` re-computes each layer in the backward pass with the
    jax checkpoint policy ``remat_policy`` (see :class:`BertEncoder`). ``attention_impl`` picks
    the attention kernel (:data:`ATTENTION_IMPLS`). Like dtype and remat it is a run-time choice,
    not part of the checkpoint: :meth:`to_hf_dict` writes HF fields only, and runs keep it in
    their config (``config.model.attention_impl``, read by ``model_from_config``).
    """

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    pad_token_id: int = 0
    dtype: str = "float32"
    param_dtype: str = "float32"
    remat: bool = False
    remat_policy: str = "nothing_saveable"
    attention_impl: str = "einsum"
    # Training levers (docs/results/levers.md); run-time choices, off by default, param tree
    # unchanged. layer_norm_remat: each LayerNorm under jax.checkpoint, so its backward
    # recomputes from the (compute-dtype) input instead of keeping float32 [T, H] residuals.
    # fused_qkv: one [H, 3N, D] matmul from the three query/key/value kernels concatenated at
    # compute time (checkpoints and the HF export still see three kernels).
    layer_norm_remat: bool = False
    fused_qkv: bool = False
    matmul_dtype: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", _dtype_name(self.dtype))
        object.__setattr__(self, "param_dtype", _dtype_name(self.param_dtype))
        object.__setattr__(self, "matmul_dtype", _dtype_name(self.matmul_dtype or self.dtype))
        if self.remat_policy not in REMAT_POLICIES:
            raise ValueError(f"unsupported remat_policy {self.remat_policy!r}; one of {REMAT_POLICIES}")
        if self.attention_impl not in ATTENTION_IMPLS:
            raise ValueError(f"unsupported attention_impl {self.attention_impl!r}; one of {ATTENTION_IMPLS}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by num_heads={self.num_heads}"
            )
        if self.hidden_act not in _ACTIVATIONS:
            raise ValueError(f"unsupported hidden_act {self.hidden_act!r}; one of {sorted(_ACTIVATIONS)}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def compute_dtype(self) -> Any:
        return _DTYPES[self.dtype]

    @property
    def params_dtype(self) -> Any:
        return _DTYPES[self.param_dtype]

    @property
    def mixed_matmuls(self) -> bool:
        """True when matmul operands are narrower than the compute dtype (``matmul_dtype``)."""
        return self.matmul_dtype != self.dtype

    @property
    def matmul_operand_dtype(self) -> Any:
        return _DTYPES[self.matmul_dtype]

    def replace(self, **kw: Any) -> BertConfig:
        return dataclasses.replace(self, **kw)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_hf_json(cls, path: str, **overrides: Any) -> BertConfig:
        """Reads a Hugging Face BERT ``config.json`` (a file or the directory holding it)."""
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        with open(path, encoding="utf-8") as f:
            hf = json.load(f)
        if hf.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(
                f"{path}: position_embedding_type={hf['position_embedding_type']!r} is not supported "
                "(only 'absolute')"
            )
        kw = dict(
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=hf["num_attention_heads"],
            intermediate_size=hf["intermediate_size"],
            max_position_embeddings=hf.get("max_position_embeddings", 512),
            type_vocab_size=hf.get("type_vocab_size", 2),
            layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
            hidden_act=hf.get("hidden_act", "gelu"),
            dropout_rate=hf.get("hidden_dropout_prob", 0.1),
            attention_dropout_rate=hf.get("attention_probs_dropout_prob", 0.1),
            pad_token_id=hf.get("pad_token_id", 0) or 0,
        )
        kw.update(overrides)
        return cls(**kw)

    def to_hf_dict(self) -> dict[str, Any]:
        """The inverse of :meth:`from_hf_json`: a ``config.json`` for HF ``BertModel``."""
        return {
            "architectures": ["BertModel"],
            "model_type": "bert",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "intermediate_size": self.intermediate_size,
            "max_position_embeddings": self.max_position_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "layer_norm_eps": self.layer_norm_eps,
            "hidden_act": self.hidden_act,
            "hidden_dropout_prob": self.dropout_rate,
            "attention_probs_dropout_prob": self.attention_dropout_rate,
            "pad_token_id": self.pad_token_id,
            "position_embedding_type": "absolute",
            "initializer_range": 0.02,
            "torch_dtype": "float32",
        }

    @classmethod
    def tiny(
        cls,
        vocab_size: int = 128,
        hidden: int = 32,
        layers: int = 2,
        heads: int = 2,
        intermediate: int | None = None,
        max_position_embeddings: int = 128,
        **kw: Any,
    ) -> BertConfig:
        """A small random-init config for tests and CPU smoke runs (intermediate = 4·hidden)."""
        return cls(
            vocab_size=vocab_size,
            hidden_size=hidden,
            num_layers=layers,
            num_heads=heads,
            intermediate_size=intermediate or 4 * hidden,
            max_position_embeddings=max_position_embeddings,
            **kw,
        )


def axis_rules_for(
    config: BertConfig, model_axis_size: int, rules: Sequence[tuple[str, str | None]] | None = None
) -> LogicalRules:
    """Logical rules with every "model"-sharded axis that ``model_axis_size`` does not divide
    replaced by None (replicated), and "vocab" sharded when it divides.

    jax rejects NamedShardings that split a dimension unevenly, so e.g. 12 heads on an
    8-way "model" axis must fall back to replication.
    """
    if rules is None:
        rules = tuple(r for r in DEFAULT_LOGICAL_AXIS_RULES if r[0] != "vocab") + (("vocab", "model"),)
    sizes = {
        "vocab": config.vocab_size,
        "mlp": config.intermediate_size,
        "heads": config.num_heads,
        "embed": config.hidden_size,
        "kv": config.head_dim,
    }
    out = []
    for name, axis in rules:
        if axis == "model" and name in sizes and sizes[name] % model_axis_size:
            axis = None
        out.append((name, axis))
    return tuple(out)


_ACTIVATIONS = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),  # HF "gelu" = exact erf form
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
}

HIDDEN_ACTS = tuple(_ACTIVATIONS)

_init = nn.initializers.normal(stddev=0.02)  # BERT's initializer_range
_zeros = nn.initializers.zeros
_ones = nn.initializers.ones
_ACT = ("batch", "length", "embed")


def _layer_norm(config: BertConfig, name: str) -> nn.Module:
    # float32 normalisation even for bfloat16 compute (numerical stability).
    cls = nn.remat(nn.LayerNorm) if config.layer_norm_remat else nn.LayerNorm
    return cls(
        epsilon=config.layer_norm_eps,
        dtype=jnp.float32,
        param_dtype=config.params_dtype,
        scale_init=nn.with_logical_partitioning(_ones, ("embed",)),
        bias_init=nn.with_logical_partitioning(_zeros, ("embed",)),
        name=name,
    )


class _Projection(nn.Module):
    """Multi-dimensional dense layer (contract the last ``n_in`` dims, output ``features``).

    Not ``nn.DenseGeneral``: it calls ``kernel_init`` with a flattened 2-D shape, so a
    3-name logical-partitioning init fails under a mesh (the constraint's rank is wrong).
    """

    features: tuple[int, ...]
    n_in: int
    kernel_axes: tuple[str | None, ...]
    bias_axes: tuple[str | None, ...]
    dtype: Any
    param_dtype: Any
    matmul_dtype: Any = None  # None: operands in ``dtype``; else :func:`mixed_einsum`

    @nn.compact
    def __call__(self, x, apply: bool = True):
        """``x`` projected; with ``apply=False`` only the (kernel, bias) params, uncast (fused QKV)."""
        in_shape = x.shape[x.ndim - self.n_in:]
        kernel = self.param(
            "kernel", nn.with_logical_partitioning(_init, self.kernel_axes), in_shape + self.features, self.param_dtype
        )
        bias = self.param("bias", nn.with_logical_partitioning(_zeros, self.bias_axes), self.features, self.param_dtype)
        if not apply:
            return kernel, bias
        x, kernel, bias = x.astype(self.dtype), kernel.astype(self.dtype), bias.astype(self.dtype)
        return _contract(x, kernel, self.n_in, self.matmul_dtype) + bias


def _contract(x: jax.Array, kernel: jax.Array, n_in: int, matmul_dtype: Any) -> jax.Array:
    """``x``'s last ``n_in`` dims contracted with ``kernel``'s first ``n_in``."""
    if matmul_dtype is None:
        contract = (tuple(range(x.ndim - n_in, x.ndim)), tuple(range(n_in)))
        return jax.lax.dot_general(x, kernel, (contract, ((), ())))
    letters = "abcdefghijklmnopqrstuvwxyz"
    free_x, shared = letters[:x.ndim - n_in], letters[x.ndim - n_in:x.ndim]
    out = letters[x.ndim:x.ndim + kernel.ndim - n_in]
    return mixed_einsum(f"{free_x}{shared},{shared}{out}->{free_x}{out}", x, kernel, matmul_dtype)


def _matmul_dtype(cfg: BertConfig) -> Any:
    """What :class:`_Projection` takes as ``matmul_dtype``: None unless operands are narrower."""
    return cfg.matmul_operand_dtype if cfg.mixed_matmuls else None


class BertEmbeddings(nn.Module):
    config: BertConfig

    @nn.compact
    def __call__(self, input_ids, token_type_ids, deterministic: bool, position_ids=None):
        cfg = self.config

        def embed(num: int, axes: tuple[str | None, str], name: str) -> nn.Embed:
            return nn.Embed(
                num,
                cfg.hidden_size,
                dtype=jnp.float32,
                param_dtype=cfg.params_dtype,
                embedding_init=nn.with_logical_partitioning(_init, axes),
                name=name,
            )

        if input_ids.shape[-1] > cfg.max_position_embeddings:
            # jnp.take would silently clamp/fill the missing positions.
            raise ValueError(
                f"sequence length {input_ids.shape[-1]} > max_position_embeddings={cfg.max_position_embeddings}"
            )
        # Packed rows (dense_cf.inputs.packing) restart positions at each passage.
        positions = jnp.arange(input_ids.shape[-1])[None, :] if position_ids is None else position_ids
        x = (
            embed(cfg.vocab_size, ("vocab", "embed"), "word_embeddings")(input_ids)
            + embed(cfg.max_position_embeddings, (None, "embed"), "position_embeddings")(positions)
            + embed(cfg.type_vocab_size, (None, "embed"), "token_type_embeddings")(token_type_ids)
        )
        x = _layer_norm(cfg, "LayerNorm")(x).astype(cfg.compute_dtype)
        x = nn.Dropout(cfg.dropout_rate)(x, deterministic=deterministic)
        return nn.with_logical_constraint(x, _ACT)


class BertSelfAttention(nn.Module):
    """Multi-head self-attention + output projection (HF ``BertAttention`` minus its LayerNorm)."""

    config: BertConfig

    @nn.compact
    def __call__(self, x, mask_bias, deterministic: bool):
        cfg = self.config
        dt = cfg.compute_dtype

        def proj(name: str) -> _Projection:
            return _Projection(
                (cfg.num_heads, cfg.head_dim), 1, ("embed", "heads", "kv"), ("heads", "kv"),
                dt, cfg.params_dtype, _matmul_dtype(cfg), name=name,
            )

        head_act = ("batch", "length", "heads", "kv")
        if cfg.fused_qkv:
            # One matmul over the concatenated kernels [H, 3N, D]; same params as unfused.
            parts = [proj(n)(x, apply=False) for n in ("query", "key", "value")]
            kernel = jnp.concatenate([p[0] for p in parts], axis=1).astype(dt)
            bias = jnp.concatenate([p[1] for p in parts], axis=0).astype(dt)
            qkv = _contract(x.astype(dt), kernel, 1, _matmul_dtype(cfg)) + bias
            qkv = checkpoint_name(qkv, "qkv_proj")
            q, k, v = (nn.with_logical_constraint(t, head_act) for t in jnp.split(qkv, 3, axis=2))
        else:
            q = nn.with_logical_constraint(checkpoint_name(proj("query")(x), "query_proj"), head_act)
            k = nn.with_logical_constraint(checkpoint_name(proj("key")(x), "key_proj"), head_act)
            v = nn.with_logical_constraint(checkpoint_name(proj("value")(x), "value_proj"), head_act)
        segmented = mask_bias.shape[2] > 1  # [B, 1, L, L]: packed rows (block-diagonal mask)
        attn_dropout = cfg.attention_dropout_rate > 0 and not deterministic
        impl = _fused_impl(cfg, attn_dropout)
        if impl is None:
            # Head-major [B, H, L, D] operands before the two batched matmuls: XLA:CPU runs
            # them 2.3x faster forward and 1.3x forward+backward than the same contractions
            # written on [B, L, H, D] (docs/scale.md "Attention layout on the CPU").
            qh, kh, vh = (jnp.swapaxes(t, 1, 2) for t in (q / jnp.sqrt(cfg.head_dim).astype(dt), k, v))
            scores = jnp.matmul(qh, jnp.swapaxes(kh, 2, 3))
            # Softmax in float32; mask_bias is float32 [B, 1, 1, L] (0 or large negative).
            probs = jax.nn.softmax(scores.astype(jnp.float32) + mask_bias, axis=-1).astype(dt)
            probs = nn.Dropout(cfg.attention_dropout_rate)(probs, deterministic=deterministic)
            ctx = jnp.swapaxes(jnp.matmul(probs, vh), 1, 2)
        elif impl == "cudnn" and segmented:
            # Packed rows: the block-diagonal mask itself (cuDNN takes it as a bias).
            ctx = jax.nn.dot_product_attention(q, k, v, mask=(mask_bias == 0), implementation="cudnn")
        elif impl == "cudnn":
            # cuDNN takes padding as key lengths (mask type PADDING): the project's inputs are
            # right-padded (tokenizers and pipeline pad at the end), so the count of real keys
            # is the mask. Query rows are not masked, as in the einsum path.
            kv_len = jnp.sum(mask_bias[:, 0, 0, :] == 0, axis=-1).astype(jnp.int32)
            ctx = jax.nn.dot_product_attention(q, k, v, key_value_seq_lengths=kv_len,
                                               implementation="cudnn")
        else:
            # XLA: a boolean mask is exact for any mask layout; logits and softmax in float32.
            mask = (mask_bias == 0)
            ctx = jax.nn.dot_product_attention(q, k, v, mask=mask, implementation="xla")
        ctx = nn.with_logical_constraint(ctx, head_act)
        out = _Projection(
            (cfg.hidden_size,), 2, ("heads", "kv", "embed"), ("embed",), dt, cfg.params_dtype,
            _matmul_dtype(cfg), name="output"
        )(ctx)
        out = checkpoint_name(out, "attention_out")
        return nn.with_logical_constraint(out, _ACT)


def _fused_impl(cfg: BertConfig, attn_dropout: bool) -> str | None:
    """The ``jax.nn.dot_product_attention`` implementation to use, or None for the einsum path."""
    if cfg.attention_impl == "einsum" or attn_dropout:
        return None
    if cfg.attention_impl != "dot_product":
        return cfg.attention_impl
    # cuDNN's flash attention takes only half-precision inputs; the backend is known at trace time.
    if jax.default_backend() == "gpu" and cfg.dtype in ("bfloat16", "float16"):
        return "cudnn"
    if jax.default_backend() == "cpu":
        return None  # the head-major einsum path: faster on XLA:CPU than XLA's implementation
    return "xla"


class BertLayer(nn.Module):
    """One post-LN transformer block: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    config: BertConfig

    @nn.compact
    def __call__(self, x, mask_bias, deterministic: bool):
        cfg = self.config
        dt = cfg.compute_dtype
        drop = nn.Dropout(cfg.dropout_rate)

        a = BertSelfAttention(cfg, name="attention")(x, mask_bias, deterministic)
        a = drop(a, deterministic=deterministic)
        x = _layer_norm(cfg, "attention_norm")(x + a).astype(dt)
        x = nn.with_logical_constraint(x, _ACT)

        h = _Projection((cfg.intermediate_size,), 1, ("embed", "mlp"), ("mlp",), dt,
                        cfg.params_dtype, _matmul_dtype(cfg), name="intermediate")(x)
        h = checkpoint_name(h, "mlp_in")
        h = _ACTIVATIONS[cfg.hidden_act](h)
        h = nn.with_logical_constraint(h, ("batch", "length", "mlp"))
        h = _Projection((cfg.hidden_size,), 1, ("mlp", "embed"), ("embed",), dt,
                        cfg.params_dtype, _matmul_dtype(cfg), name="output")(h)
        h = checkpoint_name(h, "mlp_out")
        h = drop(h, deterministic=deterministic)
        x = _layer_norm(cfg, "output_norm")(x + h).astype(dt)
        return nn.with_logical_constraint(x, _ACT)


def _require_auto_mesh() -> None:
    """Logical partitioning works through sharding constraints, which are asserts on
    Explicit mesh axes (the default of ``jax.make_mesh`` in current jax): fail early and clearly."""
    mesh = jax.sharding.get_abstract_mesh()
    if not mesh.empty and any(t == jax.sharding.AxisType.Explicit for t in mesh.axis_types):
        raise ValueError(
            f"BertEncoder needs a mesh with Auto axes, got {mesh}. Build it with "
            "jax.make_mesh(shape, names, axis_types=(jax.sharding.AxisType.Auto,) * len(names))."
        )


# Large finite negative (not -inf / finfo.min) so a row whose keys are all padding gives a
# uniform softmax instead of NaN; exp(-1e9) is exactly 0 in float32, so real rows are exact.
MASK_NEG = -1e9


class BertEncoder(nn.Module):
    """BERT encoder returning ``last_hidden_state`` [B, L, H] in ``config.dtype``.

    With ``config.remat`` each layer is wrapped in ``nn.remat`` with ``config.remat_policy``.
    The default, ``nothing_saveable``, keeps only layer inputs and recomputes everything inside a
    layer in the backward pass: the largest activation saving (memory is what limits the batch
    size, and in-batch negatives want large batches, docs/method.md §9) for ~1/3 more compute. Remat
    composes with GradCache (``train/gradcache.py``): remat shrinks one chunk's activations.
    """

    config: BertConfig

    @nn.compact
    def __call__(self, input_ids, attention_mask, token_type_ids=None, deterministic: bool = True,
                 segment_ids=None, position_ids=None):
        """``segment_ids`` [B, L] (1, 2, ... per packed passage, 0 padding) makes attention
        block-diagonal; ``position_ids`` [B, L] then restart per passage
        (:mod:`dense_cf.inputs.packing`). Without them each row is one sequence."""
        cfg = self.config
        _require_auto_mesh()
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        x = BertEmbeddings(cfg, name="embeddings")(input_ids, token_type_ids, deterministic, position_ids)
        if segment_ids is None:
            mask_bias = jnp.where(attention_mask[:, None, None, :] > 0, 0.0, MASK_NEG).astype(jnp.float32)
        else:
            same = (segment_ids[:, :, None] == segment_ids[:, None, :]) & (segment_ids[:, None, :] > 0)
            mask_bias = jnp.where(same[:, None], 0.0, MASK_NEG).astype(jnp.float32)

        layer_cls = BertLayer
        if cfg.remat:
            # static_argnums counts `self` as 0: deterministic is argument 3.
            policy = remat_policy(cfg.remat_policy)
            layer_cls = nn.remat(BertLayer, static_argnums=(3,), policy=policy)
        for i in range(cfg.num_layers):
            x = layer_cls(cfg, name=f"layer_{i}")(x, mask_bias, deterministic)
        return x
