"""Fusion-in-Decoder training data: a retriever's results → tokenised, resumable FiD batches.

Input (docs/readers.md, "Fusion-in-Decoder"): the retrieval results file the extractive reader
reads (``config.reader.train_file`` / ``dev_file``, written by ``python -m
dense_cf.cli.reader_data``), read and cached by :func:`dense_cf.inputs.reader.cached_results`.
Per question, as FiD (Izacard & Grave 2021) reads it:

* encoder rows: its first ``fid.n_passages`` retrieved passages in rank order, each
  ``question: {q} title: {t} context: {c}`` (``models.fid.format_fid_inputs``), cut to
  ``fid.max_len`` pieces keeping the closing ``</s>``; no positive/negative selection;
* targets: every gold answer, tokenised with ``</s>`` and cut to ``fid.max_answer_len``
  (keeping ``</s>``; cut ones counted);
* skipped and counted: a question without answers (``no_answers``) or without passages
  (``no_passages``); bad records of the file are skipped, counted and named.

The question part (``question: {q}``) and each passage part (``title: {t} context: {c}``) are
tokenised once without special tokens; a row is their concatenation, which equals tokenising
the joined string (T5's SentencePiece pre-tokenizer splits on whitespace; tested). Passages are
kept once per file, keyed by ``id``, cut to ``fid.max_len`` pieces.

Batches come from :func:`dense_cf.inputs.reader.batch_source` (epoch permutation seeded by
``(seed, epoch)``, host columns, exact resume: :mod:`dense_cf.inputs.source`). The target of
example i in epoch e is one of its answers drawn from ``default_rng((seed, e, i))`` (FiD samples
one per draw of the example); unshuffled (dev) batches take the first answer.

Batch layout (host-local; n = fid.n_passages, L = fid.max_len, T = fid.max_answer_len)::

    input_ids, attention_mask   int32 [b, n, L]   missing passages: all-padding rows, mask 0
    labels                      int32 [b, T]      answer + </s>, padded with -100
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

import numpy as np

from dense_cf.datasets.formats import RetrievalRecord
from dense_cf.inputs import reader as reader_inputs
from dense_cf.inputs import source
from dense_cf.inputs.tokens import Ragged, encode_texts, load_tables, save_tables
from dense_cf.progress import Progress

__all__ = ["FiDBatchIterator", "FiDData", "FiDSpec", "eos_id", "fid_row", "load_config_split",
           "make_batch", "make_dataset", "passage_text", "preprocess", "question_text",
           "spec_from_config"]

_ARRAYS = ("q", "passages", "ctx", "answers", "answer_rows")


@dataclasses.dataclass
class FiDData:
    """Tokenised FiD examples (module docstring); ``stats`` counts what was kept and why not."""

    q: Ragged             # [N] "question: q" pieces, no </s>
    passages: Ragged      # [P] "title: t context: c" pieces, no </s>, at most max_len
    ctx: Ragged           # [N] passage indices, rank order, at most n_passages
    answers: Ragged       # [A] answer pieces + </s>, at most max_answer_len
    answer_rows: Ragged   # [N] indices into answers
    stats: dict

    @property
    def num_examples(self) -> int:
        return len(self.q)

    def save(self, path: str) -> None:
        save_tables(path, ragged={n: getattr(self, n) for n in _ARRAYS}, dense={}, stats=self.stats)

    @classmethod
    def load(cls, path: str) -> "FiDData":
        rag, _, stats = load_tables(path, _ARRAYS, ())
        return cls(stats=stats, **rag)


def question_text(question: str) -> str:
    """The question part of a FiD row (FiD's format, ``models.fid.format_fid_inputs``)."""
    return f"question: {question}"


def passage_text(title: str, text: str) -> str:
    """The passage part of a FiD row; ``question_text(q) + " " + passage_text(t, c)`` is
    ``format_fid_inputs(q, [(t, c)])[0]``."""
    return f"title: {title} context: {text}"


def eos_id(tokenizer) -> int:
    """The id of T5's ``</s>``; a tokenizer without it is not a T5 tokenizer."""
    i = tokenizer.token_to_id("</s>")
    if i is None:
        raise ValueError("the tokenizer has no '</s>' token: FiD needs the T5 checkpoint's "
                         "tokenizer.json (model.name_or_path or model.tokenizer)")
    return int(i)


def fid_row(q: Any, p: Any, max_len: int, eos: int) -> list[int]:
    """``q + p + </s>`` cut to ``max_len`` pieces keeping ``</s>`` (``models.fid.fid_batch``'s
    cut of the tokenised joined string)."""
    return [*list(q), *list(p)][:max_len - 1] + [eos]


def preprocess(records: Iterable[RetrievalRecord], tokenizer, *, max_len: int, n_passages: int,
               max_answer_len: int, chunk_size: int = 512, total: int | None = None) -> FiDData:
    """Tokenises questions, their first ``n_passages`` passages and their answers (module
    docstring)."""
    eos = eos_id(tokenizer)
    pid_of: dict[str, int] = {}
    passages: list[np.ndarray] = []
    q_rows: list[list[int]] = []
    ctx_rows: list[list[int]] = []
    answers: list[list[int]] = []
    answer_rows: list[list[int]] = []
    stats = {"questions": 0, "kept": 0, "no_answers": 0, "no_passages": 0, "answers": 0,
             "answers_cut_by_max_answer_len": 0, "passages_read": 0}
    progress = Progress("fid data", total, unit="questions")

    def flush(chunk: list[RetrievalRecord]) -> None:
        keep = []
        for rec in chunk:
            stats["questions"] += 1
            if not rec.answers:
                stats["no_answers"] += 1
            elif not rec.ctxs:
                stats["no_passages"] += 1
            else:
                keep.append(rec)
        new = list({c.id: c for rec in keep for c in rec.ctxs[:n_passages] if c.id not in pid_of}.values())
        for c, enc in zip(new, encode_texts(tokenizer, [passage_text(c.title, c.text) for c in new])):
            pid_of[c.id] = len(passages)
            passages.append(np.asarray(enc.ids[:max_len], np.int32))
        q_enc = encode_texts(tokenizer, [question_text(r.question) for r in keep])
        a_enc = encode_texts(tokenizer, [a for r in keep for a in r.answers])
        a0 = 0
        for rec, qe in zip(keep, q_enc):
            q_rows.append(list(qe.ids[:max_len]))
            ctx_rows.append([pid_of[c.id] for c in rec.ctxs[:n_passages]])
            rows = []
            for ae in a_enc[a0:a0 + len(rec.answers)]:
                ids = [*ae.ids, eos]
                stats["answers_cut_by_max_answer_len"] += int(len(ids) > max_answer_len)
                rows.append(len(answers))
                answers.append(ids[:max_answer_len - 1] + [eos] if len(ids) > max_answer_len else ids)
            a0 += len(rec.answers)
            answer_rows.append(rows)
            stats["kept"] += 1
            stats["answers"] += len(rows)
            stats["passages_read"] += len(ctx_rows[-1])
        progress.update(len(chunk))

    for chunk in reader_inputs.in_chunks(records, chunk_size):
        flush(chunk)
    progress.done()
    stats["passages"] = len(passages)
    stats["skipped_questions"] = stats["questions"] - stats["kept"]
    return FiDData(q=Ragged.from_rows(q_rows), passages=Ragged.from_arrays(passages),
                   ctx=Ragged.from_rows(ctx_rows), answers=Ragged.from_rows(answers),
                   answer_rows=Ragged.from_rows(answer_rows), stats=stats)


def _settings(config) -> dict[str, Any]:
    f = config.fid
    return {"max_len": int(f.max_len), "n_passages": int(f.n_passages),
            "max_answer_len": int(f.max_answer_len)}


def load_config_split(config, tokenizer, key: str, max_examples: int = 0) -> FiDData | None:
    """``Inputs.load`` of FiD: the tokenised ``config.reader.<key>`` (None for an empty
    ``dev_file``)."""
    path = reader_inputs.reader_file(config, key, required=key == "train_file")
    if path is None:
        return None
    return reader_inputs.cached_results(
        path, tokenizer, cache_dir=reader_inputs.config_cache_dir(config, path),
        max_examples=max_examples, tag="fid", preprocess_fn=preprocess, data_cls=FiDData,
        settings=_settings(config), empty="no question has both answers and retrieved passages")


# --------------------------------------------------------------------------- batches


@dataclasses.dataclass(frozen=True)
class FiDSpec:
    """Static batch settings (module docstring)."""

    global_batch: int
    n_passages: int
    max_len: int
    max_answer_len: int
    pad_id: int = 0
    eos_id: int = 1
    seed: int = 0
    shuffle: bool = True


def spec_from_config(config, tokenizer, *, shuffle: bool = True, counterfactual: bool = False) -> FiDSpec:
    """FiD's batch spec (``config.fid``; ``counterfactual`` does not apply)."""
    del counterfactual
    f = config.fid
    pad = tokenizer.token_to_id("<pad>")
    return FiDSpec(global_batch=int(config.train.global_batch), n_passages=int(f.n_passages),
                   max_len=int(f.max_len), max_answer_len=int(f.max_answer_len),
                   pad_id=0 if pad is None else int(pad), eos_id=eos_id(tokenizer),
                   seed=int(config.seed), shuffle=shuffle)


def make_batch(data: FiDData, spec: FiDSpec, epoch: int, indices: np.ndarray) -> dict[str, np.ndarray]:
    """The batch of examples ``indices`` drawn in ``epoch`` (module docstring)."""
    b, n, length = len(indices), spec.n_passages, spec.max_len
    ids = np.full((b, n, length), spec.pad_id, np.int32)
    mask = np.zeros((b, n, length), np.int32)
    labels = np.full((b, spec.max_answer_len), -100, np.int32)
    for r, i in enumerate(int(x) for x in indices):
        q = data.q.row(i)
        for j, pid in enumerate(data.ctx.row(i)[:n]):
            row = fid_row(q, data.passages.row(int(pid)), length, spec.eos_id)
            ids[r, j, :len(row)] = row
            mask[r, j, :len(row)] = 1
        rows = data.answer_rows.row(i)
        pick = int(np.random.default_rng((spec.seed, epoch, i)).integers(len(rows))) if spec.shuffle else 0
        answer = data.answers.row(int(rows[pick]))[:spec.max_answer_len]
        labels[r, :len(answer)] = answer
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def batch_source(data: FiDData, spec: FiDSpec, process_index: int = 0,
                 process_count: int = 1) -> source.BatchSource:
    """Host ``process_index``'s FiD batch of each global step (:mod:`dense_cf.inputs.source`)."""
    return reader_inputs.batch_source(data, spec, process_index, process_count, batch_fn=make_batch)


def make_dataset(data: FiDData, spec: FiDSpec, *, start_step: int = 0, process_index: int = 0,
                 process_count: int = 1, repeat: bool = True, pipeline: str = "tfdata") -> Any:
    """Host-local FiD batches of the global batch sequence from global step ``start_step``."""
    return source.make_dataset(batch_source(data, spec, process_index, process_count),
                               start_step=start_step, repeat=repeat, pipeline=pipeline)


class FiDBatchIterator(source.BatchIterator):
    """Resumable FiD batches (``inputs.source.BatchIterator``)."""

    _source = staticmethod(batch_source)
