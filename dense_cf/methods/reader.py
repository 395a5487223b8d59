"""The extractive reader as a method (docs/readers.md): DPR's reader trained by the shared loop.

``METHOD`` (``config.method="reader"``) is a reader-kind :class:`~dense_cf.methods.base.Method`:
its own network (:class:`~dense_cf.models.reader.ExtractiveReader`, a BERT encoder from any
checkpoint the retrievers read, plus fresh heads), its own data (``config.reader.train_file``:
a retriever's results, :mod:`dense_cf.inputs.reader`), a per-question loss
(:func:`dense_cf.losses.reader_loss`, no all-gather) and :func:`predict`, which
``python -m dense_cf.eval.e2e`` calls to answer questions from ranked passages.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from dense_cf.configs import checks
from dense_cf.inputs import reader as reader_inputs
from dense_cf.inputs.tokens import encode_texts, pad_reader_rows, question_row, reader_passage, reader_row, special_ids
from dense_cf.losses import reader_loss
from dense_cf.methods.base import Inputs, Method, ModelSpec, Prediction, predict_ks
from dense_cf.models import checkpoints
from dense_cf.models.bert import BertConfig, axis_rules_for
from dense_cf.models.dual_encoder import runtime_overrides
from dense_cf.models.hf import resolve_model_dir
from dense_cf.models.reader import ExtractiveReader, best_spans, extend_to_words, head_params, text_mask
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.progress import Progress

__all__ = ["METHOD", "READER_MODEL", "build_reader", "predict", "reader_embed"]

_CHUNK = 2048        # (question, passage) pairs tokenised and read per chunk
_LENGTH_STEP = 32    # inference rows are padded to a multiple of this (fewer compiled shapes)


def build_reader(method: Method, config, load_pretrained: bool = True):
    """``(ExtractiveReader, params or None, tokenizer dir)``: the encoder of ``config.model``
    (HF BERT, DPR, sentence-transformers, an ``export_hf`` root: the passage tower; "tiny":
    random), cut to ``config.reader.num_layers`` when set, and N(0, 0.02) heads; the selection
    head reads the ``model.pooling`` vector ("auto": the checkpoint's own, else [CLS])."""
    del method
    m = config.model
    over = runtime_overrides(m)
    if m.name_or_path == "tiny":
        source = None
        bert = BertConfig.tiny(vocab_size=m.tiny_vocab, hidden=m.tiny_hidden, layers=m.tiny_layers,
                               heads=m.tiny_heads, max_position_embeddings=512, **over)
        tok_dir = resolve_model_dir(m.tokenizer or "minilm")
    else:
        source = checkpoints.tower_source(resolve_model_dir(m.name_or_path), "passage")
        bert = BertConfig.from_hf_json(source.model_dir, **over)
        tok_dir = (resolve_model_dir(m.tokenizer) if m.tokenizer
                   else source.tokenizer_dir or source.model_dir)
    full = bert
    keep = int(config.reader.num_layers)
    if keep:
        if keep > bert.num_layers:
            raise ValueError(f"config.reader.num_layers={keep} > the {bert.num_layers} layers of "
                             f"{m.name_or_path}")
        bert = bert.replace(num_layers=keep)
    params = None
    if source is not None and load_pretrained:
        encoder = checkpoints.load_tower(source, full)
        encoder = {k: v for k, v in encoder.items()
                   if not (k.startswith("layer_") and int(k[len("layer_"):]) >= bert.num_layers)}
        params = {"encoder": encoder,
                  **head_params(bert.hidden_size, jax.random.key(int(config.seed)))}
    # The selection vector is pooled as the retrievers' towers are: model.pooling, "auto" being
    # the checkpoint's declared pooling (sentence-transformers: mean), else DPR's [CLS].
    pooling = m.pooling if m.pooling != "auto" else ((source.pooling if source else None) or "cls")
    return ExtractiveReader(bert, pooling=pooling), params, tok_dir


def _dummies(config) -> tuple[jax.Array, ...]:
    ids = jnp.ones((1, int(config.reader.max_len)), jnp.int32)
    return ids, ids


READER_MODEL = ModelSpec(
    build=build_reader, dummy_inputs=_dummies,
    place_pretrained=lambda model, params: jax.tree.map(lambda x: np.asarray(x, np.float32), params),
    axis_rules=lambda model, size, rules=None: axis_rules_for(model.config, size, rules))


def reader_embed(model, params, batch: dict[str, jax.Array], *, deterministic: bool,
                 rngs: dict[str, jax.Array] | None = None) -> dict[str, jax.Array]:
    """Logits of a reader batch (:mod:`dense_cf.inputs.reader`): selection logits of every row,
    start/end logits of the positive (row 0), with the masks and gold spans the loss reads."""
    b, p, length = batch["ids"].shape
    flat = [batch[k].reshape(b * p, length) for k in ("ids", "mask", "type_ids")]
    start, end, select = model.apply({"params": params}, *flat, deterministic=deterministic,
                                     rngs=rngs)
    return {"select": select.reshape(b, p), "passage_valid": batch["passage_valid"],
            "start": start.reshape(b, p, length)[:, 0], "end": end.reshape(b, p, length)[:, 0],
            "text": text_mask(batch["text_lo"][:, 0], batch["text_hi"][:, 0], length),
            "starts": batch["starts"], "ends": batch["ends"], "span_valid": batch["span_valid"]}


# ----------------------------------------------------------------------------------- predict


@dataclasses.dataclass(frozen=True)
class _Reading:
    """What the reader made of one (question, passage) pair."""

    select: float
    score: float | None = None
    answer: str | None = None   # None: no span inside the passage text (empty or cut off)


def _reader_fn(run):
    """Jitted ``(params, ids, mask, types, lo, hi) -> (select, s, e, score, found)``."""
    max_answer_len = int(run.config.reader.max_answer_len)
    model = run.model
    bsh = mesh_lib.batch_sharding(run.mesh)

    def f(params, ids, mask, types, lo, hi):
        start, end, select = model.apply({"params": params}, ids, mask, types)
        return (select, *best_spans(start, end, lo, hi, max_answer_len))

    return jax.jit(f, in_shardings=(jax.tree.map(lambda x: x.sharding, run.params),) + (bsh,) * 5,
                   out_shardings=mesh_lib.replicated(run.mesh))


def _read_pairs(run, fn, pairs: list[tuple[str, Any]], batch_size: int) -> list[_Reading]:
    """Reads (question, passage) pairs: rows grouped by padded length, one jitted call per
    batch (on a CPU, at most ``eval.cpu_call_tokens`` token slots per device: mesh.call_rows),
    spans widened to whole words and mapped back to the passage text by offsets."""
    tok = run.tokenizer
    r = run.config.reader
    cls_id, sep_id = special_ids(tok)
    pad_id = tok.token_to_id("[PAD]") or 0
    max_len = int(r.max_len)
    qs = list(dict.fromkeys(q for q, _ in pairs))
    q_rows = {q: question_row(e.ids, int(r.max_q_len), cls_id, sep_id)
              for q, e in zip(qs, encode_texts(tok, qs))}
    ps = list(dict.fromkeys((c.title, c.text) for _, c in pairs))
    t_enc = encode_texts(tok, [t for t, _ in ps])
    x_enc = encode_texts(tok, [x for _, x in ps])
    enc = {p: (reader_passage(p[0], t.ids, x.ids, sep_id), x) for p, t, x in zip(ps, t_enc, x_enc)}
    rows, lo, hi = [], [], []
    for q, c in pairs:
        (passage, start), _ = enc[(c.title, c.text)]
        row, l0, h0 = reader_row(q_rows[q], passage, start, max_len, sep_id)
        rows.append(row)
        lo.append(l0)
        hi.append(h0)
    out: list[_Reading | None] = [None] * len(pairs)
    order = sorted(range(len(pairs)), key=lambda i: len(rows[i]))
    data = run.mesh.shape["data"]
    bs = max(data, (batch_size + data - 1) // data * data)
    cap = mesh_lib.cpu_call_tokens(run.config.get("eval", {}).get("cpu_call_tokens", 0))

    def padded(i: int) -> int:
        return min(max_len, -(-len(rows[i]) // _LENGTH_STEP) * _LENGTH_STEP)

    with jax.set_mesh(run.mesh), nn.logical_axis_rules(run.rules):
        b0 = 0
        while b0 < len(order):
            # Rows ascend in length: the most rows whose own padded length allows that many
            # in one call (mesh.call_rows; batch_size rows without a cap). The shape is
            # (call_rows(length), length), so each length compiles once.
            n = min(bs, len(order) - b0)
            while n > data and n > mesh_lib.call_rows(bs, padded(order[b0 + n - 1]), data, cap):
                n -= 1
            idx = order[b0:b0 + n]
            b0 += n
            length = padded(idx[-1])
            size = mesh_lib.call_rows(bs, length, data, cap)
            ids, mask, types = pad_reader_rows([rows[i] for i in idx], [len(q_rows[pairs[i][0]]) for i in idx],
                                               length, pad_id)
            arrays = [ids, mask, types, np.asarray([lo[i] for i in idx], np.int32),
                      np.asarray([hi[i] for i in idx], np.int32)]
            pad = size - len(idx)
            if pad:  # fixed batch shape: empty rows (lo = hi = 0), dropped below
                arrays = [np.concatenate([a, np.zeros((pad,) + a.shape[1:], a.dtype)]) for a in arrays]
            g = mesh_lib.global_batch({str(j): a for j, a in enumerate(arrays)}, run.mesh)
            res = jax.device_get(fn(run.params, *(g[str(j)] for j in range(len(arrays)))))
            select, s, e, score, found = (np.asarray(x)[:len(idx)] for x in res)
            for j, i in enumerate(idx):
                if not found[j]:
                    out[i] = _Reading(float(select[j]))
                    continue
                c = pairs[i][1]
                _, x = enc[(c.title, c.text)]
                ts, te = extend_to_words(int(s[j]) - lo[i], int(e[j]) - lo[i], x.word_ids)
                a, z = x.offsets[ts][0], x.offsets[te][1]
                out[i] = _Reading(float(select[j]), float(score[j]), c.text[a:z])
    return out  # type: ignore[return-value]


def predict(run, questions: Sequence[str], contexts: Sequence[Sequence[Any]], ks: Sequence[int], *,
            batch_size: int = 64, cache: dict | None = None) -> dict[int, list[Prediction]]:
    """DPR's extractive prediction at each k (docs/readers.md, "Inference"): of the first k
    passages, the one with the highest selection logit that has a span inside its text (ties:
    the better retrieval rank), and its best span (start + end logit, at most
    ``reader.max_answer_len`` word pieces, widened to whole words, cut from the passage text by
    the tokenizer's offsets). A question whose passages hold no span gets ``""``.

    Every (question, passage) pair is read once, whatever the number of ks; ``cache`` (kept by
    the caller) carries the readings to later calls (another retriever's lists).
    """
    ks = predict_ks(questions, contexts, ks)
    cache = {} if cache is None else cache
    todo: dict[tuple[str, str, str], tuple[str, Any]] = {}
    for q, ctxs in zip(questions, contexts):
        for c in ctxs[:ks[-1]]:
            key = (q, c.title, c.text)
            if key not in cache and key not in todo:
                todo[key] = (q, c)
    if todo:
        fn = _reader_fn(run)
        items = list(todo.items())
        progress = Progress("reader", len(items), unit="passages")
        for c0 in range(0, len(items), _CHUNK):
            chunk = items[c0:c0 + _CHUNK]
            for (key, _), reading in zip(chunk, _read_pairs(run, fn, [v for _, v in chunk], batch_size)):
                cache[key] = reading
            progress.update(len(chunk))
        progress.done()
    out: dict[int, list[Prediction]] = {}
    for k in ks:
        preds = []
        for q, ctxs in zip(questions, contexts):
            best, best_rank = None, -1
            for rank, c in enumerate(ctxs[:k]):
                reading = cache[(q, c.title, c.text)]
                if reading.answer is not None and (best is None or reading.select > best.select):
                    best, best_rank = reading, rank
            if best is None:
                preds.append(Prediction(text="", score=None))
            else:
                preds.append(Prediction(text=best.answer, score=best.score, passage_rank=best_rank,
                                        passage_id=str(ctxs[best_rank].id), passage_score=best.select))
        out[k] = preds
    return out


def config_problems(config) -> list[str]:
    """Ranges of ``config.reader`` (docs/readers.md)."""
    out: list[str] = []
    r = config.reader
    checks.number(out, "reader.passages", r.passages, 1)
    checks.number(out, "reader.max_len", r.max_len, 8, 512)
    checks.number(out, "reader.max_q_len", r.max_q_len, 3)
    if isinstance(r.max_q_len, int) and isinstance(r.max_len, int) and r.max_q_len >= r.max_len - 1:
        out.append(f"config.reader.max_q_len={r.max_q_len} leaves no room for the passage in "
                   f"config.reader.max_len={r.max_len}")
    for f in ("max_answer_len", "max_spans", "max_positives"):
        checks.number(out, f"reader.{f}", r[f], 1)
    for f in ("max_negatives", "max_retrieved", "num_layers"):
        checks.number(out, f"reader.{f}", r[f], 0)
    return out


METHOD = Method(
    name="reader",
    config_block="reader",
    config_problems=config_problems,
    loss=lambda out: reader_loss(**out),
    embed=reader_embed,
    inputs=Inputs(load=reader_inputs.load_config_split, prepare=lambda config, tokenizer, data: data,
                  spec=reader_inputs.spec_from_config, make_dataset=reader_inputs.make_dataset,
                  batch_iterator=reader_inputs.ReaderBatchIterator,
                  file_problems=reader_inputs.file_problems,
                  # One group: the [b, P, L] rows. Every index into them (text_lo/hi, the gold
                  # spans) lies within a row's tokens, and the span loss masks everything
                  # outside the passage text, so a cut row gives the same loss.
                  length_groups=(("",),)),
    model=READER_MODEL,
    kind="reader",
    gather=False,
    predict=predict,
)
