"""The method registry: every retrieval method (and reader) is one entry (docs/ARCHITECTURE.md).

``get(name)`` returns the :class:`~dense_cf.methods.base.Method` of ``config.method``. Built-in
names are registered below; a plug-in is either registered with :func:`register` by code that
runs first, or named as ``"package.module:ATTRIBUTE"``, which is imported on first use (so a
method defined outside dense_cf works with every binary, big_vision-style).
"""

from __future__ import annotations

import importlib

from dense_cf.methods import contrastive, dcsr, fid, multihop, reader
from dense_cf.methods.base import (
    DUAL_ENCODER,
    Embeddings,
    Inputs,
    Method,
    ModelSpec,
    PredictFn,
    Prediction,
    embed_passages,
)

__all__ = ["DUAL_ENCODER", "Embeddings", "Inputs", "Method", "ModelSpec", "Prediction", "PredictFn",
           "embed_passages", "get", "names", "register"]

_REGISTRY: dict[str, Method] = {}


def register(method: Method, *, replace: bool = False) -> Method:
    """Adds ``method`` under ``method.name``; returns it (usable as a module-level statement)."""
    if method.name in _REGISTRY and not replace:
        raise ValueError(f"method {method.name!r} is already registered")
    _REGISTRY[method.name] = method
    return method


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str) -> Method:
    """The method called ``name`` (a registered name or ``"module:ATTRIBUTE"``)."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" in name:
        module, attr = name.split(":", 1)
        try:
            method = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"config.method={name!r}: cannot load {attr} from {module}: {e}"
                             ) from e
        if not isinstance(method, Method):
            raise ValueError(f"config.method={name!r} is a {type(method).__name__}, not a Method")
        return method
    raise ValueError(f"unknown config.method {name!r}; registered: {', '.join(names())} "
                     f"(or 'package.module:ATTRIBUTE' for a plug-in)")


for _m in (contrastive.make("dpr"), contrastive.make("picl"), contrastive.make("eadpr"),
           dcsr.METHOD, multihop.make("mdr"), multihop.make("mdr-eadpr"), reader.METHOD,
           fid.METHOD):
    register(_m)
