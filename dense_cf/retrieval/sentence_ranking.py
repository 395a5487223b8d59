"""DCSR passage ranking from retrieved sentences (docs/method.md §4, DCSR §3.3 "Score Normalization").

For one question the retrieved sentence scores s_1..s_K (top 100·k̄ sentences) are turned into
probabilities by a softmax over those K scores; a passage P whose retrieved sentences have
probabilities p_1..p_m gets

    HasAns(P) = 1 − Π_i (1 − p_i)          (DCSR eq. 2)

Passages are ranked by HasAns (ties: the passage whose best sentence ranks higher comes first)
and the top k are kept. Pure numpy; float64 internally.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["softmax", "has_ans", "rank_passages", "num_sentences_to_retrieve"]


def softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis in float64 (max-shifted, so large dot products are safe)."""
    x = np.asarray(scores, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def has_ans(probs: np.ndarray) -> float:
    """1 − Π(1 − p_i), computed as −expm1(Σ log1p(−p_i)) (exact for tiny p, 1.0 for p_i = 1)."""
    p = np.asarray(probs, dtype=np.float64)
    if p.size == 0:
        return 0.0
    with np.errstate(divide="ignore"):
        return float(-np.expm1(np.log1p(-np.clip(p, 0.0, 1.0)).sum()))


def num_sentences_to_retrieve(k: int, mean_sentences_per_passage: float, override: int = 0) -> int:
    """The paper's 100·k̄ for k = 100: ``ceil(k · k̄)`` (at least k), or ``override`` if > 0."""
    if override > 0:
        return int(override)
    return max(int(k), int(math.ceil(k * float(mean_sentences_per_passage))))


def rank_passages(scores: np.ndarray, sentence_rows: np.ndarray, sentence_passage: np.ndarray,
                  k: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per question: passage rows ranked by HasAns and their HasAns values (top ``k``).

    Args:
      scores: float [Q, K] retrieved sentence scores (best first, as FAISS returns them).
      sentence_rows: int [Q, K] sentence rows of the index; -1 marks an empty slot (ignored).
      sentence_passage: int [N] passage row of every sentence row.
      k: passages to keep.
    Returns:
      (passage rows, HasAns) as two lists of Q arrays of length <= k.
    """
    scores = np.asarray(scores)
    rows = np.asarray(sentence_rows)
    if scores.shape != rows.shape or scores.ndim != 2:
        raise ValueError(f"scores {scores.shape} and sentence rows {rows.shape} must be [Q, K]")
    sentence_passage = np.asarray(sentence_passage)
    out_rows, out_vals = [], []
    for s_row, r_row in zip(scores, rows):
        ok = r_row >= 0
        if not ok.any():
            out_rows.append(np.zeros(0, np.int64))
            out_vals.append(np.zeros(0, np.float64))
            continue
        s, r = s_row[ok], r_row[ok]
        # Best-first order by score (stable), so "first occurrence" = best sentence rank.
        order = np.argsort(-np.asarray(s, np.float64), kind="stable")
        s, r = s[order], r[order]
        p = softmax(s)
        pid = sentence_passage[r]
        uniq, first, inv = np.unique(pid, return_index=True, return_inverse=True)
        with np.errstate(divide="ignore"):
            log_miss = np.zeros(len(uniq))
            np.add.at(log_miss, inv, np.log1p(-np.clip(p, 0.0, 1.0)))
        val = -np.expm1(log_miss)
        rank = np.lexsort((first, -val))[:k]  # by HasAns desc, then best sentence rank
        out_rows.append(uniq[rank].astype(np.int64))
        out_vals.append(val[rank])
    return out_rows, out_vals
