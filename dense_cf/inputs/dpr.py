"""Training input pipeline: tokenise once on the host, then a deterministic tf.data pipeline.

Preprocessing (:func:`preprocess`) turns DPR biencoder examples into ragged token arrays, cached
as ``.npz``: questions, a de-duplicated passage table (``[CLS] title [SEP] text`` word pieces with
a per-token sentence id), per-example answer flags over the positive's tokens, and hard-negative
passage ids. Counterfactual masks (docs/method.md §2) are derived on the fly inside tf.data
(:func:`dense_cf.inputs.cf_masks.drop_mask`), so one cache serves every strategy.

Order and resumability: epoch ``e`` visits ``stateless_shuffle(range(N), seed=(seed, e))``; the
first ``steps_per_epoch * B`` indices form global batches ``[steps, hosts, B / hosts]`` and host
``h`` reads its column. Batch ``k`` of the run is therefore a pure function of
``(seed, k, hosts)``, and resuming at step ``k`` reproduces exactly the batches of an uninterrupted
run (the skip happens on indices, before any tokens are gathered).
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
from dense_cf.inputs.lazy import tf
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


def global_batches(num_examples: int, global_batch: int, example_fn: Callable[[], Callable], *,
                   seed: int, shuffle: bool, start_step: int = 0, process_index: int = 0,
                   process_count: int = 1, repeat: bool = True) -> tf.data.Dataset:
    """Host-local batches of ``example_fn()(epoch, i)`` in the global batch order, from global
    step ``start_step`` (shared by the DPR/PiCL and DCSR pipelines).

    Epoch ``e`` is a stateless shuffle of ``range(num_examples)`` seeded by ``(seed, e)``, cut
    into ``num_examples // global_batch`` global batches (the tail is dropped); host ``p`` takes
    column ``p`` of every batch, so global batch k holds the same examples for any host count.
    ``example_fn`` is called (building the per-example tf function) after the checks.
    """
    if global_batch % process_count:
        raise ValueError(f"global_batch {global_batch} not divisible by {process_count} hosts")
    n = num_examples
    spe = steps_per_epoch(n, global_batch)
    if spe == 0:
        raise ValueError(f"{n} examples are fewer than one global batch of {global_batch}")
    local = global_batch // process_count
    seed_t = tf.constant(seed, tf.int64)

    def epoch_indices(epoch):
        idx = tf.range(n, dtype=tf.int64)
        if shuffle:
            idx = tf.random.experimental.stateless_shuffle(idx, seed=tf.stack([seed_t, epoch]))
        idx = tf.reshape(idx[:spe * global_batch], [spe, process_count, local])[:, process_index]
        idx = tf.reshape(idx, [-1])
        return tf.data.Dataset.from_tensor_slices((tf.fill(tf.shape(idx), epoch), idx))

    start_epoch, offset = divmod(start_step, spe)
    epochs = tf.data.Dataset.range(start_epoch, start_epoch + 1 if not repeat else (1 << 62))
    ds = epochs.flat_map(epoch_indices).skip(offset * local)
    ds = ds.map(example_fn(), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.batch(local, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def make_dataset(data: Preprocessed, spec: PipelineSpec, *, start_step: int = 0,
                 process_index: int = 0, process_count: int = 1, repeat: bool = True) -> tf.data.Dataset:
    """Host-local batches of the global batch sequence, starting at global step ``start_step``."""
    return global_batches(data.num_examples, spec.global_batch, lambda: _example_fn(data, spec),
                          seed=spec.seed, shuffle=spec.shuffle, start_step=start_step,
                          process_index=process_index, process_count=process_count,
                          repeat=repeat)


def make_eval_dataset(data: Preprocessed, spec: PipelineSpec, batch_size: int = 256) -> tf.data.Dataset:
    """Every example once, in order, tail included (batches may be short; host code pads)."""
    spec = dataclasses.replace(spec, shuffle=False)
    ds = tf.data.Dataset.range(data.num_examples).map(lambda i: (tf.constant(0, tf.int64), i))
    ds = ds.map(_example_fn(data, spec), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def _fix_len(ids, length: int, pad_id: int, sep_id: int | None):
    """Truncate (keeping room for a final [SEP] when given) and pad to ``length``."""
    if sep_id is not None:
        ids = tf.concat([ids[:length - 1], [sep_id]], axis=0)
    else:
        ids = ids[:length]
    mask = tf.ones_like(ids)
    pad = length - tf.shape(ids)[0]
    return tf.pad(ids, [[0, pad]], constant_values=pad_id), tf.pad(mask, [[0, pad]])


def _example_fn(data: Preprocessed, spec: PipelineSpec):
    q_rt, body_rt, sent_rt = data.q.to_tf(), data.body.to_tf(), data.sent.to_tf()
    ans_rt, hard_rt = data.pos_ans.to_tf(), data.hard.to_tf()
    pos_pid = tf.constant(data.pos_pid)
    ev = tf.constant(data.evidence_sent)
    h, lp = spec.num_hard, spec.max_p_len

    def passage(pid):
        return _fix_len(body_rt[pid], lp, spec.pad_id, spec.sep_id)

    def fn(epoch, i):
        out = {}
        out["q_ids"], out["q_mask"] = _fix_len(q_rt[i], spec.max_q_len, spec.pad_id, None)
        pid = pos_pid[i]
        out["pos_ids"], out["pos_mask"] = passage(pid)
        if h:
            cand = hard_rt[i]
            if spec.shuffle:  # DPR samples hard negatives at random each epoch.
                cand = tf.random.experimental.stateless_shuffle(
                    cand, seed=tf.stack([epoch * 1_000_003 + tf.constant(spec.seed, tf.int64), i]))
            k = tf.minimum(tf.shape(cand)[0], h)
            chosen = tf.pad(cand[:k], [[0, h - k]])
            ids, masks = tf.map_fn(passage, chosen, fn_output_signature=(tf.int32, tf.int32))
            out["hard_ids"], out["hard_mask"] = ids, masks
            out["hard_valid"] = tf.range(h) < k
        else:
            out["hard_ids"] = tf.zeros([0, lp], tf.int32)
            out["hard_mask"] = tf.zeros([0, lp], tf.int32)
            out["hard_valid"] = tf.zeros([0], tf.bool)
        if spec.strategy != "none":
            body = body_rt[pid]
            drop, valid = cf_lib.drop_mask(sent_rt[pid], ans_rt[i], spec.strategy,
                                           window=spec.window, evidence_sent=ev[i])
            out["cf_ids"], out["cf_mask"] = _fix_len(tf.boolean_mask(body, ~drop), lp, spec.pad_id,
                                                     spec.sep_id)
            out["cf_valid"] = valid
        return out

    return fn


class BatchIterator:
    """Numpy batches of one host with a resumable state (the global step)."""

    def __init__(self, data: Preprocessed, spec: PipelineSpec, *, start_step: int = 0,
                 process_index: int = 0, process_count: int = 1):
        self.data, self.spec = data, spec
        self.process_index, self.process_count = process_index, process_count
        self.step = start_step
        self._it = None

    def _fingerprint(self) -> dict[str, Any]:
        # The host count is not part of it: global batch k holds the same examples for any number
        # of hosts (each host reads a column of it), so a run may resume on another host count.
        return {"num_examples": self.data.num_examples, "global_batch": self.spec.global_batch,
                "seed": self.spec.seed}

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self

    # The dataset builder: subclasses (DCSR) swap in theirs and keep the resumable state.
    _make_dataset = staticmethod(make_dataset)

    def __next__(self) -> dict[str, np.ndarray]:
        if self._it is None:
            ds = self._make_dataset(self.data, self.spec, start_step=self.step,
                                    process_index=self.process_index,
                                    process_count=self.process_count)
            self._it = ds.as_numpy_iterator()
        batch = next(self._it)
        self.step += 1
        return batch

    def get_state(self) -> dict[str, Any]:
        return {"step": self.step, "process_count": self.process_count, **self._fingerprint()}

    def set_state(self, state: dict[str, Any]) -> None:
        mine = self._fingerprint()
        diff = {k: (state.get(k), v) for k, v in mine.items() if state.get(k) != v}
        if diff:
            raise ValueError(f"data-iterator state does not match this run (saved, now): {diff}")
        saved_hosts = state.get("process_count", self.process_count)
        if saved_hosts != self.process_count:
            logging.info("resuming a run saved on %s hosts on %d hosts (same global batches)",
                         saved_hosts, self.process_count)
        self.step = int(state["step"])
        self._it = None


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
