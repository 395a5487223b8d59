"""What every index kind shares (issue 48 item 6): the :class:`Index` protocol, the manifest
file name, the spec (de)serialisation and the deterministic top-k merge.

faiss (``faiss_index``), JAX (``jax_search``) and re-ranking (``rerank``) indexes each implement
:class:`Index`; ``kinds`` builds and opens one by its kind's name (the one dispatcher).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

__all__ = ["MANIFEST_NAME", "DictSpec", "Index", "check_search_args", "is_saved_index",
           "merge_topk"]

MANIFEST_NAME = "index.json"  # every saved index's manifest (its "format" names the kind)


@runtime_checkable
class Index(Protocol):
    """A searchable index over passage vectors: ``search(queries [Q, D], k)`` returns
    ``(scores float32 [Q, k], ids int64 [Q, k])`` by inner product, missing results as
    ``(-inf, -1)``; ``save(directory)`` writes it with a :data:`MANIFEST_NAME`."""

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]: ...

    def save(self, directory: str) -> dict[str, Any]: ...


class DictSpec:
    """``to_dict`` / ``from_dict`` (unknown fields refused, named) for a spec dataclass."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields {unknown}")
        return cls(**d)


def is_saved_index(directory: str) -> bool:
    """True when ``directory`` holds a saved index of any kind (its :data:`MANIFEST_NAME`; an
    export directory's manifest.json is a different file)."""
    return os.path.isfile(os.path.join(directory, MANIFEST_NAME))


def check_search_args(queries: np.ndarray, k: int, dim: int) -> tuple[np.ndarray, int]:
    """(queries as an array, k as int) after checking a search's shape [Q, dim] and k >= 1."""
    q = np.asarray(queries)
    if q.ndim != 2 or q.shape[1] != dim:
        raise ValueError(f"queries must have shape [Q, {dim}], got {q.shape}")
    if int(k) < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return q, int(k)


def merge_topk(scores: Sequence[np.ndarray], ids: Sequence[np.ndarray], k: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """Merges per-shard results [Q, k_i] into the top k per row.

    Order: score descending, then lower id first (deterministic for ties). Entries with
    id < 0 (faiss "no result") are dropped to the end as (-inf, -1).
    """
    s = np.concatenate([np.asarray(x, np.float32) for x in scores], axis=1)
    i = np.concatenate([np.asarray(x, np.int64) for x in ids], axis=1)
    missing = i < 0
    s = np.where(missing, np.float32(-np.inf), s)
    i = np.where(missing, np.int64(-1), i)
    # lexsort: last key is primary -> (missing last, score desc, id asc).
    order = np.lexsort((i, -s, missing), axis=1)[:, :k]
    s = np.take_along_axis(s, order, axis=1)
    i = np.take_along_axis(i, order, axis=1)
    if s.shape[1] < k:  # fewer candidates than k in total
        pad = k - s.shape[1]
        s = np.concatenate([s, np.full((s.shape[0], pad), -np.inf, np.float32)], axis=1)
        i = np.concatenate([i, np.full((i.shape[0], pad), -1, np.int64)], axis=1)
    return s, i
