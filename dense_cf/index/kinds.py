"""Index kinds by name (issue 48 item 6): the registry that builds and opens every index.

Each ``IndexSpec.kind`` / ``config.eval.index`` value is one :class:`IndexKind`: the faiss
kinds (``flat``, ``hnsw``, ``ivfpq``, ``sq8``, ``ivfsq``; ``faiss_index``) and ``jax``
(``jax_search``). A spec names its kind (``spec.kind``); :func:`build` builds from an export
directory by that name, :func:`load` is the one dispatcher that opens a saved index of any kind
(by its manifest's ``format``; a ``rerank.json`` beside it wraps it in a ``RerankIndex``, which
wraps any kind). An unknown name is refused with the list of known ones.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable

import numpy as np

from dense_cf.index import faiss_index, jax_search, rerank
from dense_cf.index.base import MANIFEST_NAME, Index

__all__ = ["IndexKind", "build", "exact_index", "exact_kind", "get", "load", "names", "register",
           "spec", "spec_from_config"]


@dataclasses.dataclass(frozen=True)
class IndexKind:
    """One index kind. ``spec(**settings)``: its spec (``.kind`` = ``name``);
    ``spec_from_config(config.eval)``: the spec a run's config asks for; ``build(export_dir,
    spec, progress)`` and ``build_array(vectors [N, D], spec)`` (ids 0..N-1) build one;
    ``load(directory, spec=None, **kwargs)`` opens a saved one (``spec``: its search-time
    settings); ``format``: the manifest ``format`` its ``save`` writes; ``exact``: the exact kind
    of the same library (what an evaluation that must be exact uses)."""

    name: str
    format: str
    spec: Callable[..., Any]
    spec_from_config: Callable[[Any], Any]
    build: Callable[[str, Any, bool], Index]
    build_array: Callable[[np.ndarray, Any], Index]
    load: Callable[..., Index]
    exact: str


_KINDS: dict[str, IndexKind] = {}


def register(kind: IndexKind) -> IndexKind:
    """Adds ``kind`` to the registry (a name is registered once)."""
    if kind.name in _KINDS:
        raise ValueError(f"index kind {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    return kind


def names() -> tuple[str, ...]:
    """Every registered kind's name, in registration order (faiss kinds, then jax)."""
    return tuple(_KINDS)


def get(name: str) -> IndexKind:
    """The kind called ``name``; ValueError listing the known kinds otherwise."""
    try:
        return _KINDS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown index kind {name!r}; known kinds: {', '.join(_KINDS)}") from None


def spec(name: str, **settings: Any) -> Any:
    """The spec of kind ``name`` with ``settings`` (the kind's defaults for the rest)."""
    return get(name).spec(**settings)


def spec_from_config(name: str, eval_config: Any) -> Any:
    """The spec of kind ``name`` that ``config.eval`` asks for (configs/base.py)."""
    return get(name).spec_from_config(eval_config)


def build(export_dir: str, index_spec: Any, *, progress: bool = True) -> Index:
    """Builds ``index_spec``'s kind (``index_spec.kind``) from an export directory's shards."""
    return get(index_spec.kind).build(export_dir, index_spec, progress)


def exact_kind(name: str) -> str:
    """The exact kind of ``name``'s library: ``flat`` for a faiss kind, ``jax`` for jax."""
    return get(name).exact


def exact_index(vectors: np.ndarray, name: str) -> Index:
    """An exact inner-product index over [N, D] ``vectors`` (ids 0..N-1) of ``name``'s library
    (:func:`exact_kind`), so evaluations that must be exact follow the run's choice of library
    and run without faiss under ``jax``."""
    kind = get(get(name).exact)
    return kind.build_array(vectors, kind.spec())


def _format_of(directory: str) -> Any:
    path = os.path.join(directory, MANIFEST_NAME)
    try:
        with open(path) as f:
            return json.load(f).get("format")
    except (OSError, ValueError, AttributeError) as e:
        raise FileNotFoundError(f"no readable {MANIFEST_NAME} in {directory}: {e}") from e


def load(directory: str, *, spec: Any = None, source_dir: str | None = None,
         **kwargs: Any) -> Index:
    """The one dispatcher: the index saved in ``directory``, whichever kind wrote it, by its
    manifest's ``format`` (``kwargs``, e.g. a faiss index's ``use_gpu`` / ``omp_threads``, go
    to that kind's ``load``; ``spec`` sets its search-time settings). A ``rerank.json`` beside
    it wraps it in a :class:`~dense_cf.index.rerank.RerankIndex` (``source_dir``: a moved
    export)."""
    fmt = _format_of(directory)
    kind = next((k for k in _KINDS.values() if k.format == fmt), None)
    if kind is None:
        formats = sorted({k.format for k in _KINDS.values()})
        raise ValueError(f"{os.path.join(directory, MANIFEST_NAME)}: unknown index format {fmt!r}; "
                         f"known formats: {', '.join(formats)}")
    index = kind.load(directory, spec=spec, **kwargs)
    if rerank.is_rerank_index(directory):
        return rerank.RerankIndex.load(directory, index, source_dir=source_dir)
    return index


# --------------------------------------------------------------------------------------------
# The built-in kinds
# --------------------------------------------------------------------------------------------

def _faiss_from_config(name: str) -> Callable[[Any], faiss_index.IndexSpec]:
    def from_config(eval_cfg: Any) -> faiss_index.IndexSpec:
        # index_nlist / index_pq_m 0 = the defaults at build time.
        return faiss_index.IndexSpec(kind=name, nlist=int(eval_cfg.index_nlist) or None,
                                     pq_m=int(eval_cfg.index_pq_m) or None,
                                     train_size=int(eval_cfg.index_train_size),
                                     nprobe=int(eval_cfg.index_nprobe))
    return from_config


def _faiss_load(directory: str, *, spec: faiss_index.IndexSpec | None = None,
                **kwargs: Any) -> faiss_index.DenseIndex:
    index = faiss_index.DenseIndex.load(directory, **kwargs)
    if spec is not None:  # nprobe is a search-time setting: the saved index serves any
        index.set_search_params(nprobe=spec.nprobe)
    return index


for _name in faiss_index.KINDS:
    register(IndexKind(
        name=_name, format=faiss_index.FORMAT,
        spec=lambda _n=_name, **kw: faiss_index.IndexSpec(kind=_n, **kw),
        spec_from_config=_faiss_from_config(_name),
        build=lambda d, s, progress: faiss_index.build_index_from_dir(d, s, progress=progress),
        build_array=lambda v, s: faiss_index.build_index(v, None, s),
        load=_faiss_load, exact="flat"))


def _jax_load(directory: str, *, spec: jax_search.JaxSearchSpec | None = None,
              **kwargs: Any) -> jax_search.JaxIndex:
    kwargs.pop("use_gpu", None)  # faiss's placement options: a JaxIndex lives on the mesh
    kwargs.pop("omp_threads", None)
    return jax_search.JaxIndex.load(directory, spec=spec, **kwargs)


register(IndexKind(
    name=jax_search.KIND, format=jax_search.FORMAT,
    spec=jax_search.JaxSearchSpec,
    spec_from_config=lambda eval_cfg: jax_search.JaxSearchSpec.from_dict(dict(eval_cfg.jax)),
    build=lambda d, s, progress: jax_search.build_jax_index_from_dir(d, s, progress=progress),
    build_array=lambda v, s: jax_search.build_jax_index(v, None, s),
    load=_jax_load, exact=jax_search.KIND))
