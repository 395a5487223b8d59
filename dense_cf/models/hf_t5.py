"""Hugging Face T5 checkpoints <-> :class:`~dense_cf.models.t5.T5ForConditionalGeneration` params.

Safetensors + ``config.json`` + ``tokenizer.json`` (the ``tokenizers`` library), no torch at run
time. Handles v1.0 (ReLU, tied head, scaled outputs) and v1.1 (gated GELU, untied ``lm_head``)
checkpoints. Head tying follows HF: ``tie_word_embeddings`` (default true) decides the output
scaling; a checkpoint that carries an ``lm_head.weight`` different from ``shared.weight`` keeps
its own head (HF ≥ 5 warns and does not tie in that case), one without ``lm_head.weight`` uses
the shared embedding. Ignored keys: ``{encoder,decoder}.embed_tokens.weight`` (copies of
``shared``) and the unused ``decoder.block.0.layer.1.EncDecAttention.relative_attention_bias``
of old checkpoints.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer

from dense_cf.models.hf import (
    CheckpointError,
    _flatten,
    _unflatten,
    raise_on_mismatch,
    read_safetensors,
    resolve_model_dir,
)
from dense_cf.models.t5 import T5Config, T5ForConditionalGeneration, init_params

__all__ = ["load_hf_t5_params", "save_hf_t5", "load_t5", "load_t5_tokenizer", "hf_config_dict"]

_IGNORED = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
            "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight")


def _param_map(config: T5Config, untied_head: bool) -> dict[str, tuple[str, bool]]:
    """our "/"-path -> (HF key, transpose?). torch Linear weights are [out, in]; ours [in, out]."""
    m: dict[str, tuple[str, bool]] = {"shared/embedding": ("shared.weight", False)}
    ff = ("wi_0", "wi_1", "wo") if config.is_gated else ("wi", "wo")
    for stack, n in (("encoder", config.num_layers), ("decoder", config.num_decoder_layers)):
        for i in range(n):
            ours, hf = f"{stack}/block_{i}", f"{stack}.block.{i}.layer"
            for w in "qkvo":
                m[f"{ours}/SelfAttention/{w}/kernel"] = (f"{hf}.0.SelfAttention.{w}.weight", True)
            if i == 0:
                m[f"{ours}/SelfAttention/relative_attention_bias/embedding"] = (
                    f"{hf}.0.SelfAttention.relative_attention_bias.weight", False)
            m[f"{ours}/self_attention_norm/scale"] = (f"{hf}.0.layer_norm.weight", False)
            f = 1
            if stack == "decoder":
                for w in "qkvo":
                    m[f"{ours}/EncDecAttention/{w}/kernel"] = (f"{hf}.1.EncDecAttention.{w}.weight", True)
                m[f"{ours}/cross_attention_norm/scale"] = (f"{hf}.1.layer_norm.weight", False)
                f = 2
            for w in ff:
                m[f"{ours}/DenseReluDense/{w}/kernel"] = (f"{hf}.{f}.DenseReluDense.{w}.weight", True)
            m[f"{ours}/ff_norm/scale"] = (f"{hf}.{f}.layer_norm.weight", False)
        m[f"{stack}/final_layer_norm/scale"] = (f"{stack}.final_layer_norm.weight", False)
    if untied_head:
        m["lm_head/kernel"] = ("lm_head.weight", True)
    return m


def expected_param_shapes(config: T5Config) -> dict[str, tuple[int, ...]]:
    """Flat {"a/b/c": shape} of the Flax model's params (``jax.eval_shape``, no FLOPs)."""


    shapes = jax.eval_shape(lambda: init_params(config, jax.random.key(0)))
    return {"/".join(str(k.key) for k in path): tuple(leaf.shape)
            for path, leaf in jax.tree_util.tree_leaves_with_path(shapes)}


def load_hf_t5_params(model_dir: str, config: T5Config | None = None) -> tuple[dict[str, Any], T5Config]:
    """(params as nested numpy float32, config) from a HF T5 directory.

    ``config`` defaults to ``T5Config.from_hf_json(model_dir)``; the returned config has
    ``tie_word_embeddings`` set to what the checkpoint actually holds (see module docstring).
    Raises :class:`~dense_cf.models.hf.CheckpointError` listing missing / unexpected /
    mis-shaped keys.
    """
    config = config or T5Config.from_hf_json(model_dir)
    everything = read_safetensors(model_dir)
    raw = {k: v for k, v in everything.items() if k not in _IGNORED}
    if "shared.weight" not in raw and "encoder.embed_tokens.weight" in everything:
        raw["shared.weight"] = everything["encoder.embed_tokens.weight"]  # some exports drop `shared`
    head = raw.get("lm_head.weight")
    untied = head is not None and not (
        "shared.weight" in raw and head.shape == raw["shared.weight"].shape
        and np.array_equal(head, raw["shared.weight"]))
    if head is not None and not untied:
        raw.pop("lm_head.weight")  # an explicit copy of the tied embedding
    if not untied and not config.tie_word_embeddings:
        raise CheckpointError(f"{model_dir}: config says tie_word_embeddings=false but the checkpoint "
                              "has no separate lm_head.weight")
    config = config.replace(tie_word_embeddings=not untied)
    mapping = _param_map(config, untied)
    expected = expected_param_shapes(config)
    if set(mapping) != set(expected):  # internal consistency of this module with t5.py
        raise AssertionError(f"hf_t5.py key map out of date: {sorted(set(mapping) ^ set(expected))}")
    flat, missing, mismatched = {}, [], []
    for path, shape in expected.items():
        key, transpose = mapping[path]
        if key not in raw:
            missing.append(key)
            continue
        w = np.asarray(raw[key], dtype=np.float32)
        w = w.T if transpose else w
        if tuple(w.shape) != shape:
            mismatched.append(f"{key}: checkpoint {tuple(raw[key].shape)} does not give {shape}")
            continue
        flat[path] = np.ascontiguousarray(w)
    used = {k for k, _ in mapping.values()}
    unexpected = sorted(k for k in raw if k not in used)
    raise_on_mismatch(f"checkpoint in {model_dir!r} does not match T5Config (layers="
                      f"{config.num_layers}, d_model={config.d_model}, ff={config.feed_forward_proj}):",
                      missing, mismatched, unexpected)
    return _unflatten(flat), config


def hf_config_dict(config: T5Config) -> dict[str, Any]:
    """A ``config.json`` for HF ``T5ForConditionalGeneration`` (inverse of ``from_hf_json``)."""
    return {
        "architectures": ["T5ForConditionalGeneration"], "model_type": "t5",
        "vocab_size": config.vocab_size, "d_model": config.d_model, "d_kv": config.d_kv,
        "d_ff": config.d_ff, "num_layers": config.num_layers, "num_decoder_layers": config.num_decoder_layers,
        "num_heads": config.num_heads, "relative_attention_num_buckets": config.relative_attention_num_buckets,
        "relative_attention_max_distance": config.relative_attention_max_distance,
        "layer_norm_epsilon": config.layer_norm_epsilon, "feed_forward_proj": config.feed_forward_proj,
        "tie_word_embeddings": config.scale_decoder_outputs, "pad_token_id": config.pad_token_id,
        "eos_token_id": config.eos_token_id, "decoder_start_token_id": config.decoder_start_token_id,
        "dropout_rate": config.dropout_rate, "is_encoder_decoder": True, "torch_dtype": "float32",
    }


def save_hf_t5(params: Mapping[str, Any], config: T5Config, out_dir: str,
               tokenizer_dir: str | None = None) -> str:
    """Writes ``model.safetensors`` + ``config.json`` loadable by HF and :func:`load_hf_t5_params`.
    A tied model writes no ``lm_head.weight`` (HF re-ties it from ``shared.weight``)."""

    flat = _flatten(dict(params))
    untied = "lm_head/kernel" in flat
    if untied == config.tie_word_embeddings:
        raise CheckpointError("params and config disagree on the lm_head "
                              f"(lm_head present: {untied}, tie_word_embeddings: {config.tie_word_embeddings})")
    mapping = _param_map(config, untied)
    if set(flat) != set(mapping):
        raise CheckpointError(f"params do not match T5Config: missing {sorted(set(mapping) - set(flat))}, "
                              f"unexpected {sorted(set(flat) - set(mapping))}")
    tensors = {}
    for path, (key, transpose) in mapping.items():
        w = np.asarray(flat[path], dtype=np.float32)
        tensors[key] = np.ascontiguousarray(w.T if transpose else w)
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(hf_config_dict(config), f, indent=2)
    if tokenizer_dir is not None:
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "spiece.model"):
            src = os.path.join(tokenizer_dir, name)
            if os.path.isfile(src):
                shutil.copyfile(src, os.path.join(out_dir, name))
    return out_dir


def load_t5_tokenizer(model_dir: str):
    """The checkpoint's ``tokenizer.json`` (``tokenizers`` library; appends ``</s>``), with
    padding and truncation off."""

    path = os.path.join(model_dir, "tokenizer.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"no tokenizer.json in {model_dir!r} (only spiece.model?). Convert it once with "
            "transformers: AutoTokenizer.from_pretrained(dir).save_pretrained(dir)")
    tok = Tokenizer.from_file(path)
    tok.no_padding()
    tok.no_truncation()
    return tok


def load_t5(name_or_path: str, dtype: str = "float32"):
    """(model, params, tokenizer) for a local HF T5 directory or hub name (hub needs network)."""

    model_dir = resolve_model_dir(name_or_path)
    params, config = load_hf_t5_params(model_dir)
    config = config.replace(dtype=dtype)
    return T5ForConditionalGeneration(config), params, load_t5_tokenizer(model_dir)
