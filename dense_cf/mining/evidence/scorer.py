"""QA scorers: a confidence for "answer given (question, context)" over batches of candidates.

EADPR §3.1 (docs/method.md §2 ``evidence``) ranks leave-one-out candidates by a QA model's confidence
P(a | q, p_i*). A scorer maps :class:`QAItem`\\ s to one float each, higher = more confident;
only the ranking among one example's candidates matters.

* :class:`T5Scorer` — the paper's method: a generative QA model (UnifiedQA-T5 or any HF T5
  checkpoint with ``tokenizer.json``) scoring the answer by teacher forcing. Input is UnifiedQA's
  format ``"question \\n context"`` (a literal backslash-n, lower-cased, as UnifiedQA was trained),
  target ``"answer</s>"``. Score = the length-normalised log-likelihood (mean log-probability
  per answer token incl. ``</s>``, i.e. minus log perplexity, which is what EADPR ranks by);
  ``length_norm=False`` gives the total log-likelihood log P(a | q, p). For one answer both rank
  an example's candidates identically (same answer tokens); they differ only in how several
  answer aliases compare, where the per-token mean does not favour short aliases.
* :class:`DenseSimilarityScorer` — the offline fallback with what ships here (MiniLM,
  all-MiniLM-L6-v2 through our Flax BERT, mean pooling, cosine). It is NOT a probability of the
  answer. Default ``mode="answer_gain"``: cos(e("question answer"), e(context)) −
  cos(e("question"), e(context)), how much adding the answer to the question raises the
  context's similarity, a crude stand-in for "the context supports this answer to this
  question". ``mode="qa"`` keeps only the first term; it is dominated by topical overlap with
  the question, so it tends to remove the sentence that restates the question's entity rather
  than the one with the answer (measured in docs/evidence.md). Use it for demos, tests and
  machines without a QA model; use T5 for the method.

Batching: items are sorted by length and cut into fixed-size batches whose lengths are
rounded up to a multiple of ``len_multiple`` (a handful of compiled shapes); scores come back in
input order, and a score does not depend on what else is in the batch (tests check this).
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import Any, Callable, Sequence

import jax
import numpy as np

from dense_cf.models.bert import BertConfig, BertEncoder
from dense_cf.models.dual_encoder import pool
from dense_cf.models.hf import load_hf_bert_params, resolve_model_dir
from dense_cf.models.hf_t5 import load_t5
from dense_cf.models.t5 import answer_log_likelihood
from dense_cf.models.tokenizer import load_tokenizer

UNIFIEDQA_SEP = " \\n "  # UnifiedQA's literal separator "question \n context" (backslash + n)


@dataclasses.dataclass(frozen=True)
class QAItem:
    question: str
    answer: str
    context: str


class QAScorer(abc.ABC):
    """Confidence of ``answer`` given ``question`` and ``context``; higher = more confident."""

    name: str = "scorer"

    @abc.abstractmethod
    def score(self, items: Sequence[QAItem]) -> np.ndarray:
        """float64 [len(items)] in the order of ``items``."""


def bucket_length(n: int, multiple: int, cap: int) -> int:
    """``n`` rounded up to a multiple of ``multiple``, at most ``cap`` (and at least 1)."""
    return max(1, min(cap, int(math.ceil(n / multiple)) * multiple))


def pad_rows(rows: Sequence[Sequence[int]], length: int, batch: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids int32 [batch, length], mask int32) with rows left-aligned, extra rows all padding."""
    ids = np.full((batch, length), pad, np.int32)
    mask = np.zeros((batch, length), np.int32)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
        mask[i, :len(r)] = 1
    return ids, mask


def _truncate_keep_last(ids: list[int], max_len: int, last: int | None) -> list[int]:
    """Cut to ``max_len``, keeping (or adding) the closing special token ``last``."""
    if last is not None and (not ids or ids[-1] != last):
        ids = ids + [last]
    if len(ids) > max_len:
        ids = ids[:max_len - 1] + ([last] if last is not None else ids[max_len - 1:max_len])
    return ids


def _batched(order: np.ndarray, batch_size: int):
    for start in range(0, len(order), batch_size):
        yield order[start:start + batch_size]


class T5Scorer(QAScorer):
    """Teacher-forced answer log-likelihood of a Flax T5 (see the module docstring)."""

    def __init__(self, model, params, tokenizer, *, batch_size: int = 32, max_input_len: int = 512,
                 max_answer_len: int = 32, length_norm: bool = True, lowercase: bool = True,
                 len_multiple: int = 64, name: str = "t5"):


        self.model, self.tokenizer = model, tokenizer
        self.params = jax.device_put(params)
        self.batch_size, self.max_input_len, self.max_answer_len = batch_size, max_input_len, max_answer_len
        self.length_norm, self.lowercase, self.len_multiple = length_norm, lowercase, len_multiple
        self.name = name
        self.eos = model.config.eos_token_id
        self.pad = model.config.pad_token_id
        self._fn = jax.jit(lambda p, ids, mask, labels: answer_log_likelihood(model, p, ids, mask, labels))

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, dtype: str = "float32", **kw: Any) -> "T5Scorer":

        model, params, tok = load_t5(name_or_path, dtype=dtype)
        return cls(model, params, tok, name=f"t5:{name_or_path}", **kw)

    def _text(self, s: str) -> str:
        s = " ".join(s.split())
        return s.lower() if self.lowercase else s

    def encode(self, items: Sequence[QAItem]) -> tuple[list[list[int]], list[list[int]]]:
        """(input ids, label ids), each ending in ``</s>``, truncated to the configured lengths."""
        inputs = [self._text(it.question) + UNIFIEDQA_SEP + self._text(it.context) for it in items]
        answers = [self._text(it.answer) for it in items]
        enc_in = self.tokenizer.encode_batch(inputs) if inputs else []
        enc_ans = self.tokenizer.encode_batch(answers) if answers else []
        x = [_truncate_keep_last(list(e.ids), self.max_input_len, self.eos) for e in enc_in]
        y = [_truncate_keep_last(list(e.ids), self.max_answer_len, self.eos) for e in enc_ans]
        return x, y

    def score(self, items: Sequence[QAItem]) -> np.ndarray:
        x, y = self.encode(items)
        return self.score_ids(x, y)

    def score_ids(self, inputs: Sequence[Sequence[int]], labels: Sequence[Sequence[int]]) -> np.ndarray:
        """Scores pre-tokenised (input, label) id lists (the tests drive the tiny model this way)."""
        out = np.zeros(len(inputs), np.float64)
        order = np.argsort([-len(r) for r in inputs], kind="stable")
        for idx in _batched(order, self.batch_size):
            rows = [inputs[i] for i in idx]
            labs = [labels[i] for i in idx]
            li = bucket_length(max(len(r) for r in rows), self.len_multiple, self.max_input_len)
            ll = bucket_length(max(len(r) for r in labs), 8, self.max_answer_len)
            ids, mask = pad_rows(rows, li, self.batch_size, self.pad)
            lab = np.full((self.batch_size, ll), -100, np.int32)
            for j, r in enumerate(labs):
                lab[j, :len(r)] = r
            total, mean = self._fn(self.params, ids, mask, lab)
            vals = np.asarray(mean if self.length_norm else total, np.float64)
            out[idx] = vals[:len(idx)]
        return out


class DenseSimilarityScorer(QAScorer):
    """Cosine similarity of mean-pooled sentence embeddings (see the module docstring)."""

    MODES = ("answer_gain", "qa")

    def __init__(self, encoder, params, tokenizer, *, batch_size: int = 64, max_len: int = 256,
                 len_multiple: int = 32, mode: str = "answer_gain", name: str = "dense"):

        if mode not in self.MODES:
            raise ValueError(f"mode must be one of {self.MODES}, got {mode!r}")
        self.mode = mode


        self.tokenizer, self.batch_size, self.max_len, self.len_multiple = tokenizer, batch_size, max_len, len_multiple
        self.name = name
        self.params = jax.device_put(params)
        self.sep = tokenizer.token_to_id("[SEP]")
        self.pad = tokenizer.token_to_id("[PAD]") or 0

        def embed(p, ids, mask):
            h = encoder.apply({"params": p}, ids, mask)
            e = pool(h, mask, "mean")
            return e / jax.numpy.maximum(jax.numpy.linalg.norm(e, axis=-1, keepdims=True), 1e-12)

        self._embed: Callable = jax.jit(embed)

    @classmethod
    def from_pretrained(cls, name_or_path: str = "minilm", **kw: Any) -> "DenseSimilarityScorer":

        model_dir = resolve_model_dir(name_or_path)
        config = BertConfig.from_hf_json(model_dir)
        params = load_hf_bert_params(model_dir, config)
        kw.setdefault("max_len", min(256, config.max_position_embeddings))
        name = f"dense:{name_or_path}" + ("" if kw.get("mode", "answer_gain") == "answer_gain" else ":qa")
        return cls(BertEncoder(config), params, load_tokenizer(model_dir), name=name, **kw)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised float32 [len(texts), H]."""
        enc = self.tokenizer.encode_batch(list(texts)) if texts else []
        rows = [_truncate_keep_last(list(e.ids), self.max_len, self.sep) for e in enc]
        out: np.ndarray | None = None
        order = np.argsort([-len(r) for r in rows], kind="stable")
        for idx in _batched(order, self.batch_size):
            batch = [rows[i] for i in idx]
            length = bucket_length(max(len(r) for r in batch), self.len_multiple, self.max_len)
            ids, mask = pad_rows(batch, length, self.batch_size, self.pad)
            e = np.asarray(self._embed(self.params, ids, mask), np.float32)
            if out is None:
                out = np.zeros((len(rows), e.shape[-1]), np.float32)
            out[idx] = e[:len(idx)]
        return out if out is not None else np.zeros((0, 0), np.float32)

    def _cosines(self, queries: Sequence[str], contexts: Sequence[str]) -> np.ndarray:
        """cos(e(queries[n]), e(contexts[n])), each distinct text embedded once."""
        uq, uc = list(dict.fromkeys(queries)), list(dict.fromkeys(contexts))
        q, c = self.embed(uq).astype(np.float64), self.embed(uc).astype(np.float64)
        qi, ci = {t: i for i, t in enumerate(uq)}, {t: i for i, t in enumerate(uc)}
        return np.einsum("nh,nh->n", q[[qi[t] for t in queries]], c[[ci[t] for t in contexts]])

    def score(self, items: Sequence[QAItem]) -> np.ndarray:
        if not items:
            return np.zeros(0, np.float64)
        contexts = [it.context for it in items]
        qa = self._cosines([f"{it.question} {it.answer}" for it in items], contexts)
        if self.mode == "qa":
            return qa
        return qa - self._cosines([it.question for it in items], contexts)


SCORER_HELP = ("minilm (offline dense similarity, answer gain), dense:PATH (any sentence-embedding "
               "BERT dir), minilm-qa / dense-qa:PATH (plain question+answer similarity), "
               "t5:PATH_OR_HUB (generative QA, e.g. t5:allenai/unifiedqa-t5-base)")


def make_scorer(spec: str, *, batch_size: int = 32, length_norm: bool = True, lowercase: bool = True,
                dtype: str = "float32", **kw: Any) -> QAScorer:
    """Builds a scorer from a CLI spec (:data:`SCORER_HELP`). ``length_norm``, ``lowercase``
    (UnifiedQA was trained on lower-cased text) and ``dtype`` (compute dtype) apply to T5 only."""
    if spec in ("minilm", "minilm-qa"):
        mode = "qa" if spec.endswith("-qa") else "answer_gain"
        return DenseSimilarityScorer.from_pretrained("minilm", batch_size=batch_size, mode=mode, **kw)
    kind, _, arg = spec.partition(":")
    if kind in ("dense", "dense-qa") and arg:
        mode = "qa" if kind.endswith("-qa") else "answer_gain"
        return DenseSimilarityScorer.from_pretrained(arg, batch_size=batch_size, mode=mode, **kw)
    if kind == "t5" and arg:
        return T5Scorer.from_pretrained(arg, batch_size=batch_size, length_norm=length_norm,
                                        lowercase=lowercase, dtype=dtype, **kw)
    raise ValueError(f"unknown scorer {spec!r}; expected {SCORER_HELP}")
