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

Rows are filled first-fit by decreasing length (a passage never straddles two rows). This module
is host-side numpy; it knows nothing of the model. Length buckets (``inputs/buckets``) are the
other way to cut padding, by trimming whole batches; packing also cuts it inside a batch.
"""

from __future__ import annotations

import dataclasses

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
    """Passage indices per row: first fit by decreasing length (ties: lower index first).
    ``max_segments`` > 0 caps the passages per row. A passage longer than ``row_len`` or of
    length 0 raises, naming it."""
    lengths = np.asarray(lengths, np.int64)
    bad = np.flatnonzero((lengths > row_len) | (lengths <= 0))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"passage {i} has {int(lengths[i])} tokens; packing needs 1..{row_len} "
                         f"(row_len) per passage")
    rows: list[list[int]] = []
    room: list[int] = []
    for i in np.argsort(-lengths, kind="stable"):
        n = int(lengths[i])
        for r, free in enumerate(room):
            if free >= n and (not max_segments or len(rows[r]) < max_segments):
                rows[r].append(int(i))
                room[r] -= n
                break
        else:
            rows.append([int(i)])
            room.append(row_len - n)
    return rows


def pack(ids: np.ndarray, mask: np.ndarray, row_len: int, *, num_rows: int = 0,
         max_segments: int = 0, pad_id: int = 0) -> PackedBatch:
    """Packs padded passages ``ids``/``mask`` [P, Lp] (right-padded: each row's real tokens
    first, the training format of ``inputs.tokens``) into rows of ``row_len``. ``num_rows`` > 0
    fixes the row count (a static shape for jit: unused rows are padding; too few raises);
    0 uses as many as first fit needs."""
    ids = np.asarray(ids)
    mask = np.asarray(mask)
    if ids.shape != mask.shape or ids.ndim != 2:
        raise ValueError(f"ids {ids.shape} and mask {mask.shape} must be the same [P, L] shape")
    lengths = mask.sum(axis=1).astype(np.int64)
    if not np.array_equal(mask, (np.arange(mask.shape[1])[None] < lengths[:, None]).astype(mask.dtype)):
        row = int(np.flatnonzero(~np.all(mask == (np.arange(mask.shape[1])[None]
                                                  < lengths[:, None]), axis=1))[0])
        raise ValueError(f"passage {row}: mask is not right-padded (real tokens first)")
    rows = assign_rows(lengths, row_len, max_segments)
    if num_rows and len(rows) > num_rows:
        raise ValueError(f"{len(rows)} rows of {row_len} tokens needed for {len(lengths)} "
                         f"passages, num_rows={num_rows}")
    r_count = num_rows or len(rows)
    out_ids = np.full((r_count, row_len), pad_id, ids.dtype)
    seg = np.zeros((r_count, row_len), np.int32)
    pos = np.zeros((r_count, row_len), np.int32)
    starts = np.zeros(len(lengths), np.int32)
    for r, members in enumerate(rows):
        col = 0
        for s, i in enumerate(sorted(members), start=1):  # passage order within a row
            n = int(lengths[i])
            out_ids[r, col:col + n] = ids[i, :n]
            seg[r, col:col + n] = s
            pos[r, col:col + n] = np.arange(n)
            starts[i] = r * row_len + col
            col += n
    return PackedBatch(ids=out_ids, mask=(seg > 0).astype(np.int32), segment_ids=seg,
                       position_ids=pos, starts=starts)
