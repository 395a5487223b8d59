"""Two-hop beam search over a run's passage index (MDR inference, docs/multihop.md).

For each question: the top ``beam_size`` passages for the question (hop 1); for each of them
the hop-2 query ``[CLS] q [SEP] title [SEP] text [SEP]`` (:func:`dense_cf.inputs.tokens.hop2_query_row`)
and its top ``hop2_k`` passages other than the hop-1 passage (hop 2); a chain (p1, p2) scores
s(q, p1) + s(q ⊕ p1, p2) and the best ``top_chains`` chains are kept, ties broken by hop-1 rank,
then hop-2 rank. Ordered chains are distinct: (a, b) and (b, a) may both be kept, as in MDR.

:func:`best_chains` is the pure combination step; :func:`two_hop_search` runs the two searches
through any ``search(vectors, k) -> (scores, rows)`` (a :class:`~dense_cf.index.faiss_index.DenseIndex`)
and a hop-2 query encoder; :class:`Hop2Queries` encodes hop-2 queries of a run over a corpus.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np

from dense_cf.inputs.tokens import encode_texts, hop2_query_row, pad_rows, passage_rows, question_row, special_ids
from dense_cf.progress import Progress

__all__ = ["Chains", "Hop2Queries", "best_chains", "drop_first_hop", "two_hop_search"]

SearchFn = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]


@dataclasses.dataclass
class Chains:
    """Beam-search output for Q questions: ``rows1``/``rows2``/``scores`` [Q, n] (best first;
    row -1 and score -inf pad a question with fewer chains), the hop-1 list ``hop1_rows`` /
    ``hop1_scores`` [Q, beam_size]."""

    rows1: np.ndarray
    rows2: np.ndarray
    scores: np.ndarray
    hop1_rows: np.ndarray
    hop1_scores: np.ndarray


def drop_first_hop(r1: np.ndarray, s2: np.ndarray, r2: np.ndarray, k: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Hop-2 lists [Q, K1, K] without the beam's own hop-1 passage (and without empty rows -1):
    the first ``k`` other passages of each list, padded with row -1 / score -inf."""
    q, k1, k_in = r2.shape
    keep = (r2 != r1[:, :, None]) & (r2 >= 0)
    order = np.argsort(~keep, axis=2, kind="stable")[:, :, :k]  # kept entries first, in rank order
    rows = np.take_along_axis(r2, order, axis=2)
    scores = np.take_along_axis(s2.astype(np.float64), order, axis=2)
    ok = np.take_along_axis(keep, order, axis=2)
    rows = np.where(ok, rows, -1)
    scores = np.where(ok, scores, -np.inf)
    if rows.shape[2] < k:  # fewer results than asked
        pad = k - rows.shape[2]
        rows = np.concatenate([rows, np.full((q, k1, pad), -1, rows.dtype)], axis=2)
        scores = np.concatenate([scores, np.full((q, k1, pad), -np.inf)], axis=2)
    return scores, rows


def best_chains(s1: np.ndarray, r1: np.ndarray, s2: np.ndarray, r2: np.ndarray, n: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``n`` best chains per question from hop-1 lists ``s1``/``r1`` [Q, K1] and hop-2 lists
    ``s2``/``r2`` [Q, K1, K2] (one per hop-1 passage).

    A chain (r1[q, a], r2[q, a, b]) scores s1[q, a] + s2[q, a, b]; chains with an empty row (-1)
    or whose second passage repeats the first are excluded. Returns ``(rows1, rows2, scores)``
    [Q, n], best first, ties broken by (a, b); rows -1 and score -inf pad.
    """
    q, k1 = r1.shape
    k2 = r2.shape[2]
    if r2.shape[:2] != (q, k1) or s2.shape != r2.shape or s1.shape != r1.shape:
        raise ValueError(f"hop-1 lists {r1.shape} / {s1.shape} and hop-2 lists {r2.shape} / "
                         f"{s2.shape} do not match ([Q, K1] and [Q, K1, K2])")
    total = s1.astype(np.float64)[:, :, None] + s2.astype(np.float64)
    bad = (r1[:, :, None] < 0) | (r2 < 0) | (r2 == r1[:, :, None])
    flat = np.where(bad, -np.inf, total).reshape(q, k1 * k2)
    # lexsort: last key first; stable order on (a, b) = flat index for equal scores.
    order = np.argsort(-flat, axis=1, kind="stable")[:, :n]
    scores = np.take_along_axis(flat, order, axis=1)
    a, b = np.divmod(order, k2)
    rows1 = np.take_along_axis(r1, a, axis=1)
    rows2 = np.take_along_axis(r2.reshape(q, k1 * k2), order, axis=1)
    empty = ~np.isfinite(scores)
    rows1, rows2 = np.where(empty, -1, rows1), np.where(empty, -1, rows2)
    if order.shape[1] < n:
        pad = n - order.shape[1]
        rows1 = np.concatenate([rows1, np.full((q, pad), -1, rows1.dtype)], axis=1)
        rows2 = np.concatenate([rows2, np.full((q, pad), -1, rows2.dtype)], axis=1)
        scores = np.concatenate([scores, np.full((q, pad), -np.inf)], axis=1)
    del b
    return rows1, rows2, scores


def two_hop_search(search: SearchFn, q_emb: np.ndarray,
                   hop2_encode: Callable[[np.ndarray, np.ndarray], np.ndarray], *,
                   beam_size: int, hop2_k: int, top_chains: int, block: int = 256,
                   progress: bool = True) -> Chains:
    """MDR beam search (module docstring) for the questions of ``q_emb`` [Q, D].

    ``hop2_encode(question_indices, passage_rows)`` returns the hop-2 query vectors of those
    (question, hop-1 passage) pairs. Questions go ``block`` at a time (``block * beam_size``
    hop-2 queries encoded and searched at once).
    """
    n_q = len(q_emb)
    parts = []
    prog = Progress("two-hop search", n_q, unit="questions", enabled=progress)
    for lo in range(0, n_q, block):
        qs = np.arange(lo, min(lo + block, n_q))
        s1, r1 = search(np.asarray(q_emb[qs], np.float32), beam_size)
        s1, r1 = np.asarray(s1, np.float64), np.asarray(r1, np.int64)
        s1 = np.where(r1 >= 0, s1, -np.inf)
        q_idx = np.repeat(qs, r1.shape[1])
        flat_rows = r1.reshape(-1)
        ok = flat_rows >= 0
        v = hop2_encode(q_idx[ok], flat_rows[ok])
        s2 = np.full((len(flat_rows), hop2_k + 1), -np.inf)
        r2 = np.full((len(flat_rows), hop2_k + 1), -1, np.int64)
        if ok.any():
            ss, rr = search(np.asarray(v, np.float32), hop2_k + 1)  # +1: the beam's own p1
            s2[ok, :ss.shape[1]], r2[ok, :rr.shape[1]] = ss, rr
        s2, r2 = drop_first_hop(r1, s2.reshape(len(qs), -1, hop2_k + 1),
                                r2.reshape(len(qs), -1, hop2_k + 1), hop2_k)
        rows1, rows2, scores = best_chains(s1, r1, s2, r2, top_chains)
        parts.append((rows1, rows2, scores, r1, s1))
        prog.update(len(qs))
    prog.done()
    if not parts:
        z = np.zeros((0, top_chains), np.int64)
        return Chains(z, z, z.astype(np.float64), np.zeros((0, beam_size), np.int64),
                      np.zeros((0, beam_size)))
    cat = [np.concatenate(x) for x in zip(*parts)]
    return Chains(rows1=cat[0], rows2=cat[1], scores=cat[2], hop1_rows=cat[3],
                  hop1_scores=cat[4])


class Hop2Queries:
    """Hop-2 query vectors of a run: ``(question indices, corpus rows) -> [n, D]``.

    Question rows are tokenised once; passage rows on first use and cached (a passage in many
    beams is tokenised once). ``encode(ids, mask)`` is the run's question encoder (e.g.
    :meth:`dense_cf.retrieval.export.Encoder.questions`).
    """

    def __init__(self, tokenizer, questions: Sequence[str], titles: Sequence[str],
                 texts: Sequence[str], encode: Callable[[np.ndarray, np.ndarray], np.ndarray], *,
                 max_q_len: int, max_len: int, pad_id: int = 0):
        self.tokenizer, self.titles, self.texts, self.encode = tokenizer, titles, texts, encode
        self.max_len, self.pad_id = max_len, pad_id
        cls_id, self.sep_id = special_ids(tokenizer)
        self.q_rows = [question_row(e.ids, max_q_len, cls_id, self.sep_id)
                       for e in encode_texts(tokenizer, list(questions))]
        self._passages: dict[int, list[int]] = {}

    def rows(self, q_idx: np.ndarray, p_rows: np.ndarray) -> list[list[int]]:
        """Unpadded hop-2 query rows of the pairs."""
        new = sorted({int(r) for r in p_rows} - set(self._passages))
        if new:
            bodies, _, _, _ = passage_rows(self.tokenizer, [self.titles[r] for r in new],
                                           [self.texts[r] for r in new], keep=self.max_len,
                                           sentences=False)
            self._passages.update(zip(new, bodies))
        return [hop2_query_row(self.q_rows[int(q)], self._passages[int(r)], self.max_len,
                               self.sep_id) for q, r in zip(q_idx, p_rows)]

    def __call__(self, q_idx: np.ndarray, p_rows: np.ndarray) -> np.ndarray:
        ids, mask = pad_rows(self.rows(q_idx, p_rows), self.max_len, self.pad_id, None)
        return self.encode(ids, mask)
