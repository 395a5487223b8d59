"""Sequence packing: several short passages in one row, so the passage tower stops computing
padding (issue 47; ../shared/reviews/gpu-levers.md §4, "Real-data throughput").

A packed batch holds the passages' real tokens back to back in rows of ``row_len``:

- ``segment_ids`` [R, L]: 1, 2, ... for the passages of a row, 0 for padding. The encoder's
  attention is then block-diagonal (``BertEncoder(..., segment_ids=...)``): a token sees only
  its own passage, so each passage is encoded as if it were alone in a padded row.
- ``position_ids`` [R, L]: restart at 0 for each passage (padding: 0).
- ``starts`` [P]: the flat index ``row * L + column`` of passage p's first token ([CLS]), in
  the original passage order; ``DualEncoder.encode_passage_packed`` pools there ([CLS]) or over
  the segment (mean), so the embeddings come back in passage order, as from the padded batch.

Rows are filled best fit by decreasing length (a passage never straddles two rows; each goes to
the open row it leaves least room in). This module is host-side numpy; it knows nothing of the
model. Length buckets (``inputs/buckets``) are the
other way to cut padding, by trimming whole batches; packing also cuts it inside a batch.
"""

from __future__ import annotations

import dataclasses
import heapq
from typing import Any, Mapping, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class PackedBatch:
    """Packed passages (module docstring). ``mask`` is ``segment_ids > 0`` as int32."""

    ids: np.ndarray
    mask: np.ndarray
    segment_ids: np.ndarray
    position_ids: np.ndarray
    starts: np.ndarray

    @property
    def real_tokens(self) -> int:
        return int(self.mask.sum())

    @property
    def fill(self) -> float:
        """Real tokens / token slots of the packed rows."""
        return self.real_tokens / self.ids.size


def assign_rows(lengths: np.ndarray, row_len: int, max_segments: int = 0
                ) -> list[list[int]]:
    """Passage indices per row: best fit by decreasing length (ties: lower passage index first;
    among rows with the same room, the lowest row). ``max_segments`` > 0 caps the passages per
    row. A passage longer than ``row_len`` or of length 0 raises, naming it.

    Rows are kept by their free room (an integer in 0..row_len), so each passage costs one
    vectorised scan of ``row_len`` flags: a 100,000-passage export shard packs in well under a
    second, where scanning the rows one by one (first fit) grows with passages x rows."""
    lengths = np.asarray(lengths, np.int64)
    bad = np.flatnonzero((lengths > row_len) | (lengths <= 0))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"passage {i} has {int(lengths[i])} tokens; packing needs 1..{row_len} "
                         f"(row_len) per passage")
    rows: list[list[int]] = []
    by_room: list[list[int]] = [[] for _ in range(row_len + 1)]  # heaps of open row indices
    has_room = np.zeros(row_len + 1, bool)
    for i in np.argsort(-lengths, kind="stable"):
        n = int(lengths[i])
        room = n + int(np.argmax(has_room[n:]))
        if has_room[room]:
            r = heapq.heappop(by_room[room])
            has_room[room] = bool(by_room[room])
        else:
            r, room = len(rows), row_len
            rows.append([])
        rows[r].append(int(i))
        left = room - n
        if left > 0 and (not max_segments or len(rows[r]) < max_segments):
            heapq.heappush(by_room[left], r)
            has_room[left] = True
    return rows


def pack(ids: np.ndarray, mask: np.ndarray, row_len: int, *, num_rows: int = 0,
         max_segments: int = 0, pad_id: int = 0) -> PackedBatch:
    """Packs padded passages ``ids``/``mask`` [P, Lp] (right-padded: each row's real tokens
    first, the training format of ``inputs.tokens``) into rows of ``row_len``. ``num_rows`` > 0
    fixes the row count (a static shape for jit: unused rows are padding; too few raises);
    0 uses as many as :func:`assign_rows` needs."""
    ids, mask, lengths = _checked(ids, mask)
    rows = assign_rows(lengths, row_len, max_segments)
    if num_rows and len(rows) > num_rows:
        raise ValueError(f"{len(rows)} rows of {row_len} tokens needed for {len(lengths)} "
                         f"passages, num_rows={num_rows}")
    return _layout(ids, lengths, rows, row_len, num_rows, pad_id)


def _checked(ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ids = np.asarray(ids)
    mask = np.asarray(mask)
    if ids.shape != mask.shape or ids.ndim != 2:
        raise ValueError(f"ids {ids.shape} and mask {mask.shape} must be the same [P, L] shape")
    lengths = mask.sum(axis=1).astype(np.int64)
    right = mask == (np.arange(mask.shape[1])[None] < lengths[:, None])
    if not right.all():
        row = int(np.flatnonzero(~right.all(axis=1))[0])
        raise ValueError(f"passage {row}: mask is not right-padded (real tokens first)")
    return ids, mask, lengths


def layout(ids: np.ndarray, mask: np.ndarray, rows: Sequence[Sequence[int]], row_len: int, *,
           num_rows: int = 0, pad_id: int = 0) -> PackedBatch:
    """The packed arrays of a given assignment ``rows`` (passage indices into ``ids`` per row,
    e.g. a slice of :func:`assign_rows`' answer); ``starts`` has one entry per passage of
    ``ids``, 0 for a passage in no row. ``num_rows`` > 0 pads with empty rows to that count."""
    ids, _, lengths = _checked(ids, mask)
    if num_rows and len(rows) > num_rows:
        raise ValueError(f"{len(rows)} rows given, num_rows={num_rows}")
    return _layout(ids, lengths, rows, row_len, num_rows, pad_id)


def _layout(ids: np.ndarray, lengths: np.ndarray, rows: Sequence[Sequence[int]], row_len: int,
            num_rows: int, pad_id: int) -> PackedBatch:
    r_count = num_rows or len(rows)
    out_ids = np.full((r_count, row_len), pad_id, ids.dtype)
    seg = np.zeros((r_count, row_len), np.int32)
    pos = np.zeros((r_count, row_len), np.int32)
    starts = np.zeros(len(lengths), np.int32)
    for r, members in enumerate(rows):
        col = 0
        for s, i in enumerate(sorted(members), start=1):  # passage order within a row
            n = int(lengths[i])
            if col + n > row_len:
                raise ValueError(f"row {r}: its passages need more than {row_len} tokens")
            out_ids[r, col:col + n] = ids[i, :n]
            seg[r, col:col + n] = s
            pos[r, col:col + n] = np.arange(n)
            starts[i] = r * row_len + col
            col += n
    return PackedBatch(ids=out_ids, mask=(seg > 0).astype(np.int32), segment_ids=seg,
                       position_ids=pos, starts=starts)


def _group_rows(batch: Mapping[str, np.ndarray], group: Sequence[str]
                ) -> tuple[np.ndarray, np.ndarray]:
    """A group's ``<prefix>_ids`` / ``_mask`` as [B, n, L] (an example's rows in group order,
    ``[B, L]`` arrays counting as one row each). Prefixes absent from the batch are skipped
    (e.g. ``cf`` when the method makes no counterfactuals)."""
    ids, masks = [], []
    for prefix in group:
        if f"{prefix}_ids" not in batch:
            continue
        i, m = np.asarray(batch[f"{prefix}_ids"]), np.asarray(batch[f"{prefix}_mask"])
        ids.append(i[:, None] if i.ndim == 2 else i)
        masks.append(m[:, None] if m.ndim == 2 else m)
    if not ids:
        raise ValueError(f"the batch has none of the group {tuple(group)}'s arrays "
                         f"(keys: {sorted(batch)})")
    return np.concatenate(ids, axis=1), np.concatenate(masks, axis=1)


def _shard_slices(batch_size: int, num_shards: int) -> list[slice]:
    if num_shards < 1 or batch_size % num_shards:
        raise ValueError(f"a batch of {batch_size} examples does not split into {num_shards} "
                         f"data shards")
    per = batch_size // num_shards
    return [slice(s * per, (s + 1) * per) for s in range(num_shards)]


def group_key(group: Sequence[str]) -> str:
    """The name of a packed group's arrays: ``packed_<first prefix>_*``."""
    return str(group[0])


def rows_needed(batch: Mapping[str, np.ndarray], groups: Sequence[Sequence[str]], row_len: int,
                num_shards: int) -> dict[str, int]:
    """Per group, the most rows of ``row_len`` (:func:`assign_rows`) any of the ``num_shards`` data shards
    needs for its examples' rows (empty rows take none)."""
    out = {}
    for group in groups:
        _, mask = _group_rows(batch, group)
        lengths = mask.sum(-1)
        need = 0
        for sl in _shard_slices(mask.shape[0], num_shards):
            flat = lengths[sl].reshape(-1)
            need = max(need, len(assign_rows(flat[flat > 0], max(row_len, mask.shape[-1]))))
        out[group_key(group)] = max(need, 1)
    return out


def pack_batch(batch: Mapping[str, np.ndarray], groups: Sequence[Sequence[str]], row_len: int,
               num_shards: int, *, rows: Mapping[str, int] | None = None
               ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """A training batch with each group's ``<prefix>_ids``/``_mask`` arrays (``groups``, e.g.
    ``methods.base.DPR_LENGTH_GROUPS``) replaced by packed rows, per data shard.

    The batch's examples split into ``num_shards`` contiguous blocks (the data shards its
    leading axis is sharded over); each block's rows, in example order and within an example in
    group order (``[pos, hard..., cf]``: the order ``methods.base.embed_passages`` stacks them),
    are packed on their own (:func:`pack`), so a device's rows hold only its own examples. Per
    group ``k`` (:func:`group_key`): ``packed_k_ids`` / ``_mask`` / ``_segment_ids`` /
    ``_position_ids`` [S, R, L] and ``packed_k_starts`` [S, P] (flat index into the shard's
    ``R * L`` tokens). ``L`` is ``max(row_len, the group's padded length)``; ``R`` is
    ``rows[k]`` (the same on every host: a global array's shape) or the most any shard needs
    (:func:`rows_needed`). An empty row (all-zero mask: a missing hard negative or
    counterfactual, masked by its ``*_valid`` flag) takes no tokens; its start points at its
    shard's first token, so its vector is some real passage's and must stay masked, as the
    padded batch's vector of an empty row is meaningless too.

    Returns ``(batch, stats)``: stats ``tokens`` (real), ``slots`` (packed), ``slots_padded``
    (the replaced arrays' size) and ``rows`` per group.
    """
    out = dict(batch)
    rows = dict(rows or {})
    stats: dict[str, Any] = {"tokens": 0, "slots": 0, "slots_padded": 0, "rows": {}}
    for group in groups:
        key = group_key(group)
        ids, mask = _group_rows(batch, group)
        length = max(int(row_len), mask.shape[-1])
        r_count = int(rows.get(key) or rows_needed(batch, [group], row_len, num_shards)[key])
        parts: dict[str, list[np.ndarray]] = {f: [] for f in
                                              ("ids", "mask", "segment_ids", "position_ids", "starts")}
        for sl in _shard_slices(ids.shape[0], num_shards):
            s_ids = ids[sl].reshape(-1, ids.shape[-1])
            s_mask = mask[sl].reshape(-1, mask.shape[-1])
            real = s_mask.sum(-1) > 0
            packed = pack(s_ids[real], s_mask[real], length, num_rows=r_count)
            starts = np.zeros(len(s_ids), np.int32)
            starts[real] = packed.starts
            for f in ("ids", "mask", "segment_ids", "position_ids"):
                parts[f].append(getattr(packed, f))
            parts["starts"].append(starts)
            stats["tokens"] += packed.real_tokens
            stats["slots"] += packed.ids.size
        for f, arrs in parts.items():
            out[f"packed_{key}_{f}"] = np.stack(arrs).astype(np.int32 if f != "ids" else ids.dtype)
        stats["slots_padded"] += ids.size
        stats["rows"][key] = r_count
        for prefix in group:
            out.pop(f"{prefix}_ids", None)
            out.pop(f"{prefix}_mask", None)
    return out, stats
