"""The extractive reader's training data: a retriever's results → tokenised, resumable batches.

Input (docs/readers.md, "Training data"): a DPR retrieval results file (``retrieval.json``:
question, answers, ranked ``ctxs`` with id/title/text/score/has_answer) of a retriever run on
the TRAIN (or dev) questions, written by ``python -m dense_cf.cli.reader_data``. Per question,
as DPR's ``reader_data.py`` selects them:

* positives: retrieved passages with ``has_answer`` (the file's flag; computed with
  ``data.answer_mode`` where the file has none) whose answer occurrences
  (:func:`dense_cf.text.answers.find_answer_spans`, per answer, all occurrences, on the passage
  text only) map to word pieces inside the reader row; at most ``reader.max_positives``, in rank
  order, each with at most ``reader.max_spans`` gold spans;
* negatives: retrieved passages without ``has_answer``, the first ``reader.max_negatives``;
* a question without a positive is skipped and counted (``stats``: ``no_answer_passage`` when
  no passage has the answer, ``no_span_in_window`` when every answer occurrence was cut off by
  ``reader.max_len`` or the flag disagreed with the matcher).

Tokenised once and cached as ``.npz`` beside the file (or ``data.cache_dir``), keyed by the
file, the tokenizer and the settings. Rows are built with :func:`dense_cf.inputs.tokens.reader_row`.

Batches (:mod:`dense_cf.inputs.source`, through tf.data or Grain): global step k of epoch e = k
// steps_per_epoch reads the examples ``perm_e[(k % spe) * B:(k % spe + 1) * B]``, ``perm_e`` a
permutation seeded by ``(seed, e)``; host h takes its column. Each example draws its positive
(one of its positives) and its ``reader.passages - 1`` negatives from ``default_rng((seed, e,
example))``, so batch k is a pure function of ``(seed, k)`` and a resumed run sees the batches
of an uninterrupted one. Unshuffled (dev) batches take the first positive and the first
negatives in file order.

Batch layout (host-local; P = reader.passages, L = reader.max_len, A = reader.max_spans)::

    ids, mask, type_ids    int32 [b, P, L]   row 0: the positive, rows 1..: negatives
    text_lo, text_hi       int32 [b, P]      passage text positions [lo, hi) of each row
    passage_valid          bool  [b, P]      False: no negative left to fill the slot
    starts, ends           int32 [b, A]      gold spans in row 0 (inclusive positions)
    span_valid             bool  [b, A]
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from typing import Any, Callable, Iterable, Iterator

import numpy as np
from absl import logging

from dense_cf import files
from dense_cf.datasets.formats import RetrievalRecord, SkipReport, iter_retrieval_results
from dense_cf.inputs import source
from dense_cf.inputs.tokens import (
    Ragged,
    encode_texts,
    load_tables,
    pad_reader_rows,
    question_row,
    reader_passage,
    reader_row,
    save_tables,
    special_ids,
)
from dense_cf.progress import Progress
from dense_cf.text.answers import find_answer_spans, has_answer

__all__ = ["ReaderBatchIterator", "ReaderData", "ReaderSpec", "cached_results",
           "config_cache_dir", "file_problems", "in_chunks", "load_config_split", "load_results_split", "make_batch",
           "make_dataset", "preprocess", "reader_file", "spec_from_config", "token_spans"]

CACHE_VERSION = 1
_ARRAYS = ("q", "passages", "pos", "span_start", "span_end", "neg")
MAKE_DATA = "python -m dense_cf.cli.reader_data --retriever RUN --split {split}"


@dataclasses.dataclass
class ReaderData:
    """Tokenised reader examples (module docstring); ``stats`` counts what was kept and why not."""

    q: Ragged                # [N] [CLS] question [SEP]
    passages: Ragged         # [P] title [SEP] text word pieces (reader_passage), untruncated
    text_start: np.ndarray   # [P] where the text starts in a passages row
    pos: Ragged              # [N] indices into the positive table (E entries)
    pos_pid: np.ndarray      # [E] passage of each positive
    span_start: Ragged       # [E] text-token index of each gold occurrence's first word piece
    span_end: Ragged         # [E] ... and of its last (inclusive)
    neg: Ragged              # [N] passage indices of the negatives, in rank order
    stats: dict

    @property
    def num_examples(self) -> int:
        return len(self.q)

    def save(self, path: str) -> None:
        save_tables(path, ragged={n: getattr(self, n) for n in _ARRAYS},
                    dense={"text_start": self.text_start, "pos_pid": self.pos_pid},
                    stats=self.stats)

    @classmethod
    def load(cls, path: str) -> "ReaderData":
        rag, dense, stats = load_tables(path, _ARRAYS, ("text_start", "pos_pid"))
        return cls(stats=stats, **rag, **dense)


def token_spans(offsets: np.ndarray, char_spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Char spans → inclusive word-piece spans: the first and last token overlapping each span
    (``offsets`` [T, 2] of the text's word pieces). A span no token overlaps is dropped."""
    offsets = np.asarray(offsets, np.int64).reshape(-1, 2)
    out = []
    for a, b in char_spans:
        hit = np.flatnonzero((offsets[:, 0] < b) & (np.maximum(offsets[:, 1], offsets[:, 0] + 1) > a))
        if len(hit):
            out.append((int(hit[0]), int(hit[-1])))
    return out


def _answer_token_spans(text: str, offsets: np.ndarray, answers: list[str], mode: str
                        ) -> list[tuple[int, int]]:
    """Every occurrence of every answer (each answer matched on its own, so overlapping answers
    keep their own spans), as sorted unique word-piece spans."""
    spans: set[tuple[int, int]] = set()
    for a in answers:
        spans.update(token_spans(offsets, find_answer_spans(text, [a], mode=mode)))
    return sorted(spans)


def in_chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """``items`` as consecutive lists of ``size`` (the last may be shorter): the readers
    tokenise their records a chunk at a time."""
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def preprocess(records: Iterable[RetrievalRecord], tokenizer, *, max_len: int, max_q_len: int,
               max_retrieved: int = 0, max_positives: int = 20, max_negatives: int = 50,
               max_spans: int = 10, answer_mode: str = "string", chunk_size: int = 512,
               total: int | None = None) -> ReaderData:
    """Selects and tokenises positives and negatives per question (module docstring)."""
    cls_id, sep_id = special_ids(tokenizer)
    # Passages are keyed by their id (a results file names one corpus) and kept as int32 arrays:
    # NQ's train results hold millions of distinct passages.
    pid_of: dict[str, int] = {}
    passages: list[np.ndarray] = []
    text_start: list[int] = []
    q_rows: list[list[int]] = []
    pos_rows: list[list[int]] = []
    pos_pid: list[int] = []
    starts: list[list[int]] = []
    ends: list[list[int]] = []
    neg_rows: list[list[int]] = []
    stats = {"questions": 0, "kept": 0, "no_answer_passage": 0, "no_span_in_window": 0,
             "has_answer_without_span": 0, "spans_cut_by_max_len": 0, "spans_over_max_spans": 0,
             "positives_over_max": 0, "positives": 0, "negatives": 0, "no_negatives": 0}
    progress = Progress("reader data", total, unit="questions")

    def add_passages(ctxs) -> list[int]:
        new = list({c.id: c for c in ctxs if c.id not in pid_of}.values())
        t_enc = encode_texts(tokenizer, [c.title for c in new])
        x_enc = encode_texts(tokenizer, [c.text for c in new])
        for c, t, x in zip(new, t_enc, x_enc):
            row, start = reader_passage(c.title, t.ids, x.ids, sep_id)
            pid_of[c.id] = len(passages)
            passages.append(np.asarray(row, np.int32))
            text_start.append(start)
        return [pid_of[c.id] for c in ctxs]

    def flush(chunk: list[RetrievalRecord]) -> None:
        q_enc = encode_texts(tokenizer, [r.question for r in chunk])
        for rec, qe in zip(chunk, q_enc):
            q_row = question_row(qe.ids, max_q_len, cls_id, sep_id)
            ctxs = rec.ctxs[:max_retrieved] if max_retrieved else rec.ctxs
            flags = [c.has_answer if c.has_answer is not None
                     else has_answer(rec.answers, c.text, mode=answer_mode) for c in ctxs]
            answer_ctxs = [c for c, f in zip(ctxs, flags) if f]
            negatives = [c for c, f in zip(ctxs, flags) if not f][:max_negatives]
            stats["questions"] += 1
            if not answer_ctxs:
                stats["no_answer_passage"] += 1
                continue
            a_pids = add_passages(answer_ctxs)
            x_enc = encode_texts(tokenizer, [c.text for c in answer_ctxs])
            chosen: list[tuple[int, list[tuple[int, int]]]] = []
            for c, pid, xe in zip(answer_ctxs, a_pids, x_enc):
                spans = _answer_token_spans(c.text, np.asarray(xe.offsets), rec.answers, answer_mode)
                if not spans:
                    stats["has_answer_without_span"] += 1
                    continue
                _, lo, hi = reader_row(q_row, passages[pid], text_start[pid], max_len, sep_id)
                inside = [s for s in spans if lo + s[1] < hi]
                stats["spans_cut_by_max_len"] += len(spans) - len(inside)
                if inside:
                    chosen.append((pid, inside))
            if not chosen:
                stats["no_span_in_window"] += 1
                continue
            stats["positives_over_max"] += max(len(chosen) - max_positives, 0)
            chosen = chosen[:max_positives]
            stats["spans_over_max_spans"] += sum(max(len(sp) - max_spans, 0) for _, sp in chosen)
            chosen = [(pid, sp[:max_spans]) for pid, sp in chosen]
            q_rows.append(q_row)
            pos_rows.append(list(range(len(pos_pid), len(pos_pid) + len(chosen))))
            for pid, spans in chosen:
                pos_pid.append(pid)
                starts.append([s for s, _ in spans])
                ends.append([e for _, e in spans])
            neg_rows.append(add_passages(negatives))
            stats["kept"] += 1
            stats["positives"] += len(chosen)
            stats["negatives"] += len(negatives)
            stats["no_negatives"] += int(not negatives)
        progress.update(len(chunk))

    for chunk in in_chunks(records, chunk_size):
        flush(chunk)
    progress.done()
    stats["passages"] = len(passages)
    stats["skipped_questions"] = stats["questions"] - stats["kept"]
    return ReaderData(q=Ragged.from_rows(q_rows), passages=Ragged.from_arrays(passages),
                      text_start=np.asarray(text_start, np.int32), pos=Ragged.from_rows(pos_rows),
                      pos_pid=np.asarray(pos_pid, np.int32), span_start=Ragged.from_rows(starts),
                      span_end=Ragged.from_rows(ends), neg=Ragged.from_rows(neg_rows), stats=stats)


def _settings(config) -> dict[str, Any]:
    r = config.reader
    return {"max_len": int(r.max_len), "max_q_len": int(r.max_q_len),
            "max_retrieved": int(r.max_retrieved), "max_positives": int(r.max_positives),
            "max_negatives": int(r.max_negatives), "max_spans": int(r.max_spans),
            "answer_mode": str(config.data.answer_mode)}


def reader_file(config, key: str, *, required: bool) -> str | None:
    """The path in ``config.reader.<key>`` (``train_file``/``dev_file``); None when empty and
    not required. Relative paths are made absolute at launch (``configs.base.PATH_FIELDS``)."""
    path = config.reader.get(key) or ""
    split = key.split("_")[0]
    if not path:
        if required:
            raise ValueError(f"config.reader.{key} is empty: name a retrieval results file of the "
                             f"{split} questions (write one with `{MAKE_DATA.format(split=split)}`)")
        return None
    if os.path.isdir(path):
        raise IsADirectoryError(f"config.reader.{key} is a directory, expected a retrieval "
                                f"results file: {path}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"config.reader.{key}: {path} is missing; write it with "
                                f"`{MAKE_DATA.format(split=split)}` (docs/readers.md)")
    return path


def file_problems(config) -> list[str]:
    """What is wrong with the reader's data files (for ``train.validate``)."""
    out = []
    for key in ("train_file", "dev_file"):
        try:
            reader_file(config, key, required=key == "train_file")
        except (ValueError, FileNotFoundError, IsADirectoryError) as e:
            out.append(str(e))
    return out


def load_config_split(config, tokenizer, key: str, max_examples: int = 0) -> ReaderData | None:
    """``Inputs.load`` of the reader: the tokenised ``config.reader.<key>`` (None for an empty
    ``dev_file``)."""
    path = reader_file(config, key, required=key == "train_file")
    if path is None:
        return None
    return load_results_split(path, tokenizer, cache_dir=config_cache_dir(config, path),
                              max_examples=max_examples, **_settings(config))


def load_results_split(path: str, tokenizer, *, cache_dir: str | None, max_examples: int = 0,
                       **settings: Any) -> ReaderData:
    """Reads + tokenises a retrieval results file, reusing a cache keyed by the file, the
    tokenizer and ``settings`` (:func:`preprocess`'s keyword arguments)."""
    return cached_results(path, tokenizer, cache_dir=cache_dir, max_examples=max_examples, tag="reader",
                          preprocess_fn=preprocess, data_cls=ReaderData, settings=settings,
                          empty=f"no question has a positive passage with an answer span inside "
                                f"reader.max_len={settings.get('max_len')}")


def cached_results(path: str, tokenizer, *, cache_dir: str | None, max_examples: int, tag: str,
                   preprocess_fn: Callable[..., Any], data_cls: Any, settings: dict[str, Any],
                   empty: str) -> Any:
    """A reader's tokenise-once step over a retrieval results file (the extractive reader's and
    FiD's): ``preprocess_fn(records, tokenizer, **settings)`` over the file's valid records (bad
    ones skipped, counted in ``stats["skipped_records"]`` and named in ``skip_summary``), cached
    as ``<file>.<tag>.<key>.npz`` in ``cache_dir``, the key hashing the file (path, size, mtime),
    the tokenizer and ``settings``; ``data_cls`` has ``load``/``save``/``num_examples``/``stats``.
    No example kept is an error (``empty`` says why, with the counts)."""
    abspath, size, mtime = files.file_key(path)
    key = files.content_sha256([json.dumps({"path": abspath, "size": size, "mtime": mtime,
                                            "version": CACHE_VERSION, "max_examples": max_examples,
                                            **settings}, sort_keys=True).encode(),
                                tokenizer.to_str().encode()])[:16]
    cache = os.path.join(cache_dir, f"{os.path.basename(path)}.{tag}.{key}.npz") if cache_dir else None
    if cache and os.path.exists(cache):
        logging.info("loading tokenised %s cache %s", tag, cache)
        return data_cls.load(cache)
    report = SkipReport()
    records = (rec for _, rec in iter_retrieval_results(path, skip_bad=True, report=report)
               if rec is not None)
    if max_examples:
        records = (rec for _, rec in zip(range(max_examples), records))
    data = preprocess_fn(records, tokenizer, **settings)
    data.stats["skipped_records"] = report.total
    data.stats["skip_summary"] = report.summary()
    if report.total:
        report.log()
    if not data.num_examples:
        raise ValueError(f"{path}: {empty}: "
                         + json.dumps({k: v for k, v in data.stats.items() if k != 'skip_summary'}))
    logging.info("%s: %s", path, {k: v for k, v in data.stats.items() if k != "skip_summary"})
    if cache:
        os.makedirs(cache_dir, exist_ok=True)
        data.save(cache)
    return data


def config_cache_dir(config, path: str) -> str:
    """Where a reader's tokenised cache of ``path`` goes: ``data.cache_dir``, else ``.cache``
    beside the file."""
    return config.data.cache_dir or os.path.join(os.path.dirname(os.path.abspath(path)), ".cache")


# --------------------------------------------------------------------------- batches


@dataclasses.dataclass(frozen=True)
class ReaderSpec:
    """Static batch settings (module docstring)."""

    global_batch: int
    passages: int
    max_len: int
    max_spans: int
    pad_id: int = 0
    sep_id: int = 102
    seed: int = 0
    shuffle: bool = True


def spec_from_config(config, tokenizer, *, shuffle: bool = True,
                     counterfactual: bool = False) -> ReaderSpec:
    """The reader's batch spec (``config.reader``; ``counterfactual`` does not apply)."""
    del counterfactual
    r = config.reader
    return ReaderSpec(global_batch=int(config.train.global_batch), passages=int(r.passages),
                      max_len=int(r.max_len), max_spans=int(r.max_spans),
                      pad_id=tokenizer.token_to_id("[PAD]") or 0,
                      sep_id=tokenizer.token_to_id("[SEP]"), seed=int(config.seed), shuffle=shuffle)


def make_batch(data: ReaderData, spec: ReaderSpec, epoch: int, indices: np.ndarray
               ) -> dict[str, np.ndarray]:
    """The batch of examples ``indices`` drawn in ``epoch`` (module docstring)."""
    p, a = spec.passages, spec.max_spans
    rows, q_lens, lo, hi = [], [], [], []
    valid = np.zeros((len(indices), p), bool)
    starts = np.zeros((len(indices), a), np.int32)
    ends = np.zeros((len(indices), a), np.int32)
    span_valid = np.zeros((len(indices), a), bool)
    for b, i in enumerate(int(x) for x in indices):
        pos, neg = data.pos.row(i), data.neg.row(i)
        if spec.shuffle:
            rng = np.random.default_rng((spec.seed, epoch, i))
            entry = int(pos[rng.integers(len(pos))])
            negs = neg[rng.permutation(len(neg))[:p - 1]]
        else:
            entry, negs = int(pos[0]), neg[:p - 1]
        q = data.q.row(i)
        pids = [int(data.pos_pid[entry]), *(int(x) for x in negs)]
        for j in range(p):
            pid = pids[j] if j < len(pids) else None
            if pid is None:  # an empty slot: masked out of the selection softmax
                row, l0, h0 = reader_row(q, [], 0, spec.max_len, spec.sep_id)
            else:
                row, l0, h0 = reader_row(q, data.passages.row(pid), int(data.text_start[pid]),
                                         spec.max_len, spec.sep_id)
                valid[b, j] = True
            rows.append(row)
            q_lens.append(len(q))
            lo.append(l0)
            hi.append(h0)
        s = lo[b * p] + data.span_start.row(entry)[:a]
        e = lo[b * p] + data.span_end.row(entry)[:a]
        keep = e < hi[b * p]
        n = int(keep.sum())
        starts[b, :n], ends[b, :n], span_valid[b, :n] = s[keep], e[keep], True
    ids, mask, types = pad_reader_rows(rows, q_lens, spec.max_len, spec.pad_id)
    shape = (len(indices), p)
    return {"ids": ids.reshape(*shape, -1), "mask": mask.reshape(*shape, -1),
            "type_ids": types.reshape(*shape, -1),
            "text_lo": np.asarray(lo, np.int32).reshape(shape),
            "text_hi": np.asarray(hi, np.int32).reshape(shape),
            "passage_valid": valid, "starts": starts, "ends": ends, "span_valid": span_valid}


def batch_source(data: Any, spec: Any, process_index: int = 0, process_count: int = 1,
                 batch_fn: Callable[..., dict] | None = None) -> source.BatchSource:
    """Host ``process_index``'s batch of each global step: ``batch_fn(data, spec, epoch,
    indices)`` (the extractive reader's :func:`make_batch`, FiD's own) over the order of
    :mod:`dense_cf.inputs.source`. ``spec`` has ``global_batch``, ``seed`` and ``shuffle``."""
    fn = functools.partial(batch_fn or make_batch, data, spec)
    return source.BatchSource(data.num_examples, spec.global_batch, spec.seed, spec.shuffle, fn,
                              process_index=process_index, process_count=process_count)


def make_dataset(data: ReaderData, spec: ReaderSpec, *, start_step: int = 0, process_index: int = 0,
                 process_count: int = 1, repeat: bool = True, pipeline: str = "tfdata") -> Any:
    """Host-local batches of the global batch sequence from global step ``start_step``."""
    return source.make_dataset(batch_source(data, spec, process_index, process_count),
                               start_step=start_step, repeat=repeat, pipeline=pipeline)


class ReaderBatchIterator(source.BatchIterator):
    """Resumable reader batches (``inputs.source.BatchIterator``)."""

    _source = staticmethod(batch_source)
