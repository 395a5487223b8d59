"""Which checkpoint layout a directory holds, and how one tower is read from or written to it.

Layouts (docs/interop.md):
- ``bert``: an HF ``BertModel`` directory (config.json, safetensors, tokenizer files);
- ``dpr``: transformers' ``DPRQuestionEncoder`` / ``DPRContextEncoder`` (keys under
  ``question_encoder.bert_model.`` / ``ctx_encoder.bert_model.``); a checkpoint holding both
  prefixes (our ``export_hf --format dpr`` root, or a converted original DPR ``.cp`` with
  ``question_model.`` / ``ctx_model.``) gives each tower its own;
- ``sentence_transformers``: ``modules.json`` naming a Transformer module (a BERT directory)
  and a Pooling module (mean or CLS) and optionally Normalize, which set the pooling;
- an ``export_hf`` root: ``export.json`` maps each tower to its subdirectory.

Safetensors only (no torch at run time): :mod:`dense_cf.models.hf` maps the weights.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from safetensors import safe_open

from dense_cf.files import UserError, atomic_open, write_json
from dense_cf.models import hf
from dense_cf.models.bert import BertConfig

__all__ = ["TowerSource", "ROLES", "DPR_PREFIXES", "EXPORT_MANIFEST", "tower_source",
           "save_tower", "dpr_hf_config", "sentence_transformers_files"]

ROLES = ("question", "passage")
# Key prefixes of each role in DPR checkpoints: transformers' DPR classes, then the original
# facebookresearch/DPR state dict (its BiEncoder's question_model / ctx_model).
DPR_PREFIXES: dict[str, tuple[str, ...]] = {
    "question": ("question_encoder.bert_model.", "question_model."),
    "passage": ("ctx_encoder.bert_model.", "ctx_model."),
}
DPR_CLASSES = {"question": "DPRQuestionEncoder", "passage": "DPRContextEncoder"}
EXPORT_MANIFEST = "export.json"
ST_POOLING_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean"}


class ModelLayoutError(UserError, ValueError):
    """A model directory that no supported layout describes (one line, exit 1 in binaries)."""


@dataclasses.dataclass(frozen=True)
class TowerSource:
    """Where one tower's weights are: ``model_dir`` (config.json + safetensors) and the key
    ``prefix`` inside it (None: plain BERT keys), plus the pooling a sentence-transformers
    directory declares (None where the layout says nothing)."""

    model_dir: str
    layout: str
    prefix: str | None = None
    pooling: str | None = None
    normalize: bool | None = None
    tokenizer_dir: str | None = None

    def describe(self) -> str:
        extra = f", keys under {self.prefix!r}" if self.prefix else ""
        pool = f", pooling {self.pooling}{' + normalize' if self.normalize else ''}" if self.pooling else ""
        return f"{self.layout} checkpoint {self.model_dir}{extra}{pool}"


def _safetensor_keys(model_dir: str) -> list[str]:
    single = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(single):
        with safe_open(single, "np") as f:
            return list(f.keys())
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            return list(json.load(f)["weight_map"])
    return []


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8-sig") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ModelLayoutError(f"{path}: invalid JSON ({e})") from e


def _sentence_transformers(model_dir: str) -> tuple[str, str, bool]:
    """(transformer directory, pooling, normalize) from ``modules.json``."""
    path = os.path.join(model_dir, "modules.json")
    modules = _read_json(path)
    if not isinstance(modules, list):
        raise ModelLayoutError(f"{path}: expected a list of modules")
    transformer, pooling, normalize = None, None, False
    for i, m in enumerate(modules):
        kind = str(m.get("type", "")).rsplit(".", 1)[-1]
        sub = os.path.join(model_dir, m.get("path", ""))
        if kind == "Transformer":
            transformer = sub
        elif kind == "Pooling":
            cfg = _read_json(os.path.join(sub, "config.json"))
            modes = [v for k, v in ST_POOLING_MODES.items() if cfg.get(k)]
            others = sorted(k for k, v in cfg.items() if k.startswith("pooling_mode_")
                            and k not in ST_POOLING_MODES and v)
            if others or len(modes) != 1:
                raise ModelLayoutError(
                    f"{os.path.join(sub, 'config.json')}: pooling {others or modes or 'none'} is not "
                    "supported; dense_cf pools by 'cls' or 'mean' (exactly one)")
            pooling = modes[0]
        elif kind == "Normalize":
            normalize = True
        else:
            raise ModelLayoutError(f"{path}: module {i} ({m.get('type')}) is not supported; dense_cf "
                                   "reads Transformer (BERT), Pooling and Normalize modules")
    if transformer is None or pooling is None:
        raise ModelLayoutError(f"{path}: needs a Transformer and a Pooling module")
    return transformer, pooling, normalize


def tower_source(model_dir: str, role: str) -> TowerSource:
    """The :class:`TowerSource` of ``role`` ("question" | "passage") in local ``model_dir``."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    if not os.path.isdir(model_dir):
        raise ModelLayoutError(f"model directory {model_dir} does not exist or is not a directory")
    manifest = os.path.join(model_dir, EXPORT_MANIFEST)
    if os.path.isfile(manifest):  # an export_hf root: each tower in its own subdirectory
        towers = _read_json(manifest).get("towers", {})
        if role not in towers:
            raise ModelLayoutError(f"{manifest}: no {role} tower (has {sorted(towers)})")
        return tower_source(os.path.join(model_dir, towers[role]), role)
    if os.path.isfile(os.path.join(model_dir, "modules.json")):
        sub, pooling, normalize = _sentence_transformers(model_dir)
        inner = tower_source(sub, role) if os.path.abspath(sub) != os.path.abspath(model_dir) \
            else _weights_source(model_dir, role)
        return dataclasses.replace(inner, layout="sentence_transformers", pooling=pooling,
                                   normalize=normalize)
    return _weights_source(model_dir, role)


def _weights_source(model_dir: str, role: str) -> TowerSource:
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        raise ModelLayoutError(f"{model_dir}: no config.json (expected an HF BERT, DPR or "
                               "sentence-transformers model directory)")
    keys = _safetensor_keys(model_dir)
    found = {r: next((p for p in DPR_PREFIXES[r] if any(k.startswith(p) for k in keys)), None)
             for r in ROLES}
    if found[role]:
        return TowerSource(model_dir, "dpr", prefix=found[role], tokenizer_dir=model_dir)
    other = found["passage" if role == "question" else "question"]
    if other:  # a single-encoder DPR directory read for the other role: allowed, but say so
        return TowerSource(model_dir, "dpr", prefix=other, tokenizer_dir=model_dir)
    return TowerSource(model_dir, "bert", tokenizer_dir=model_dir)


def load_tower(source: TowerSource, config: BertConfig) -> dict[str, Any]:
    """The tower's params (numpy float32, shaped like ``BertEncoder(config)``)."""
    return hf.load_hf_bert_params(source.model_dir, config, prefix=source.prefix)


def dpr_hf_config(config: BertConfig, role: str) -> dict[str, Any]:
    """``config.json`` of transformers' ``DPRQuestionEncoder`` / ``DPRContextEncoder``."""
    out = config.to_hf_dict()
    out.update(architectures=[DPR_CLASSES[role]], model_type="dpr", projection_dim=0)
    return out


def sentence_transformers_files(out_dir: str, pooling: str, normalize: bool, hidden: int,
                                max_seq_length: int) -> None:
    """``modules.json`` + ``1_Pooling`` (+ ``2_Normalize``): sentence-transformers then pools
    the BERT directory ``out_dir`` as dense_cf does (and :func:`tower_source` reads it back)."""
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
        os.makedirs(os.path.join(out_dir, "2_Normalize"), exist_ok=True)
    write_json(os.path.join(out_dir, "modules.json"), modules)
    pool_cfg = {"word_embedding_dimension": hidden,
                **{k: v == pooling for k, v in ST_POOLING_MODES.items()},
                "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}
    write_json(os.path.join(out_dir, "1_Pooling", "config.json"), pool_cfg)
    write_json(os.path.join(out_dir, "sentence_bert_config.json"),
               {"max_seq_length": int(max_seq_length), "do_lower_case": False})


def save_tower(params: Mapping[str, Any], config: BertConfig, out_dir: str, *, layout: str,
               role: str, tokenizer_json: str, tokenizer_dir: str | None,
               added_tokens: Mapping[str, int] | None = None) -> str:
    """Writes one tower as a complete HF directory: weights + config.json in ``layout``
    ("hf": ``BertModel``; "dpr": ``DPRQuestionEncoder``/``DPRContextEncoder`` by ``role``),
    the run's ``tokenizer.json`` (added tokens included) and the base tokenizer's other files
    from ``tokenizer_dir``, with ``added_tokens.json`` for tokenizers built from vocab.txt."""
    if layout not in ("hf", "dpr"):
        raise ValueError(f"layout must be 'hf' or 'dpr', got {layout!r}")
    hf.save_hf_bert(params, config, out_dir, tokenizer_dir=tokenizer_dir)
    if layout == "dpr":
        prefix = DPR_PREFIXES[role][0]
        path = os.path.join(out_dir, "model.safetensors")
        tensors = hf.read_safetensors(out_dir)
        hf.write_safetensors({prefix + k: v for k, v in tensors.items()}, path)
        write_json(os.path.join(out_dir, "config.json"), dpr_hf_config(config, role))
    with atomic_open(os.path.join(out_dir, "tokenizer.json")) as f:
        f.write(tokenizer_json)
    if added_tokens:
        write_json(os.path.join(out_dir, "added_tokens.json"), dict(added_tokens))
    return out_dir
