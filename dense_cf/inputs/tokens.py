"""The one model input format (docs/method.md §8), shared by training, export and evaluation.

- question: ``[CLS] question [SEP]`` (DCSR may put ``<sent>`` after ``[CLS]``);
- passage: ``[CLS] title [SEP] text [SEP]``; a passage whose title is empty is
  ``[CLS] text [SEP]``, as DPR's tensorizer and HF ``tokenizer(text)`` encode it;
- multi-hop (MDR) hop-2 query: ``[CLS] question [SEP] title [SEP] text [SEP]``, the question
  row as above (at most ``max_q_len``) followed by the first-hop passage without its ``[CLS]``,
  the whole truncated to the hop-2 length keeping the final ``[SEP]`` (:func:`hop2_query_row`).
- reader row (docs/readers.md): ``[CLS] question [SEP] title [SEP] text [SEP]``, token type 0
  on ``[CLS] question [SEP]`` and 1 after it; a passage whose title is empty is
  ``[CLS] question [SEP] text [SEP]``;
- truncation keeps the final ``[SEP]``; padding is ``[PAD]`` with mask 0.

The training cache (``inputs.dpr.preprocess``), DCSR's marked passages, the export encoder, the
reader's training batches and its inference all build rows here, so their token ids agree (a
test pins them). TF-free: the export and the accelerator benchmark import this module without
TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Sequence

import numpy as np

from dense_cf import files
from dense_cf.inputs.lazy import tf
from dense_cf.text.answers import find_answer_spans
from dense_cf.text.sentences import split_sentences

__all__ = ["Ragged", "encode_texts", "hop2_query_row", "load_tables", "pad_reader_rows", "pad_rows",
           "passage_head", "save_tables",
           "passage_rows", "question_row", "reader_passage", "reader_row", "token_answer_flags",
           "insert_markers", "marker_valid",
           "passage_table", "tokenize_marked_passages", "token_sentence_ids", "tokenize_passages",
           "tokenize_hop2_queries", "tokenize_questions"]


@dataclasses.dataclass
class Ragged:
    """Host-side ragged int array: ``values`` split by ``row_splits`` (len = rows + 1)."""

    values: np.ndarray
    row_splits: np.ndarray

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[int]], dtype=np.int32) -> "Ragged":
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        splits = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=splits[1:])
        values = np.fromiter((v for r in rows for v in r), dtype=dtype, count=int(splits[-1]))
        return cls(values, splits)

    @classmethod
    def from_arrays(cls, rows: Sequence[np.ndarray], dtype=np.int32) -> "Ragged":
        """Like :meth:`from_rows` for rows that are numpy arrays (one concatenation)."""
        splits = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in rows], out=splits[1:])
        values = np.concatenate(rows).astype(dtype, copy=False) if rows else np.zeros(0, dtype)
        return cls(values, splits)

    def __len__(self) -> int:
        return len(self.row_splits) - 1

    def row(self, i: int) -> np.ndarray:
        return self.values[self.row_splits[i]:self.row_splits[i + 1]]

    def to_tf(self):
        """A ``tf.RaggedTensor`` (TensorFlow is imported here: the rest is TF-free)."""
        return tf.RaggedTensor.from_row_splits(self.values, self.row_splits, validate=False)


def save_tables(path: str, *, ragged: dict[str, Ragged], dense: dict[str, np.ndarray],
                stats: dict) -> None:
    """One ``.npz`` cache: each :class:`Ragged` as ``<name>_values``/``<name>_splits``, dense
    arrays by name, ``stats`` as JSON; then ``<path>.sha256`` (checked by :func:`load_tables`).
    Written atomically under a unique temp name, since hosts sharing a file system may write
    the same cache at once."""
    arrays = {}
    for name, r in ragged.items():
        arrays[f"{name}_values"], arrays[f"{name}_splits"] = r.values, r.row_splits
    with files.atomic_open(path, "wb") as f:
        np.savez(f, stats=np.asarray(json.dumps(stats)), **dense, **arrays)
    # Equal tables are equal bytes (np.savez stamps no clock into its members), so when two
    # hosts write one cache at once, whichever checksum lands matches whichever file did.
    files.write_sidecar(path)


def load_tables(path: str, ragged: Sequence[str], dense: Sequence[str]
                ) -> tuple[dict[str, Ragged], dict[str, np.ndarray], dict]:
    """What :func:`save_tables` wrote: (ragged tables, dense arrays, stats), after checking
    ``<path>.sha256`` (a cache written before checksums existed is read unchecked)."""
    files.verify_sidecar(path, "delete it and run the same command again (the data file is "
                               "tokenised again into a new cache)", editable=False)
    with np.load(path) as z:
        return ({n: Ragged(z[f"{n}_values"], z[f"{n}_splits"]) for n in ragged},
                {n: z[n] for n in dense}, json.loads(str(z["stats"])))


def _overlap_index(token_offsets: np.ndarray, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """For each token (start, end), the index of the first span it overlaps, or -1."""
    out = np.full(len(token_offsets), -1, dtype=np.int32)
    if len(spans) == 0 or len(token_offsets) == 0:
        return out
    starts = np.asarray([s for s, _ in spans])
    ends = np.asarray([e for _, e in spans])
    t_start = token_offsets[:, 0][:, None]
    t_end = token_offsets[:, 1][:, None]
    # Zero-width tokens (offsets equal) still belong to the span they sit in.
    hit = (t_start < ends[None, :]) & (np.maximum(t_end, t_start + 1) > starts[None, :])
    any_hit = hit.any(axis=1)
    out[any_hit] = hit[any_hit].argmax(axis=1)
    return out


def token_sentence_ids(token_offsets: np.ndarray, sentence_spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """Sentence index of every token (char offsets into the passage text); -1 outside sentences."""
    return _overlap_index(np.asarray(token_offsets, dtype=np.int64).reshape(-1, 2), sentence_spans)


def token_answer_flags(text: str, token_offsets: np.ndarray, answers: Sequence[str],
                       mode: str = "string") -> np.ndarray:
    """1 for every token overlapping a DPR-normalised answer match in ``text`` (docs/method.md §2, §6)."""
    spans = find_answer_spans(text, list(answers), mode=mode)
    idx = _overlap_index(np.asarray(token_offsets, dtype=np.int64).reshape(-1, 2), spans)
    return (idx >= 0).astype(np.int8)


def special_ids(tokenizer) -> tuple[int, int]:
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    if cls_id is None or sep_id is None:
        raise ValueError("tokenizer has no [CLS]/[SEP] tokens; a BERT WordPiece vocabulary "
                         "is required")
    return cls_id, sep_id


def encode_texts(tokenizer, texts: Sequence[str]):
    """Word pieces with offsets, no special tokens, no padding or truncation."""
    return tokenizer.encode_batch(list(texts), add_special_tokens=False) if len(texts) else []


def passage_head(title: str, title_ids: Sequence[int], cls_id: int, sep_id: int) -> list[int]:
    """``[CLS] title [SEP]``, or ``[CLS]`` alone when the title is empty (DPR's form)."""
    return [cls_id, *title_ids, sep_id] if title else [cls_id]


def passage_rows(tokenizer, titles: Sequence[str], texts: Sequence[str], *, keep: int,
                 sentences: bool = True
                 ) -> tuple[list[list[int]], list[list[int]], list[int], list]:
    """Unpadded passage rows without the final [SEP]: ``head + text`` word pieces truncated to
    ``keep``; per token its sentence id (-1 on the head; empty lists when not ``sentences``);
    the head lengths; the text encodings (for answer offsets)."""
    cls_id, sep_id = special_ids(tokenizer)
    t_enc = encode_texts(tokenizer, titles)
    x_enc = encode_texts(tokenizer, texts)
    bodies, sents, heads = [], [], []
    for title, text, t, x in zip(titles, texts, t_enc, x_enc):
        head = passage_head(title, t.ids, cls_id, sep_id)
        heads.append(len(head))
        bodies.append((head + x.ids)[:keep])
        if sentences:
            # Sentence splitting (pysbd) costs ~10x the word-piece tokenisation: only the
            # callers that use sentence ids (training inputs, DCSR markers) pay for it.
            offsets = np.asarray(x.offsets, dtype=np.int64).reshape(-1, 2)
            sid = token_sentence_ids(offsets, split_sentences(text))
            sents.append(([-1] * len(head) + sid.tolist())[:keep])
        else:
            sents.append([])
    return bodies, sents, heads, x_enc


def question_row(ids: Sequence[int], max_len: int, cls_id: int, sep_id: int,
                 prefix_id: int | None = None) -> list[int]:
    head = [cls_id] if prefix_id is None else [cls_id, prefix_id]
    return head + list(ids[:max_len - 1 - len(head)]) + [sep_id]


def hop2_query_row(q_row: Sequence[int], passage_row: Sequence[int], max_len: int,
                   sep_id: int) -> list[int]:
    """MDR's hop-2 query ``[CLS] question [SEP] title [SEP] text [SEP]`` (docs/multihop.md).

    ``q_row`` is a question row (:func:`question_row`: ``[CLS] q [SEP]``), ``passage_row`` a
    passage row of :func:`passage_rows` (``[CLS] title [SEP] text``, no final ``[SEP]``); the
    passage follows the question without its ``[CLS]``, the whole cut to ``max_len - 1``
    tokens plus a final ``[SEP]``. The training pipeline builds the same row inside tf.data.
    """
    if max_len <= len(q_row):
        raise ValueError(f"hop-2 length {max_len} leaves no room for a passage after a "
                         f"{len(q_row)}-token question row")
    return (list(q_row) + list(passage_row[1:]))[:max_len - 1] + [sep_id]


def tokenize_hop2_queries(tokenizer, questions: Sequence[str], titles: Sequence[str],
                          texts: Sequence[str], *, max_q_len: int, max_len: int,
                          pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Padded hop-2 queries (:func:`hop2_query_row`) of (question, first-hop passage) pairs."""
    cls_id, sep_id = special_ids(tokenizer)
    q_rows = [question_row(e.ids, max_q_len, cls_id, sep_id)
              for e in encode_texts(tokenizer, questions)]
    bodies, _, _, _ = passage_rows(tokenizer, titles, texts, keep=max_len, sentences=False)
    rows = [hop2_query_row(q, b, max_len, sep_id) for q, b in zip(q_rows, bodies)]
    return pad_rows(rows, max_len, pad_id, None)


def pad_rows(rows: Sequence[Sequence[int]], max_len: int, pad_id: int,
             sep_id: int | None) -> tuple[np.ndarray, np.ndarray]:
    """int32 ``ids``/``mask`` [n, max_len]: each row truncated (keeping a final ``sep_id`` when
    given) and padded, as the training pipeline does inside tf.data."""
    ids = np.full((len(rows), max_len), pad_id, np.int32)
    mask = np.zeros((len(rows), max_len), np.int32)
    for i, r in enumerate(rows):
        r = list(r[:max_len - 1]) + [sep_id] if sep_id is not None else list(r[:max_len])
        ids[i, :len(r)] = r
        mask[i, :len(r)] = 1
    return ids, mask


def tokenize_passages(tokenizer, titles: Sequence[str], texts: Sequence[str], max_len: int,
                      pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Padded passage inputs (module docstring), the training format."""
    _, sep_id = special_ids(tokenizer)
    bodies, _, _, _ = passage_rows(tokenizer, titles, texts, keep=max_len, sentences=False)
    return pad_rows(bodies, max_len, pad_id, sep_id)


def tokenize_questions(tokenizer, questions: Sequence[str], max_len: int, pad_id: int = 0,
                       prefix_id: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Padded ``[CLS] question [SEP]`` inputs; ``prefix_id`` (DCSR's ``<sent>``) after [CLS]."""
    cls_id, sep_id = special_ids(tokenizer)
    rows = [question_row(e.ids, max_len, cls_id, sep_id, prefix_id)
            for e in encode_texts(tokenizer, questions)]
    return pad_rows(rows, max_len, pad_id, None)


# --------------------------------------------------------------------------- reader rows


def reader_passage(title: str, title_ids: Sequence[int], text_ids: Sequence[int], sep_id: int
                   ) -> tuple[list[int], int]:
    """``title [SEP] text`` word pieces (``text`` alone when the title is empty) and the index
    where the text starts: the part of a reader row after the question."""
    head = [*title_ids, sep_id] if title else []
    return head + list(text_ids), len(head)


def reader_row(q_row: Sequence[int], passage: Sequence[int], text_start: int, max_len: int,
               sep_id: int) -> tuple[list[int], int, int]:
    """``[CLS] question [SEP] title [SEP] text [SEP]`` (``q_row`` from :func:`question_row`,
    ``passage``/``text_start`` from :func:`reader_passage`), cut to ``max_len`` keeping the final
    ``[SEP]``. Returns ``(row, lo, hi)``: the passage text occupies positions ``[lo, hi)``
    (empty when the question and title fill the row)."""
    body = (list(q_row) + list(passage))[:max_len - 1]
    lo = min(len(q_row) + text_start, len(body))
    return body + [sep_id], lo, len(body)


def pad_reader_rows(rows: Sequence[Sequence[int]], q_lens: Sequence[int], length: int,
                    pad_id: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """int32 ``ids``, ``mask``, ``type_ids`` [n, length] of :func:`reader_row` rows: type 0 on
    the first ``q_lens[i]`` tokens (``[CLS] question [SEP]``), 1 on the rest, 0 on padding."""
    n = len(rows)
    ids = np.full((n, length), pad_id, np.int32)
    mask = np.zeros((n, length), np.int32)
    types = np.zeros((n, length), np.int32)
    for i, (r, q) in enumerate(zip(rows, q_lens)):
        if len(r) > length:
            raise ValueError(f"reader row {i} has {len(r)} tokens, more than {length}")
        ids[i, :len(r)] = r
        mask[i, :len(r)] = 1
        types[i, q:len(r)] = 1
    return ids, mask, types


# --------------------------------------------------------------------------- DCSR markers


def marker_valid(positions, max_p_len: int):
    """A marker survives truncation to ``max_p_len`` (incl. the final [SEP]) together with at
    least the first word piece of its sentence."""
    return positions <= max_p_len - 3


def insert_markers(body: Ragged, sent: Ragged, sent_id: int, *, title: bool = True
                   ) -> tuple[Ragged, Ragged, Ragged]:
    """Inserts ``sent_id`` before the first token of every sentence of every passage.

    ``body``/``sent`` are the DPR passage table (``[CLS] title [SEP] text`` word pieces and
    their sentence ids, -1 on the head). Returns ``(marked body, marker positions, marker
    sentence ids)``, all ragged by passage; positions are indices into the marked row. With
    ``title=False`` the head is reduced to ``[CLS]``.
    """
    v = np.asarray(body.values)
    s = np.asarray(sent.values)
    splits = np.asarray(body.row_splits, dtype=np.int64)
    if len(v) != len(s) or not np.array_equal(splits, np.asarray(sent.row_splits)):
        raise ValueError("body and sentence-id tables are not aligned")
    n_rows = len(splits) - 1
    lengths = np.diff(splits)
    row = np.repeat(np.arange(n_rows, dtype=np.int64), lengths)
    starts = np.zeros(len(v), bool)
    starts[splits[:-1][lengths > 0]] = True
    if not title:
        keep = (s >= 0) | starts  # [CLS] (first token) + text tokens
        v, s, row, starts = v[keep], s[keep], row[keep], starts[keep]
        lengths = np.bincount(row, minlength=n_rows).astype(np.int64)
        splits = np.concatenate([[0], np.cumsum(lengths)])
    prev = np.empty_like(s)
    if len(s):
        prev[0] = -1
        prev[1:] = s[:-1]
    prev[starts] = -1
    flag = (s >= 0) & (s != prev)
    counts = 1 + flag.astype(np.int64)
    out_end = np.cumsum(counts)
    first = out_end - counts                      # output index of each token's first copy
    values = np.repeat(v, counts).astype(np.int32)
    values[first[flag]] = sent_id
    cum = np.concatenate([[0], out_end])
    new_splits = cum[splits]
    m_row = row[flag]
    m_pos = (first[flag] - new_splits[m_row]).astype(np.int32)
    m_splits = np.concatenate([[0], np.cumsum(np.bincount(m_row, minlength=n_rows))])
    return (Ragged(values, new_splits), Ragged(m_pos, m_splits),
            Ragged(s[flag].astype(np.int32), m_splits.copy()))


def passage_table(tokenizer, titles: Sequence[str], texts: Sequence[str], *, keep: int
                  ) -> tuple[Ragged, Ragged]:
    """Passage rows + sentence ids as the training cache builds its passage table."""
    bodies, sents, _, _ = passage_rows(tokenizer, titles, texts, keep=keep)
    return Ragged.from_rows(bodies), Ragged.from_rows(sents)


def tokenize_marked_passages(tokenizer, titles: Sequence[str], texts: Sequence[str], *,
                              max_len: int, max_sents: int, sent_token: str, title: bool = True,
                              pad_id: int = 0) -> dict[str, Any]:
    """Encoder inputs of marked passages and their sentence (marker) positions.

    Returns ``ids``/``mask`` int32 [n, max_len], ``positions`` int32 [n, max_sents] and
    ``valid`` bool [n, max_sents] (markers inside the window, at most ``max_sents`` per
    passage), plus ``dropped`` = valid sentences beyond ``max_sents`` (counted, not encoded).
    """
    sent_id = tokenizer.token_to_id(sent_token)
    sep_id = tokenizer.token_to_id("[SEP]")
    if sent_id is None:
        raise ValueError(f"the tokenizer has no {sent_token} token")
    body, sent = passage_table(tokenizer, titles, texts, keep=2 * max_len)
    marked, m_pos, _ = insert_markers(body, sent, sent_id, title=title)
    n = len(texts)
    ids = np.full((n, max_len), pad_id, np.int32)
    mask = np.zeros((n, max_len), np.int32)
    positions = np.zeros((n, max_sents), np.int32)
    valid = np.zeros((n, max_sents), bool)
    dropped = 0
    for i in range(n):
        row = marked.row(i)[:max_len - 1].tolist() + [sep_id]
        ids[i, :len(row)] = row
        mask[i, :len(row)] = 1
        p = m_pos.row(i)
        p = p[marker_valid(p, max_len)]
        dropped += max(len(p) - max_sents, 0)
        p = p[:max_sents]
        positions[i, :len(p)] = p
        valid[i, :len(p)] = True
    return {"ids": ids, "mask": mask, "positions": positions, "valid": valid, "dropped": dropped}
