"""Training inputs of DPR/PiCL/EADPR: tokenise once on the host, then deterministic batches.

Preprocessing (:func:`preprocess`) turns DPR biencoder examples into ragged token arrays, cached
as ``.npz``: questions, a de-duplicated passage table (``[CLS] title [SEP] text`` word pieces with
a per-token sentence id), per-example answer flags over the positive's tokens, and hard-negative
passage ids. Counterfactual masks (docs/method.md §2) are derived on the fly in the input pipeline
(:func:`dense_cf.inputs.cf_masks.drop_mask`), so one cache serves every strategy.

Order and resumability are :mod:`dense_cf.inputs.source`'s: batch ``k`` of the run is a pure
function of ``(seed, k, hosts)`` through :func:`example_fn`, which tf.data and Grain both run,
and resuming at step ``k`` reproduces exactly the batches of an uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, Iterable, Iterator

import numpy as np
from absl import logging

from dense_cf import files
from dense_cf.datasets.dpr import resolve_data_file
from dense_cf.datasets.evidence_file import EvidenceMatcher
from dense_cf.datasets.formats import BiencoderExample, SkipReport, iter_biencoder
from dense_cf.datasets.subsets import subset_mask
from dense_cf.inputs import cf_masks as cf_lib
from dense_cf.inputs import source
from dense_cf.inputs.tokens import (
    Ragged,
    encode_texts,
    load_tables,
    passage_rows,
    question_row,
    save_tables,
    special_ids,
    token_answer_flags,
)
from dense_cf.text.sentences import large_re_cache

# 2: passages with an empty title are "[CLS] text" (docs/method.md §8); older caches are rebuilt.
CACHE_VERSION = 2
_ARRAYS = ("q", "body", "sent", "pos_ans", "hard")


@dataclasses.dataclass
class Preprocessed:
    """Tokenised examples (see module docstring). ``stats`` records counts, including skips."""

    q: Ragged                 # [N, Lq'] question word pieces incl. [CLS] ... [SEP], truncated
    body: Ragged              # [P, *] passage word pieces "[CLS] title [SEP] text" (no final [SEP])
    sent: Ragged              # [P, *] sentence id per body token, -1 for title/special tokens
    pos_pid: np.ndarray       # [N] passage-table index of positive_ctxs[0]
    pos_ans: Ragged           # [N, *] answer flag per token of the positive's body
    hard: Ragged              # [N, *] passage-table indices of hard negatives (DPR order)
    evidence_sent: np.ndarray  # [N] sentence removed by the `evidence` strategy, -1 if none
    stats: dict

    @property
    def num_examples(self) -> int:
        return len(self.pos_pid)

    def save(self, path: str) -> None:
        save_tables(path, ragged={n: getattr(self, n) for n in _ARRAYS},
                    dense={"pos_pid": self.pos_pid, "evidence_sent": self.evidence_sent},
                    stats=self.stats)

    @classmethod
    def load(cls, path: str) -> "Preprocessed":
        rag, dense, stats = load_tables(path, _ARRAYS, ("pos_pid", "evidence_sent"))
        return cls(stats=stats, **rag, **dense)


_encode = encode_texts


def preprocess(examples: Iterable[BiencoderExample], tokenizer, *, max_q_len: int, max_p_len: int,
               max_hard: int, answer_mode: str = "string", evidence: dict[int, int] | None = None,
               chunk_size: int = 2048) -> Preprocessed:
    """Tokenises biencoder examples once (docs/method.md §8 input, §2 per-token features).

    Passage bodies keep up to ``2 * max_p_len`` word pieces, not ``max_p_len``: dropping the
    evidence from a long positive pulls later tokens into the encoder window, as in the paper's
    ``[s_l ; s_r]``.
    """
    cls_id, sep_id = special_ids(tokenizer)
    keep = 2 * max_p_len
    pid_of: dict[tuple[str, str], int] = {}
    bodies: list[list[int]] = []
    sents: list[list[int]] = []
    head_lens: list[int] = []
    q_rows: list[list[int]] = []
    pos_pid: list[int] = []
    pos_ans: list[np.ndarray] = []
    hard_rows: list[list[int]] = []
    stats = {"examples": 0, "no_answer_match": 0, "no_hard_negatives": 0}

    def add_passages(ctxs) -> list[int]:
        new = [c for c in ctxs if (c.title, c.text) not in pid_of]
        uniq = list({(c.title, c.text): c for c in new}.values())
        b, s, h, _ = passage_rows(tokenizer, [c.title for c in uniq], [c.text for c in uniq],
                                  keep=keep)
        for c, body, sent, head in zip(uniq, b, s, h):
            pid_of[(c.title, c.text)] = len(bodies)
            head_lens.append(head)
            bodies.append(body)
            sents.append(sent)
        return [pid_of[(c.title, c.text)] for c in ctxs]

    def flush(chunk: list[BiencoderExample]) -> None:
        q_enc = _encode(tokenizer, [ex.question for ex in chunk])
        pos = add_passages([ex.positive_ctxs[0] for ex in chunk])
        hard = [add_passages(ex.hard_negative_ctxs[:max_hard]) for ex in chunk]
        pos_texts = _encode(tokenizer, [ex.positive_ctxs[0].text for ex in chunk])
        for ex, qe, pid, hp, xe in zip(chunk, q_enc, pos, hard, pos_texts):
            q_rows.append(question_row(qe.ids, max_q_len, cls_id, sep_id))
            flags = token_answer_flags(ex.positive_ctxs[0].text, np.asarray(xe.offsets),
                                              ex.answers, mode=answer_mode)
            head = head_lens[pid]
            row = np.zeros(len(bodies[pid]), dtype=np.int8)
            row[head:] = flags[:max(len(row) - head, 0)]
            pos_ans.append(row)
            stats["no_answer_match"] += int(not row.any())
            stats["no_hard_negatives"] += int(not hp)
            pos_pid.append(pid)
            hard_rows.append(hp)
        stats["examples"] += len(chunk)

    chunk: list[BiencoderExample] = []
    with large_re_cache():  # pysbd sentence splitting is ~3x faster with a large re cache
        for ex in examples:
            chunk.append(ex)
            if len(chunk) >= chunk_size:
                flush(chunk)
                chunk = []
                logging.info("preprocess: %d examples, %d passages", stats["examples"], len(bodies))
        if chunk:
            flush(chunk)
    n = len(pos_pid)
    ev = np.full(n, -1, dtype=np.int32)
    for i, s in (evidence or {}).items():
        if 0 <= i < n:
            ev[i] = s
    stats["passages"] = len(bodies)
    return Preprocessed(q=Ragged.from_rows(q_rows), body=Ragged.from_rows(bodies),
                        sent=Ragged.from_rows(sents), pos_pid=np.asarray(pos_pid, np.int32),
                        pos_ans=Ragged.from_rows(pos_ans, dtype=np.int8),
                        hard=Ragged.from_rows(hard_rows), evidence_sent=ev, stats=stats)


def _fingerprint(path: str, tokenizer, **kw) -> str:
    """The tokenised cache's key: the file as on disk (:func:`files.file_key`), the tokenizer
    and the settings ``kw``. The exact JSON bytes are part of the key (existing caches stay
    valid), hence the json.dumps here rather than :func:`files.sha256_hex`'s canonical form."""
    abspath, size, mtime = files.file_key(path)
    settings = {"path": abspath, "size": size, "mtime": mtime, "vocab": tokenizer.get_vocab_size(),
                "version": CACHE_VERSION, **kw}
    return files.content_sha256([json.dumps(settings, sort_keys=True).encode(),
                                 tokenizer.to_str().encode()])[:16]


def load_config_split(config, tokenizer, key: str, max_examples: int = 0) -> Preprocessed | None:
    """The tokenised ``config.data.<key>`` split (None when the config names no file)."""
    path = resolve_data_file(config.data, key, required=False)
    if path is None:
        return None
    cache = config.data.cache_dir or os.path.join(os.path.dirname(os.path.abspath(path)), ".cache")
    return load_biencoder_split(
        path, tokenizer, cache_dir=cache, max_q_len=config.data.max_q_len,
        max_p_len=config.data.max_p_len, max_hard=config.data.max_hard_stored,
        answer_mode=config.data.answer_mode, evidence_file=config.data.evidence_file or None,
        max_examples=max_examples,
        fraction=float(config.data.train_fraction) if key == "train_file" else 1.0,
        fraction_seed=int(config.data.train_fraction_seed))


def file_problems(config) -> list[str]:
    """What is wrong with ``config.data``'s train (required) and dev files, one line each."""
    out = []
    for key in ("train_file", "dev_file"):
        try:
            resolve_data_file(config.data, key, required=key == "train_file")
        except (FileNotFoundError, IsADirectoryError, ValueError) as e:
            out.append(str(e).splitlines()[0] + " (get DPR's files from https://dl.fbaipublicfiles.com/dpr/ "
                       "with python -m dense_cf.cli.prepare, docs/datasets.md; or --config=configs/demo.py)")
    return out


def load_biencoder_split(path: str, tokenizer, *, cache_dir: str | None, max_q_len: int,
                         max_p_len: int, max_hard: int, answer_mode: str = "string",
                         evidence_file: str | None = None, max_examples: int = 0,
                         fraction: float = 1.0, fraction_seed: int = 0) -> Preprocessed:
    """Reads + tokenises a DPR biencoder file, reusing a cache keyed by file and tokenizer.

    ``fraction`` < 1 keeps the uniform random subset ``dense_cf.datasets.subsets.subset_mask(N,
    fraction, fraction_seed)`` of the N valid records (after ``max_examples``), in file order:
    the same nested subsets that ``python -m dense_cf.cli.stats`` reports on (docs/method.md §7).
    """
    if not os.path.exists(path):
        raise FileNotFoundError(f"biencoder file not found: {path}")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"train fraction must be in (0, 1], got {fraction} (for {path})")
    # Pseudo-evidence (EADPR §3.1): records for other files are dropped here, questions are
    # checked while streaming (dense_cf.mining.evidence.annotate). Keys are file example indices.
    matcher = EvidenceMatcher(evidence_file, path) if evidence_file else None
    evidence = matcher.sentences if matcher else None
    key = _fingerprint(path, tokenizer, max_q_len=max_q_len, max_p_len=max_p_len, max_hard=max_hard,
                       answer_mode=answer_mode, max_examples=max_examples,
                       evidence=matcher.fingerprint if matcher else None,
                       # only when subsetting: full-file cache keys stay as they were
                       **({"fraction": fraction, "fraction_seed": fraction_seed}
                          if fraction < 1.0 else {}))
    cache = os.path.join(cache_dir, f"{os.path.basename(path)}.{key}.npz") if cache_dir else None
    if cache and os.path.exists(cache):
        logging.info("loading tokenised cache %s", cache)
        return Preprocessed.load(cache)
    report = SkipReport()
    it = iter_biencoder(path, skip_bad=True, report=report)
    if matcher:
        it = matcher.wrap(it)
    if max_examples:
        it = (ex for i, ex in zip(range(max_examples), it))
    subset = None
    if fraction < 1.0:  # two passes: the subset is a permutation of the N valid records
        n_valid = sum(1 for _ in zip(range(max_examples or 2**62),
                                     iter_biencoder(path, skip_bad=True)))
        subset = subset_mask(n_valid, fraction, fraction_seed)
        it = (ex for ex, keep in zip(it, subset) if keep)
        if evidence:  # evidence is keyed by file example index: renumber into the subset
            new_index = np.cumsum(subset) - 1
            evidence = {int(new_index[i]): s for i, s in evidence.items()
                        if 0 <= i < n_valid and subset[i]}
    data = preprocess(it, tokenizer, max_q_len=max_q_len, max_p_len=max_p_len, max_hard=max_hard,
                      answer_mode=answer_mode, evidence=evidence)
    data.stats["skipped"] = report.total
    if matcher:
        data.stats.update(matcher.stats())
    if subset is not None:
        data.stats["train_fraction"] = {"fraction": fraction, "seed": fraction_seed,
                                        "of_examples": int(len(subset))}
    data.stats["skip_summary"] = report.summary()
    if report.total:
        report.log()
    logging.info("%s: %s", path, {k: v for k, v in data.stats.items() if k != "skip_summary"})
    if cache:
        os.makedirs(cache_dir, exist_ok=True)
        data.save(cache)
    return data


@dataclasses.dataclass(frozen=True)
class PipelineSpec:
    """Static shape/strategy settings of a batch."""

    global_batch: int
    max_q_len: int
    max_p_len: int
    num_hard: int = 1
    strategy: str = "sentence"     # or "none": no counterfactual in the batch
    window: int = 5
    pad_id: int = 0
    sep_id: int = 102
    seed: int = 0
    shuffle: bool = True


def steps_per_epoch(num_examples: int, global_batch: int) -> int:
    return num_examples // global_batch


def example_fn(data: Preprocessed, spec: PipelineSpec) -> Callable[[int, int], dict[str, np.ndarray]]:
    """``(epoch, i) -> example i's arrays`` (numpy; the one per-example logic of both pipelines)."""
    h, lp = spec.num_hard, spec.max_p_len

    def passage(pid: int) -> tuple[np.ndarray, np.ndarray]:
        return source.fix_len(data.body.row(pid), lp, spec.pad_id, spec.sep_id)

    def fn(epoch: int, i: int) -> dict[str, np.ndarray]:
        out = {}
        out["q_ids"], out["q_mask"] = source.fix_len(data.q.row(i), spec.max_q_len, spec.pad_id,
                                                     None)
        pid = int(data.pos_pid[i])
        out["pos_ids"], out["pos_mask"] = passage(pid)
        cand = data.hard.row(i)
        if spec.shuffle:  # DPR samples hard negatives at random each epoch.
            cand = cand[source.example_rng(spec.seed, epoch, i).permutation(len(cand))]
        k = min(len(cand), h)
        out["hard_ids"] = np.full((h, lp), spec.pad_id, np.int32)
        out["hard_mask"] = np.zeros((h, lp), np.int32)
        for j in range(k):
            out["hard_ids"][j], out["hard_mask"][j] = passage(int(cand[j]))
        for j in range(k, h):  # an empty slot holds passage 0, masked out by hard_valid
            out["hard_ids"][j], out["hard_mask"][j] = passage(0)
        out["hard_valid"] = np.arange(h) < k
        if spec.strategy != "none":
            drop, valid = cf_lib.drop_mask(data.sent.row(pid), data.pos_ans.row(i), spec.strategy,
                                           window=spec.window,
                                           evidence_sent=int(data.evidence_sent[i]))
            out["cf_ids"], out["cf_mask"] = source.fix_len(data.body.row(pid)[~drop], lp,
                                                           spec.pad_id, spec.sep_id)
            out["cf_valid"] = np.asarray(valid)
        return out

    return fn


def batch_source(data: Preprocessed, spec: PipelineSpec, process_index: int = 0,
                 process_count: int = 1) -> source.BatchSource:
    """Host ``process_index``'s batch of each global step (``inputs.source``)."""
    return source.BatchSource(data.num_examples, spec.global_batch, spec.seed, spec.shuffle,
                              source.stack_examples(example_fn(data, spec)),
                              process_index=process_index, process_count=process_count)


def make_dataset(data: Preprocessed, spec: PipelineSpec, *, start_step: int = 0,
                 process_index: int = 0, process_count: int = 1, repeat: bool = True,
                 pipeline: str = "tfdata") -> Any:
    """Host-local batches of the global batch sequence, starting at global step ``start_step``
    (``as_numpy_iterator()``; ``pipeline``: tfdata or grain, the same batches)."""
    return source.make_dataset(batch_source(data, spec, process_index, process_count),
                               start_step=start_step, repeat=repeat, pipeline=pipeline)


def make_eval_dataset(data: Preprocessed, spec: PipelineSpec, batch_size: int = 256
                      ) -> Iterator[dict[str, np.ndarray]]:
    """Every example once, in order, tail included (batches may be short; host code pads)."""
    spec = dataclasses.replace(spec, shuffle=False)
    return source.eval_batches(example_fn(data, spec), data.num_examples, batch_size)


class BatchIterator(source.BatchIterator):
    """Numpy batches of one host with a resumable state (``inputs.source.BatchIterator``)."""

    _source = staticmethod(batch_source)


def spec_from_config(config, tokenizer, *, shuffle: bool = True,
                     counterfactual: bool = False) -> PipelineSpec:
    """The batch spec of a DPR-format run; ``counterfactual``: batches carry p* (the method's
    loss uses it), built with ``config.data.counterfactual``."""
    strategy = config.data.counterfactual if counterfactual else "none"
    if counterfactual and strategy == "none":
        raise ValueError("the loss uses counterfactuals (λ/τ1/τ2 > 0) but "
                         "config.data.counterfactual is 'none'")
    return PipelineSpec(
        global_batch=config.train.global_batch, max_q_len=config.data.max_q_len,
        max_p_len=config.data.max_p_len, num_hard=config.data.num_hard, strategy=strategy,
        window=config.data.window, pad_id=tokenizer.token_to_id("[PAD]") or 0,
        sep_id=tokenizer.token_to_id("[SEP]"), seed=config.seed, shuffle=shuffle)
