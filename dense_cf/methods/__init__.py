"""The method registry: every retrieval method (and reader) is one entry (docs/ARCHITECTURE.md).

``get(name)`` returns the :class:`~dense_cf.methods.base.Method` of ``config.method``. Built-in
names are registered below; a plug-in is either registered with :func:`register` by code that
runs first, or named as ``"package.module:ATTRIBUTE"``, which is imported on first use (so a
method defined outside dense_cf works with every binary, big_vision-style; the resolver is
:class:`dense_cf.registry.Registry`, shared with the evaluators).
"""

from __future__ import annotations

import copy

from dense_cf.methods import contrastive, dcsr, fid, multihop, reader
from dense_cf.methods.base import (
    DUAL_ENCODER,
    Embeddings,
    Inputs,
    Method,
    ModelSpec,
    PredictFn,
    Prediction,
    SentenceIndex,
    embed_passages,
)
from dense_cf.methods.contrastive import DPR_LOSS, EADPR_LOSS, PICL_LOSS
from dense_cf.registry import Registry

__all__ = ["DUAL_ENCODER", "Embeddings", "Inputs", "Method", "ModelSpec", "Prediction", "PredictFn",
           "SentenceIndex", "embed_passages", "get", "names", "register", "with_loss_defaults"]

_REGISTRY: Registry[Method] = Registry(Method, "config.method")


def register(method: Method, *, replace: bool = False) -> Method:
    """Adds ``method`` under ``method.name``; returns it (usable as a module-level statement)."""
    return _REGISTRY.register(method, replace=replace)


def names() -> list[str]:
    return _REGISTRY.names()


def get(name: str) -> Method:
    """The method called ``name`` (a registered name or ``"module:ATTRIBUTE"``)."""
    return _REGISTRY.get(name)


def with_loss_defaults(config):
    """A copy of ``config`` whose unset (None) ``config.loss`` fields hold its method's weights,
    so a run's config.json records the numbers it trained with (docs/method.md §3)."""
    out = copy.deepcopy(config)
    try:
        method = get(config.method)
    except ValueError:  # the config check names it
        return out
    for key, value in method.loss_defaults.items():
        if out.loss.get(key) is None:
            out.loss[key] = value
    return out


# Each entry carries its own loss weights (Method.loss_defaults).
for _m in (contrastive.make("dpr", DPR_LOSS), contrastive.make("picl", PICL_LOSS),
           contrastive.make("eadpr", EADPR_LOSS), dcsr.METHOD, multihop.make("mdr", DPR_LOSS),
           multihop.make("mdr-eadpr", EADPR_LOSS), reader.METHOD, fid.METHOD):
    register(_m)
