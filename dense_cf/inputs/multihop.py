"""MDR training inputs: HotpotQA-format examples → tokenised two-hop examples → batches.

Each question becomes one two-hop example (docs/multihop.md):

* hop order: bridge questions take :func:`dense_cf.datasets.hotpotqa.bridge_order` (the passage
  naming the bridge entity first); comparison questions follow ``comparison_order``:
  ``random`` (MDR's choice: the dataset order or its reverse, drawn per epoch and example from a
  stateless seed, so batches still resume exactly), ``dataset`` (always the dataset order) or
  ``both`` (two examples, one per order);
* hop-1 query ``[CLS] q [SEP]``; hop-2 query ``[CLS] q [SEP] title1 [SEP] text1 [SEP]``
  (:func:`dense_cf.inputs.tokens.hop2_query_row`, built here in the input pipeline from the cached rows);
* positives: the two supporting passages ``[CLS] title [SEP] text [SEP]`` (the corpus format:
  a passage is its sentences concatenated as HotpotQA gives them);
* hard negatives: the example's non-supporting context paragraphs (HotpotQA's distractors, which
  are TF-IDF neighbours of the question, as MDR's), ``num_hard`` drawn per epoch;
* counterfactuals (EADPR on each hop): a supporting passage without its supporting sentence(s)
  (:func:`drop_sentences`; HotpotQA marks them), present when something is dropped and some text
  remains, else ``cf_valid`` is False and the hop trains on L_dpr alone.

Tokenisation happens once on the host (:func:`preprocess`), cached as ``.npz`` keyed by file,
tokenizer and settings (:func:`load_config_split`). The passage table keeps ``2 * max_p_len``
word pieces with the HotpotQA sentence index of every token, so dropping a supporting sentence
pulls later text into the window, as in the single-hop pipeline. Order and exact resume are those
of :mod:`dense_cf.inputs.source`.

Batch layout (host-local numpy)::

    q_ids, q_mask       int32 [b, Lq]        hop-1 query
    q2_ids, q2_mask     int32 [b, Lq2]       hop-2 query (max_hop2_len)
    p1_ids/p1_mask, p2_ids/p2_mask  int32 [b, Lp]
    hard_ids, hard_mask int32 [b, h, Lp]     hard_valid bool [b, h]
    cf1_*, cf2_*        int32 [b, Lp], cf1_valid/cf2_valid bool [b]   (when the loss uses p*)
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from typing import Any, Callable, Iterable, Sequence

import numpy as np
from absl import logging

from dense_cf import files
from dense_cf.datasets.dpr import resolve_data_file
from dense_cf.datasets.hotpotqa import HotpotExample, bridge_order, read_hotpot
from dense_cf.inputs import dpr as pipeline
from dense_cf.inputs import source
from dense_cf.inputs.tokens import (
    Ragged,
    encode_texts,
    load_tables,
    passage_head,
    question_row,
    save_tables,
    special_ids,
    token_sentence_ids,
)
from dense_cf.progress import Progress

__all__ = ["CACHE_VERSION", "COMPARISON_ORDERS", "BatchIterator", "MultihopData", "MultihopSpec",
           "drop_sentences", "hop_order", "load_config_split", "make_dataset", "passage_table_rows",
           "preprocess", "sentence_spans", "spec_from_config"]

CACHE_VERSION = 1
COMPARISON_ORDERS = ("random", "dataset", "both")
_ARRAYS = ("q", "body", "sent", "hard")
_VECTORS = ("p1", "p2", "cf1", "cf2", "swappable")

steps_per_epoch = pipeline.steps_per_epoch


def sentence_spans(sentences: Sequence[str]) -> list[tuple[int, int]]:
    """Character spans of ``sentences`` in ``"".join(sentences)`` (HotpotQA's passage text)."""
    spans, start = [], 0
    for s in sentences:
        spans.append((start, start + len(s)))
        start += len(s)
    return spans


def passage_table_rows(tokenizer, titles: Sequence[str], sentence_lists: Sequence[Sequence[str]],
                       *, keep: int) -> tuple[list[list[int]], list[list[int]]]:
    """Passage rows ``[CLS] title [SEP] text`` (no final [SEP], at most ``keep`` word pieces) of
    passages given as sentences, and the HotpotQA sentence index of every token (-1 on the
    head). The ids are those of :func:`dense_cf.inputs.tokens.passage_rows` on the joined text
    (the corpus format); only the sentence ids come from the given sentences, not a splitter."""
    cls_id, sep_id = special_ids(tokenizer)
    t_enc = encode_texts(tokenizer, list(titles))
    x_enc = encode_texts(tokenizer, ["".join(s) for s in sentence_lists])
    bodies, sents = [], []
    for title, sentences, t, x in zip(titles, sentence_lists, t_enc, x_enc):
        offsets = np.asarray(x.offsets, dtype=np.int64).reshape(-1, 2)
        sid = token_sentence_ids(offsets, sentence_spans(sentences))
        head = passage_head(title, t.ids, cls_id, sep_id)
        bodies.append((head + list(x.ids))[:keep])
        sents.append(([-1] * len(head) + sid.tolist())[:keep])
    return bodies, sents


def drop_sentences(body: Sequence[int], sent: Sequence[int], support: Iterable[int]
                   ) -> tuple[list[int], list[int], bool]:
    """The counterfactual row: ``body`` without the tokens of the sentences ``support``.

    Returns ``(row, its sentence ids, valid)``; valid when some token was dropped and some text
    token remains (an empty p* would be just the title: a degenerate pivot). Head tokens
    (sentence -1) stay.
    """
    body, sent = np.asarray(body), np.asarray(sent)
    drop = np.isin(sent, np.fromiter(support, dtype=np.int64)) & (sent >= 0)
    valid = bool(drop.any() and ((sent >= 0) & ~drop).any())
    return body[~drop].tolist(), sent[~drop].tolist(), valid


def hop_order(example: HotpotExample, comparison_order: str) -> list[tuple[str, str]]:
    """The (first-hop title, second-hop title) pairs an example trains with: one pair, or two
    for a comparison question under ``comparison_order="both"``."""
    if comparison_order not in COMPARISON_ORDERS:
        raise ValueError(f"config.multihop.comparison_order={comparison_order!r} is not one of "
                         f"{', '.join(COMPARISON_ORDERS)}")
    first, second = bridge_order(example)
    if example.type == "comparison" and comparison_order == "both":
        return [(first, second), (second, first)]
    return [(first, second)]


@dataclasses.dataclass
class MultihopData:
    """Tokenised two-hop examples (module docstring); ``stats`` counts examples and skips."""

    q: Ragged            # [N] question rows [CLS] q [SEP] (<= max_q_len)
    body: Ragged         # [P] passage rows [CLS] title [SEP] text, counterfactual rows included
    sent: Ragged         # [P] HotpotQA sentence index per token, -1 on the head
    hard: Ragged         # [N] body rows of the non-supporting context paragraphs
    p1: np.ndarray       # [N] body row of the first-hop passage
    p2: np.ndarray       # [N] body row of the second-hop passage
    cf1: np.ndarray      # [N] body row of p1 without its supporting sentences, -1 if none
    cf2: np.ndarray      # [N] the same for p2
    swappable: np.ndarray  # [N] bool: comparison question (order drawn per epoch under "random")
    stats: dict

    @property
    def num_examples(self) -> int:
        return len(self.p1)

    def save(self, path: str) -> None:
        save_tables(path, ragged={n: getattr(self, n) for n in _ARRAYS},
                    dense={n: getattr(self, n) for n in _VECTORS}, stats=self.stats)

    @classmethod
    def load(cls, path: str) -> "MultihopData":
        rag, vec, stats = load_tables(path, _ARRAYS, _VECTORS)
        return cls(stats=stats, **rag, **vec)


def preprocess(examples: Sequence[HotpotExample], tokenizer, *, max_q_len: int, max_p_len: int,
               max_hard: int, comparison_order: str = "random", chunk_size: int = 512
               ) -> MultihopData:
    """Tokenises two-hop examples once (module docstring).

    Skipped and counted in ``stats["skipped"]``: an example without exactly two supporting
    titles or whose supporting paragraph is missing from its context. ``stats`` also counts
    bridge / comparison examples, counterfactuals per hop (``cf1_valid``, ``cf2_valid``) and
    examples without a hard negative.
    """
    cls_id, sep_id = special_ids(tokenizer)
    keep = 2 * max_p_len
    row_of: dict[tuple[str, tuple[str, ...]], int] = {}
    bodies: list[list[int]] = []
    sents: list[list[int]] = []
    q_rows: list[list[int]] = []
    hard_rows: list[list[int]] = []
    vec: dict[str, list] = {n: [] for n in _VECTORS}
    skipped: Counter = Counter()
    stats: Counter = Counter()

    def add_passages(paras: Sequence[tuple[str, tuple[str, ...]]]) -> list[int]:
        new = list(dict.fromkeys(p for p in paras if p not in row_of))
        b, s = passage_table_rows(tokenizer, [t for t, _ in new], [x for _, x in new], keep=keep)
        for p, body, sid in zip(new, b, s):
            row_of[p] = len(bodies)
            bodies.append(body)
            sents.append(sid)
        return [row_of[p] for p in paras]

    def add_counterfactual(row: int, support: Sequence[int]) -> int:
        cf, cf_sent, valid = drop_sentences(bodies[row], sents[row], support)
        if not valid:
            return -1
        bodies.append(cf)
        sents.append(cf_sent)
        return len(bodies) - 1

    def flush(chunk: list[tuple[HotpotExample, str, str]]) -> None:
        q_enc = encode_texts(tokenizer, [ex.question for ex, _, _ in chunk])
        for (ex, t1, t2), qe in zip(chunk, q_enc):
            gold = [(t1, ex.sentences(t1)), (t2, ex.sentences(t2))]
            others = [(t, s) for t, s in ex.context if t not in (t1, t2)][:max_hard]
            r1, r2, *hard = add_passages(gold + others)
            q_rows.append(question_row(qe.ids, max_q_len, cls_id, sep_id))
            hard_rows.append(hard)
            vec["p1"].append(r1)
            vec["p2"].append(r2)
            vec["cf1"].append(add_counterfactual(r1, ex.supporting_sentences(t1)))
            vec["cf2"].append(add_counterfactual(r2, ex.supporting_sentences(t2)))
            vec["swappable"].append(ex.type == "comparison")
            stats["examples"] += 1
            stats[ex.type or "untyped"] += 1
            stats["cf1_valid"] += int(vec["cf1"][-1] >= 0)
            stats["cf2_valid"] += int(vec["cf2"][-1] >= 0)
            stats["no_hard_negatives"] += int(not hard)

    chunk: list[tuple[HotpotExample, str, str]] = []
    progress = Progress("preprocess multi-hop", len(examples), unit="questions")
    for ex in examples:
        progress.update()
        if len(ex.supporting_titles) != 2:
            skipped["not two supporting titles"] += 1
            continue
        try:
            pairs = hop_order(ex, comparison_order)
            for t1, t2 in pairs:
                ex.sentences(t1), ex.sentences(t2)
        except KeyError:
            skipped["supporting paragraph not in context"] += 1
            continue
        chunk.extend((ex, t1, t2) for t1, t2 in pairs)
        if len(chunk) >= chunk_size:
            flush(chunk)
            chunk = []
    if chunk:
        flush(chunk)
    progress.done()
    out_stats: dict[str, Any] = {"examples": 0, "cf1_valid": 0, "cf2_valid": 0,
                                 "no_hard_negatives": 0, **stats}
    out_stats["passages"] = len(bodies)
    out_stats["questions"] = len(examples)
    out_stats["skipped"] = sum(skipped.values())
    out_stats["skip_reasons"] = dict(skipped)
    return MultihopData(
        q=Ragged.from_rows(q_rows), body=Ragged.from_rows(bodies), sent=Ragged.from_rows(sents),
        hard=Ragged.from_rows(hard_rows), p1=np.asarray(vec["p1"], np.int32),
        p2=np.asarray(vec["p2"], np.int32), cf1=np.asarray(vec["cf1"], np.int32),
        cf2=np.asarray(vec["cf2"], np.int32), swappable=np.asarray(vec["swappable"], bool),
        stats=out_stats)


def _fingerprint(path: str, tokenizer, **kw) -> str:
    """The tokenised cache's key: the file as on disk, the tokenizer and the settings ``kw``."""
    return files.sha256_hex(files.file_key(path), CACHE_VERSION,
                            files.content_sha256([tokenizer.to_str().encode()]), kw)[:16]


def load_config_split(config, tokenizer, key: str, max_examples: int = 0) -> MultihopData | None:
    """``Inputs.load``: the tokenised HotpotQA-format file ``config.data.<key>`` (None when the
    config names none), cached beside it (or in ``config.data.cache_dir``)."""
    path = resolve_data_file(config.data, key, required=False)
    if path is None:
        return None
    mh = config.multihop
    settings = dict(max_q_len=int(config.data.max_q_len), max_p_len=int(config.data.max_p_len),
                    max_hard=int(config.data.max_hard_stored),
                    comparison_order=str(mh.comparison_order))
    cache_dir = config.data.cache_dir or os.path.join(os.path.dirname(os.path.abspath(path)),
                                                       ".cache")
    key_ = _fingerprint(path, tokenizer, max_examples=max_examples, **settings)
    cache = os.path.join(cache_dir, f"{os.path.basename(path)}.mdr.{key_}.npz")
    if os.path.exists(cache):
        logging.info("loading tokenised multi-hop cache %s", cache)
        return MultihopData.load(cache)
    examples, skipped = read_hotpot(path)
    if max_examples:
        examples = examples[:max_examples]
    data = preprocess(examples, tokenizer, **settings)
    data.stats["records_skipped"] = sum(skipped.values())
    data.stats["record_skip_reasons"] = dict(skipped)
    logging.info("%s: %s", path, {k: v for k, v in data.stats.items()})
    os.makedirs(cache_dir, exist_ok=True)
    data.save(cache)
    return data


@dataclasses.dataclass(frozen=True)
class MultihopSpec:
    """Static settings of an MDR batch (module docstring)."""

    global_batch: int
    max_q_len: int
    max_p_len: int
    max_hop2_len: int
    num_hard: int = 1
    counterfactual: bool = False
    comparison_order: str = "random"
    pad_id: int = 0
    sep_id: int = 102
    seed: int = 0
    shuffle: bool = True

    def __post_init__(self) -> None:
        if self.comparison_order not in COMPARISON_ORDERS:
            raise ValueError(f"config.multihop.comparison_order={self.comparison_order!r} is not "
                             f"one of {', '.join(COMPARISON_ORDERS)}")
        if self.max_hop2_len <= self.max_q_len:
            raise ValueError(f"config.multihop.max_hop2_len={self.max_hop2_len} must exceed "
                             f"config.data.max_q_len={self.max_q_len}: the hop-2 query holds the "
                             f"question and a passage")


def spec_from_config(config, tokenizer, *, shuffle: bool = True,
                     counterfactual: bool = False) -> MultihopSpec:
    """The batch spec of an MDR run; ``counterfactual``: batches carry p1*, p2* (the loss uses
    them). The counterfactual is always "drop the supporting sentences"
    (``config.data.counterfactual`` is a single-hop setting and is not read)."""
    return MultihopSpec(
        global_batch=config.train.global_batch, max_q_len=config.data.max_q_len,
        max_p_len=config.data.max_p_len, max_hop2_len=config.multihop.max_hop2_len,
        num_hard=config.data.num_hard, counterfactual=counterfactual,
        comparison_order=config.multihop.comparison_order,
        pad_id=tokenizer.token_to_id("[PAD]") or 0, sep_id=tokenizer.token_to_id("[SEP]"),
        seed=config.seed, shuffle=shuffle)


def example_fn(data: MultihopData, spec: MultihopSpec) -> Callable[[int, int], dict[str, np.ndarray]]:
    """``(epoch, i) -> example i's arrays`` (numpy; module docstring's batch layout)."""
    h, lp = spec.num_hard, spec.max_p_len

    def passage(row: int) -> tuple[np.ndarray, np.ndarray]:
        return source.fix_len(data.body.row(row), lp, spec.pad_id, spec.sep_id)

    def fn(epoch: int, i: int) -> dict[str, np.ndarray]:
        out = {}
        p1, p2, c1, c2 = (int(data.p1[i]), int(data.p2[i]), int(data.cf1[i]), int(data.cf2[i]))
        if spec.comparison_order == "random" and spec.shuffle and data.swappable[i]:
            if source.example_rng(spec.seed, epoch, i, 5).random() < 0.5:
                p1, p2, c1, c2 = p2, p1, c2, c1
        q = data.q.row(i)
        out["q_ids"], out["q_mask"] = source.fix_len(q, spec.max_q_len, spec.pad_id, None)
        # hop2_query_row from the cached rows: the question row, then p1 without its [CLS].
        out["q2_ids"], out["q2_mask"] = source.fix_len(
            np.concatenate([q, data.body.row(p1)[1:]]), spec.max_hop2_len, spec.pad_id,
            spec.sep_id)
        out["p1_ids"], out["p1_mask"] = passage(p1)
        out["p2_ids"], out["p2_mask"] = passage(p2)
        cand = data.hard.row(i)
        if spec.shuffle:
            cand = cand[source.example_rng(spec.seed, epoch, i).permutation(len(cand))]
        k = min(len(cand), h)
        chosen = np.zeros(h, np.int64)  # an empty slot holds row 0, masked out by hard_valid
        chosen[:k] = cand[:k]
        out["hard_ids"], out["hard_mask"] = source.fix_rows(
            [data.body.row(int(r)) for r in chosen], lp, spec.pad_id, spec.sep_id)
        out["hard_valid"] = np.arange(h) < k
        if spec.counterfactual:
            for name, c in (("cf1", c1), ("cf2", c2)):
                out[f"{name}_ids"], out[f"{name}_mask"] = passage(max(c, 0))
                out[f"{name}_valid"] = np.asarray(c >= 0)
        return out

    return fn


def batch_source(data: MultihopData, spec: MultihopSpec, process_index: int = 0,
                 process_count: int = 1) -> source.BatchSource:
    """Host ``process_index``'s MDR batch of each global step (:mod:`dense_cf.inputs.source`)."""
    return source.BatchSource(data.num_examples, spec.global_batch, spec.seed, spec.shuffle,
                              source.stack_examples(example_fn(data, spec)),
                              process_index=process_index, process_count=process_count)


def make_dataset(data: MultihopData, spec: MultihopSpec, *, start_step: int = 0,
                 process_index: int = 0, process_count: int = 1, repeat: bool = True,
                 pipeline: str = "tfdata") -> Any:
    """Host-local MDR batches from global step ``start_step`` (``as_numpy_iterator()``)."""
    return source.make_dataset(batch_source(data, spec, process_index, process_count),
                               start_step=start_step, repeat=repeat, pipeline=pipeline)


class BatchIterator(source.BatchIterator):
    """Resumable MDR batches (``inputs.source.BatchIterator``)."""

    _source = staticmethod(batch_source)
