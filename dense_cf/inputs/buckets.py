"""Length buckets: pad rows to the smallest of a few lengths that fits, not to ``max_len``.

Padding carries no information (attention masks it out and mean pooling weighs it 0,
``models.bert`` / ``models.dual_encoder.pool``) but costs full compute: psgs_w100 passages are
~140 word pieces against DPR's 256, the real-length Wikipedia corpus (docs/scale.md) 91. Rows
are therefore encoded at one of a few *bucket* lengths, each a fixed shape that compiles once:

- export / question encoding (:func:`plan_batches`): rows are sorted by length, cut into
  batches of the encoder's batch size, and each batch is padded to the smallest bucket that
  holds its longest row; the caller scatters the vectors back to the original order;
- training (:func:`trim_batch`): every token array of a batch is cut to the smallest bucket
  that holds the batch's longest row (per group of arrays that share a length).

Both are pure functions of the rows, so results equal the unbucketed ones within float
tolerance (reduction order differs) and resume is unchanged. Configured by
``eval.length_buckets`` and ``data.length_buckets`` (configs/base.py); docs/scale.md,
"Length-aware encoding".
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

__all__ = ["array_key", "bucket_lengths", "fit_bucket", "plan_batches", "row_lengths",
           "group_needs", "padding_removed", "trim_batch"]


def array_key(prefix: str, name: str) -> str:
    """The batch key of a group's token array: ``<prefix>_<name>`` (``q_ids``), or ``name``
    alone for the prefix ``""`` (``ids``)."""
    return f"{prefix}_{name}" if prefix else name


def bucket_lengths(boundaries: Iterable[int], max_len: int) -> tuple[int, ...]:
    """The sorted bucket lengths for rows padded to ``max_len``: the boundaries below it, then
    ``max_len`` itself (so every row fits). Empty ``boundaries``: ``(max_len,)``, no bucketing."""
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    bs = sorted({int(b) for b in boundaries})
    if bs and bs[0] < 1:
        raise ValueError(f"length buckets must be >= 1, got {tuple(boundaries)}")
    return tuple(b for b in bs if b < max_len) + (int(max_len),)


def fit_bucket(need: int, buckets: Sequence[int]) -> int:
    """The smallest bucket >= ``need`` (``buckets`` sorted, as :func:`bucket_lengths` gives)."""
    i = int(np.searchsorted(np.asarray(buckets), need, side="left"))
    if i >= len(buckets):
        raise ValueError(f"a row of {need} tokens exceeds the largest bucket {buckets[-1]}")
    return int(buckets[i])


def row_lengths(mask: np.ndarray) -> np.ndarray:
    """int64 [...]: per row (last axis) the index of its last unmasked token + 1 (0 if none).

    The last position rather than the mask's sum, so a row is never cut inside its tokens.
    """
    m = np.asarray(mask) > 0
    last = m.shape[-1] - np.argmax(m[..., ::-1], axis=-1)
    return np.where(m.any(axis=-1), last, 0).astype(np.int64)


def plan_batches(lengths: np.ndarray, buckets: Sequence[int], batch_size: int
                 ) -> list[tuple[np.ndarray, int]]:
    """``[(row indices, padded length)]`` covering every row once, in encoding order.

    With one bucket: consecutive batches in row order (the unbucketed encoder's). Otherwise rows
    are sorted by length, longest first (stable), cut into batches of ``batch_size``, and each
    batch takes the smallest bucket that holds its longest row: a batch straddling a boundary
    takes the upper bucket, and the one short batch (padded with empty rows by the caller) holds
    the shortest rows.
    """
    lengths = np.asarray(lengths, np.int64)
    n = len(lengths)
    if len(buckets) == 1:
        order = np.arange(n)
    else:
        order = np.argsort(-lengths, kind="stable")
    out = []
    for lo in range(0, n, batch_size):
        rows = order[lo:lo + batch_size]
        out.append((rows, fit_bucket(int(lengths[rows].max()), buckets)))
    return out


def padding_removed(tokens: float, tokens_at_max: float) -> float:
    """Share of the tokens at full padding that were not computed: ``1 - tokens / at_max``."""
    return 1.0 - tokens / tokens_at_max if tokens_at_max else 0.0


def trim_batch(batch: Mapping[str, np.ndarray], groups: Sequence[Sequence[str]],
               boundaries: Iterable[int], need: Mapping[str, int] | None = None
               ) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Cuts the token arrays of a training batch to bucket lengths (module docstring).

    ``groups``: prefixes whose ``<prefix>_ids`` / ``<prefix>_mask`` (and ``<prefix>_type_ids``
    when present) share one padded length, e.g. ``(("q",), ("pos", "hard", "cf"))`` (the DPR
    batch; the encoder stacks pos, hard and cf into one call); the prefix ``""`` names the plain
    ``ids`` / ``mask`` / ``type_ids`` (the extractive reader's [b, P, L] rows, :func:`array_key`).
    The cut is along the last axis, whatever the leading ones. Prefixes absent from the batch
    are skipped. ``need`` (group index as str -> tokens) overrides the batch's own longest row:
    on several hosts the caller passes the maximum over all hosts so every host cuts alike.

    Returns ``(batch, {"tokens": computed, "tokens_at_max": at full padding})`` counting rows of
    every ``_ids`` array of the groups (padding share: :func:`padding_removed`).
    """
    out = dict(batch)
    tokens = at_max = 0.0
    for g, length in group_needs(batch, groups).items():
        full, longest = length
        want = (need or {}).get(g, longest)
        cut = fit_bucket(max(int(want), 1), bucket_lengths(boundaries, full))
        for prefix in groups[int(g)]:
            for name in ("ids", "mask", "type_ids"):
                key = array_key(prefix, name)
                if key in out:
                    out[key] = out[key][..., :cut]
            ids = out.get(array_key(prefix, "ids"))
            if ids is not None:
                rows = ids.size / max(cut, 1)
                tokens += rows * cut
                at_max += rows * full
    return out, {"tokens": tokens, "tokens_at_max": at_max}


def group_needs(batch: Mapping[str, np.ndarray], groups: Sequence[Sequence[str]]
                ) -> dict[str, tuple[int, int]]:
    """Per group present in ``batch`` (key: its index as str): (padded length, longest row)."""
    out = {}
    for g, prefixes in enumerate(groups):
        keys = [array_key(p, "mask") for p in prefixes]
        masks = [np.asarray(batch[k]) for k in keys if k in batch]
        if not masks:
            continue
        full = {m.shape[-1] for m in masks}
        if len(full) != 1:
            raise ValueError(f"length group {tuple(prefixes)} has arrays of different lengths "
                             f"{sorted(full)}: they must share one padded length")
        longest = max((int(row_lengths(m).max()) if m.size else 0) for m in masks)
        out[str(g)] = (full.pop(), longest)
    return out
