"""DCSR input pipeline: ``<sent>``-marked passages and sentence-level samples (docs/method.md §4).

Passage format (the paper's ``[CLS] <sent> s1 <sent> s2 ... [SEP]`` with DPR's title kept)::

    [CLS] title [SEP] <sent> s1 <sent> s2 ... [SEP]        (title=True, default)
    [CLS] <sent> s1 <sent> s2 ... [SEP]                    (title=False: the paper's literal form)

The title stays by default because DPR, whose corpus and numbers DCSR is compared with, encodes
it, and it gives every sentence its article context; ``config.dcsr.title=False`` drops it.
The vector of sentence j is the passage encoder's output at its marker.

Data path: the DPR cache of :mod:`dense_cf.inputs.dpr` (question ids, passage table with a
per-token sentence id, per-token answer flags of p+, BM25 negatives) is reused as is; markers are
inserted in numpy once per load (:func:`insert_markers`, vectorised over the whole table), so
DCSR needs no tokenisation code or cache format of its own.

Truncation: a passage keeps ``max_p_len - 1`` tokens plus a final [SEP]. A marker is *valid*
when it and at least the first word piece of its sentence are inside that window (position
``<= max_p_len - 3``); invalid markers are never sampled and never exported.

Sampling per question (stateless RNG keyed by (seed, epoch, example), so batch k is a pure
function of (seed, k, hosts) and resumes exactly, as in the DPR pipeline):

* positive: a random valid sentence of p+ holding an answer match (paper §3.2.1). If none (no
  answer match, or the answer sentences fell outside the window), the first sentence of p+ is
  used (its [CLS] if p+ has no valid sentence at all); such examples are counted in
  ``stats["no_answer_sentence"]``. Dropping them would bias the training set towards easy
  matches; DPR trains on them too (with the whole passage as positive).
* negatives (``negatives`` = the paper's Table 4 variants):
    - ``in_passage`` (default, "+1 in-passage & +1 BM25 random"): a random valid non-answer
      sentence of p+ (if none: another random sentence of the BM25 passage, distinct from the
      next one; if that does not exist either the slot is masked) and a random sentence of the
      BM25 negative passage;
    - ``bm25`` ("+1 BM25 random"): one random sentence of the BM25 passage;
    - ``bm25x2`` ("+2 BM25 random"): one random sentence from each of two BM25 passages;
    - ``in_batch``: no sampled negatives (in-batch sentences only).
  A missing BM25 passage masks its slots (``neg_valid=False``; counted).
* in-batch negatives: every other question's positive and every sampled negative sentence of
  the global batch, exactly as in DPR's loss (``dense_cf.losses.contrastive_loss``).

Batch layout (host-local numpy; passages are encoded once, sentence vectors are gathered)::

    q_ids, q_mask          int32 [b, Lq]      ([CLS] <sent> q [SEP] with question_prefix)
    pos_ids, pos_mask      int32 [b, Lp]      p+ with markers
    hard_ids, hard_mask    int32 [b, h, Lp]   BM25 passages (h = 1, 2 for bm25x2, 0 in_batch)
    pos_pos                int32 [b]          marker position of the positive sentence in p+
    neg_src, neg_pos       int32 [b, m]       passage (0 = p+, j = hard j-1) and marker position
    neg_valid             bool  [b, m]       negative sentence present
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
from absl import logging

from dense_cf.inputs import dpr as pipeline
from dense_cf.inputs import source
from dense_cf.inputs.dpr import Preprocessed
from dense_cf.inputs.tokens import Ragged, insert_markers, marker_valid  # noqa: F401
from dense_cf.models.tokenizer import SENT_TOKEN

NEGATIVES = ("in_passage", "bm25", "bm25x2", "in_batch")
# (BM25 passages encoded per question, negative sentences per question)
_SHAPES = {"in_passage": (1, 2), "bm25": (1, 1), "bm25x2": (2, 2), "in_batch": (0, 0)}

steps_per_epoch = pipeline.steps_per_epoch


# --------------------------------------------------------------------------- marker insertion


@dataclasses.dataclass
class DcsrData:
    """The DPR cache plus the marked passage table and per-example answer sentences."""

    base: Preprocessed
    body: Ragged           # [P, *] marked passages (no final [SEP])
    marker_pos: Ragged     # [P, n_p] marker positions in ``body`` rows
    marker_sid: Ragged     # [P, n_p] sentence id (of the base table) of each marker
    ans_marker: Ragged     # [N, *] indices (into the positive's markers) of answer sentences
    stats: dict

    @property
    def num_examples(self) -> int:
        return self.base.num_examples


def from_preprocessed(base: Preprocessed, sent_id: int, *, max_p_len: int, title: bool = True,
                      ) -> DcsrData:
    """Marks the passage table of a DPR cache and finds each example's answer sentences.

    ``stats`` adds: ``no_answer_sentence`` (p+ has no answer sentence inside ``max_p_len``:
    trained with the fallback positive), ``no_in_passage_negative`` (every valid sentence of p+
    holds an answer, or there is no answer sentence), ``hard_without_sentences`` (BM25 passages
    without a valid sentence), ``mean_sentences_per_passage``.
    """
    body, m_pos, m_sid = insert_markers(base.body, base.sent, sent_id, title=title)
    ans_rows: list[np.ndarray] = []
    no_ans = no_inp = 0
    for i in range(base.num_examples):
        pid = int(base.pos_pid[i])
        flags = base.pos_ans.row(i).astype(bool)
        sids = base.sent.row(pid)
        ans_sids = np.unique(sids[flags & (sids >= 0)])
        mk_sid = m_sid.row(pid)
        idx = np.flatnonzero(np.isin(mk_sid, ans_sids)).astype(np.int32)
        ans_rows.append(idx)
        valid = marker_valid(m_pos.row(pid), max_p_len)
        is_ans = np.zeros(len(valid), bool)
        is_ans[idx] = True
        if not (valid & is_ans).any():
            no_ans += 1
            no_inp += 1
        elif not (valid & ~is_ans).any():
            no_inp += 1
    hard_pids = np.unique(base.hard.values) if len(base.hard.values) else np.zeros(0, np.int64)
    empty_hard = sum(int(not marker_valid(m_pos.row(int(p)), max_p_len).any()) for p in hard_pids)
    n_sent = np.diff(m_pos.row_splits)
    stats = dict(base.stats)
    stats.update(no_answer_sentence=no_ans, no_in_passage_negative=no_inp,
                 hard_without_sentences=empty_hard,
                 mean_sentences_per_passage=float(n_sent.mean()) if len(n_sent) else 0.0)
    logging.info("DCSR data: %d examples, %s", base.num_examples,
                 {k: stats[k] for k in ("no_answer_sentence", "no_in_passage_negative",
                                        "no_hard_negatives", "hard_without_sentences",
                                        "mean_sentences_per_passage") if k in stats})
    return DcsrData(base=base, body=body, marker_pos=m_pos, marker_sid=m_sid,
                    ans_marker=Ragged.from_rows(ans_rows), stats=stats)


# --------------------------------------------------------------------------- batches


@dataclasses.dataclass(frozen=True)
class DcsrSpec:
    """Static settings of a DCSR batch (see the module docstring)."""

    global_batch: int
    max_q_len: int
    max_p_len: int
    sent_id: int
    negatives: str = "in_passage"
    question_prefix: bool = True
    pad_id: int = 0
    sep_id: int = 102
    seed: int = 0
    shuffle: bool = True

    def __post_init__(self):
        if self.negatives not in NEGATIVES:
            raise ValueError(f"config.dcsr.negatives must be one of {NEGATIVES}, got "
                             f"{self.negatives!r}")
        if self.max_p_len < 4:
            raise ValueError(f"max_p_len={self.max_p_len} leaves no room for a sentence")

    @property
    def num_hard(self) -> int:
        """BM25 passages encoded per question."""
        return _SHAPES[self.negatives][0]

    @property
    def num_neg(self) -> int:
        """Sampled negative sentences per question."""
        return _SHAPES[self.negatives][1]


def spec_from_config(config, tokenizer, *, shuffle: bool = True,
                     counterfactual: bool = False) -> DcsrSpec:
    """The batch spec of a DCSR run (``counterfactual`` is unused: DCSR has no p*)."""
    del counterfactual
    if config.loss.lam or config.loss.tau1 or config.loss.tau2:
        raise ValueError("method 'dcsr' trains with the DPR NLL over sentences (docs/method.md §4): set "
                         "config.loss.lam = tau1 = tau2 = 0 (counterfactual terms are passage-level)")
    sent_id = tokenizer.token_to_id(SENT_TOKEN)
    if sent_id is None:
        raise ValueError(f"the tokenizer has no {SENT_TOKEN} token: build it with "
                         "dense_cf.models.tokenizer.tokenizer_for_run (method 'dcsr')")
    return DcsrSpec(global_batch=config.train.global_batch, max_q_len=config.data.max_q_len,
                    max_p_len=config.data.max_p_len, sent_id=sent_id,
                    negatives=config.dcsr.negatives, question_prefix=config.dcsr.question_prefix,
                    pad_id=tokenizer.token_to_id("[PAD]") or 0,
                    sep_id=tokenizer.token_to_id("[SEP]"), seed=config.seed, shuffle=shuffle)


def prepare(config, tokenizer, data: Preprocessed | None) -> DcsrData | None:
    """A loaded DPR split as DCSR data (``None`` passes through)."""
    if data is None:
        return None
    spec = spec_from_config(config, tokenizer)
    return from_preprocessed(data, spec.sent_id, max_p_len=config.data.max_p_len,
                             title=config.dcsr.title)


def _question(q: np.ndarray, spec: DcsrSpec) -> tuple[np.ndarray, np.ndarray]:
    if spec.question_prefix:  # the authors' code prefixes questions with "<sent> " (docs/method.md §4)
        q = np.concatenate([q[:1], np.asarray([spec.sent_id], q.dtype), q[1:-1]])
        return source.fix_len(q, spec.max_q_len, spec.pad_id, spec.sep_id)
    return source.fix_len(q, spec.max_q_len, spec.pad_id, None)


def _choose(mask: np.ndarray, rng: np.random.Generator) -> int:
    """Index of a uniformly random True entry of ``mask`` (-1 if none)."""
    idx = np.flatnonzero(mask)
    return int(idx[rng.integers(len(idx))]) if len(idx) else -1


def example_fn(data: DcsrData, spec: DcsrSpec) -> Callable[[int, int], dict[str, np.ndarray]]:
    """``(epoch, i) -> example i's arrays`` (numpy; module docstring's sampling)."""
    h, lp = spec.num_hard, spec.max_p_len

    def fn(epoch: int, i: int) -> dict[str, np.ndarray]:
        def rng(salt: int) -> np.random.Generator:
            return source.example_rng(spec.seed, epoch, i, salt)

        out = {}
        out["q_ids"], out["q_mask"] = _question(data.base.q.row(i), spec)
        pid = int(data.base.pos_pid[i])
        out["pos_ids"], out["pos_mask"] = source.fix_len(data.body.row(pid), lp, spec.pad_id,
                                                         spec.sep_id)
        mpos = data.marker_pos.row(pid)
        valid = marker_valid(mpos, lp)
        is_ans = np.isin(np.arange(len(mpos)), data.ans_marker.row(i))
        k_pos = _choose(valid & is_ans, rng(0))
        mpos_p = np.concatenate([mpos, [0]]).astype(np.int32)  # index -1 -> position 0 ([CLS])
        first_valid = int(mpos_p[0]) if valid.any() else 0
        out["pos_pos"] = np.int32(mpos_p[k_pos] if k_pos >= 0 else first_valid)

        # BM25 passages (shuffled per epoch as DPR does, then the first h).
        cand = data.base.hard.row(i)
        if spec.shuffle:
            cand = cand[rng(1).permutation(len(cand))]
        n_h = min(len(cand), h)
        chosen = np.zeros(h, np.int64)
        chosen[:n_h] = cand[:n_h]
        out["hard_ids"], out["hard_mask"] = source.fix_rows(
            [data.body.row(int(p)) for p in chosen], lp, spec.pad_id, spec.sep_id)

        def hard_pick(j: int, salt: int, exclude: int = -1) -> tuple[int, int, bool]:
            """(src, position, valid) of a random valid sentence of BM25 passage j."""
            if j >= h:
                return 0, 0, False
            hp = data.marker_pos.row(int(chosen[j]))
            ok = marker_valid(hp, lp) & (hp != exclude) & (j < n_h)
            k = _choose(ok, rng(salt))
            return j + 1, int(hp[k]) if k >= 0 else 0, k >= 0

        slots = []
        if spec.negatives == "in_passage":
            bm_src, bm_pos, bm_ok = hard_pick(0, 2)
            # In-passage negatives only when the answer sentence is known (else "non-answer"
            # is undefined), from p+'s valid non-answer sentences.
            k_in = _choose(valid & ~is_ans & (k_pos >= 0), rng(3))
            fb_src, fb_pos, fb_ok = hard_pick(0, 4, exclude=bm_pos)
            has_in = k_in >= 0
            slots.append((0 if has_in else fb_src, int(mpos_p[k_in]) if has_in else fb_pos,
                          has_in or fb_ok))
            slots.append((bm_src, bm_pos, bm_ok))
        elif spec.negatives in ("bm25", "bm25x2"):
            for j in range(h):
                slots.append(hard_pick(j, 2 + j))
        out["neg_src"] = np.asarray([sl[0] for sl in slots], np.int32)
        out["neg_pos"] = np.asarray([sl[1] for sl in slots], np.int32)
        out["neg_valid"] = np.asarray([sl[2] for sl in slots], bool)
        return out

    return fn


def batch_source(data: DcsrData, spec: DcsrSpec, process_index: int = 0,
                 process_count: int = 1) -> source.BatchSource:
    """Host ``process_index``'s DCSR batch of each global step (the order and resume contract of
    :mod:`dense_cf.inputs.source`, as the DPR pipeline)."""
    return source.BatchSource(data.num_examples, spec.global_batch, spec.seed, spec.shuffle,
                              source.stack_examples(example_fn(data, spec)),
                              process_index=process_index, process_count=process_count)


def make_dataset(data: DcsrData, spec: DcsrSpec, *, start_step: int = 0, process_index: int = 0,
                 process_count: int = 1, repeat: bool = True, pipeline: str = "tfdata") -> Any:
    """Host-local DCSR batches from global step ``start_step`` (``as_numpy_iterator()``)."""
    return source.make_dataset(batch_source(data, spec, process_index, process_count),
                               start_step=start_step, repeat=repeat, pipeline=pipeline)


class BatchIterator(source.BatchIterator):
    """Resumable DCSR batches (``inputs.source.BatchIterator``)."""

    _source = staticmethod(batch_source)
