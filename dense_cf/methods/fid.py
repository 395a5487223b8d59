"""The Fusion-in-Decoder reader as a method (docs/readers.md, "Fusion-in-Decoder").

``METHOD`` (``config.method="fid"``) is a reader-kind :class:`~dense_cf.methods.base.Method`:
its network is :class:`~dense_cf.models.fid.FiD` (T5 from a local HF T5 directory, or a random
"tiny" T5 over ``model.tokenizer``'s vocabulary), its data a retriever's results
(``config.reader.train_file``, :mod:`dense_cf.inputs.fid`), its loss the teacher-forced answer
NLL (:func:`dense_cf.losses.answer_nll_loss`, per example, no all-gather; T5 dropout
``model.dropout`` in training) and :func:`predict` greedy decoding over the first k passages,
which ``python -m dense_cf.eval.e2e`` calls.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from dense_cf.configs import checks
from dense_cf.inputs import fid as fid_inputs
from dense_cf.inputs import reader as reader_inputs
from dense_cf.inputs.tokens import encode_texts
from dense_cf.losses import answer_nll_loss
from dense_cf.methods.base import Inputs, Method, ModelSpec, Prediction, predict_ks
from dense_cf.methods.reader import READER_MODEL
from dense_cf.models import hf_t5
from dense_cf.models.fid import FiD, decode_answers, fid_token_outputs, greedy_decode_scored
from dense_cf.models.hf import resolve_model_dir
from dense_cf.models.t5 import T5Config
from dense_cf.models.tokenizer import load_tokenizer
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.progress import Progress

__all__ = ["FID_MODEL", "METHOD", "build_fid", "fid_embed", "predict"]

_LENGTH_STEP = 32   # inference rows are padded to a multiple of this (fewer compiled shapes)


def build_fid(method: Method, config, load_pretrained: bool = True):
    """``(FiD, params or None, tokenizer dir)``: the T5 of ``config.model.name_or_path`` (a local
    HF T5 directory: safetensors, ``config.json``, ``tokenizer.json``; v1.0 or v1.1) or, for
    "tiny", a random gated-GELU T5 (``model.tiny_hidden/tiny_layers/tiny_heads``) over the
    vocabulary of ``model.tokenizer``. ``model.dropout`` (None: the checkpoint's) and
    ``model.dtype`` are run-time choices over the checkpoint's config.

    Whether the head is tied is decided by the checkpoint's content
    (``hf_t5.load_hf_t5_params``), so the weights are read even for a restore
    (``load_pretrained=False``): the parameter tree must be the trained one.
    """
    del method
    m = config.model
    over: dict[str, Any] = {"dtype": str(m.dtype)}
    if m.dropout is not None:
        over["dropout_rate"] = float(m.dropout)
    if m.name_or_path == "tiny":
        if not m.tokenizer:
            raise ValueError("method fid with model.name_or_path='tiny' needs model.tokenizer: a "
                             "directory with a T5 tokenizer.json")
        tok_dir = resolve_model_dir(m.tokenizer)
        hidden, heads = int(m.tiny_hidden), int(m.tiny_heads)
        cfg = T5Config(vocab_size=load_tokenizer(tok_dir).get_vocab_size(), d_model=hidden,
                       d_kv=hidden // heads, d_ff=2 * hidden, num_layers=int(m.tiny_layers),
                       num_heads=heads, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                       scale_decoder_outputs=False, **over)
        return FiD(cfg), None, tok_dir
    model_dir = resolve_model_dir(m.name_or_path)
    tok_dir = resolve_model_dir(m.tokenizer) if m.tokenizer else model_dir
    params, cfg = hf_t5.load_hf_t5_params(model_dir, T5Config.from_hf_json(model_dir, **over))
    return FiD(cfg), (params if load_pretrained else None), tok_dir


def _dummies(config) -> tuple[jax.Array, ...]:
    ids = jnp.ones((1, 1, int(config.fid.max_len)), jnp.int32)
    return ids, ids, jnp.ones((1, int(config.fid.max_answer_len)), jnp.int32)


# T5's parameters carry no logical axis names: they are replicated (the data axis splits the
# batch); the rules only matter to the retrievers' BERT.
FID_MODEL = ModelSpec(build=build_fid, dummy_inputs=_dummies,
                      place_pretrained=READER_MODEL.place_pretrained,
                      axis_rules=lambda model, size, rules=None: tuple(rules or ()))


def fid_embed(model, params, batch: dict[str, jax.Array], *, deterministic: bool,
              rngs: dict[str, jax.Array] | None = None) -> dict[str, jax.Array]:
    """Per answer token of a FiD batch (:mod:`dense_cf.inputs.fid`): its teacher-forced
    log-likelihood, whether the argmax is right, and whether it is a real token."""
    return fid_token_outputs(model, params, batch, deterministic=deterministic, rngs=rngs)


# ----------------------------------------------------------------------------------- predict


def _decode_batches(run, q_rows: list[list[int]], p_rows: list[list[list[int]]], n: int,
                    batch_size: int) -> list[tuple[str, float]]:
    """(answer, sequence log-prob) per example: its question piece ids with its passages' (at
    most ``n``), read jointly, greedy-decoded. Examples are sorted by row length and read
    ``max(1, batch_size // n)`` at a time (``batch_size`` counts encoder rows)."""
    f = run.config.fid
    tok = run.tokenizer
    eos = fid_inputs.eos_id(tok)
    pad = tok.token_to_id("<pad>") or 0
    max_len = int(f.max_len)
    rows = [[fid_inputs.fid_row(q, p, max_len, eos) for p in ps[:n]] for q, ps in zip(q_rows, p_rows)]
    data = run.mesh.shape["data"]
    per = max(1, int(batch_size) // n)
    bs = max(data, -(-per // data) * data)
    order = sorted(range(len(rows)), key=lambda i: max(map(len, rows[i])))
    out: list[tuple[str, float] | None] = [None] * len(rows)
    progress = Progress(f"fid k={n}", len(rows), unit="questions")
    for b0 in range(0, len(order), bs):
        idx = order[b0:b0 + bs]
        length = min(max_len, -(-max(len(r) for i in idx for r in rows[i]) // _LENGTH_STEP) * _LENGTH_STEP)
        ids = np.full((bs, n, length), pad, np.int32)
        mask = np.zeros((bs, n, length), np.int32)
        for r, i in enumerate(idx):   # rows past len(idx): padding examples, dropped below
            for j, row in enumerate(rows[i]):
                ids[r, j, :len(row)] = row
                mask[r, j, :len(row)] = 1
        g = mesh_lib.global_batch({"ids": ids, "mask": mask}, run.mesh)
        with jax.set_mesh(run.mesh):
            gen, score = greedy_decode_scored(run.model, run.params, g["ids"], g["mask"],
                                              max_length=int(f.decode_len))
        gen, score = jax.device_get((gen, score))
        texts = decode_answers(tok, np.asarray(gen)[:len(idx)], eos)
        for r, i in enumerate(idx):
            out[i] = (texts[r], float(score[r]))
        progress.update(len(idx))
    progress.done()
    return out  # type: ignore[return-value]


def predict(run, questions: Sequence[str], contexts: Sequence[Sequence[Any]], ks: Sequence[int], *,
            batch_size: int = 64, cache: dict | None = None) -> dict[int, list[Prediction]]:
    """FiD's answer at each k (docs/readers.md, "Fusion-in-Decoder"): the question with its
    first k passages (rank order) read jointly, greedy-decoded up to ``fid.decode_len`` tokens.

    ``Prediction.score`` is the answer's sequence log-probability (``</s>`` included);
    ``passage_rank`` -1 and ``passage_id`` None (the answer comes from all k passages at once);
    a question without passages gets ``""``. ``batch_size`` counts encoder rows (question,
    passage) per call; ``cache`` (kept by the caller) maps (question, the first k passages'
    titles and texts) to its answer, so an identical list (another k with fewer passages,
    another retriever) is not read again.
    """
    ks = predict_ks(questions, contexts, ks)
    cache = {} if cache is None else cache
    tok = run.tokenizer
    max_len = int(run.config.fid.max_len)
    q_ids = {q: e.ids for q, e in zip(dict.fromkeys(questions),
                                      encode_texts(tok, [fid_inputs.question_text(q)
                                                         for q in dict.fromkeys(questions)]))}
    out: dict[int, list[Prediction]] = {}
    p_ids: dict[tuple[str, str], list[int]] = {}
    for k in ks:
        # Padding rows change no output (tests/test_fid.py), so a list shorter than k reads the
        # same at every k: the key is the question and its passages.
        keys = [("fid", q, tuple((c.title, c.text) for c in ctxs[:k])) for q, ctxs in zip(questions, contexts)]
        todo = list(dict.fromkeys(key for key in keys if key not in cache and key[2]))
        new = list(dict.fromkeys(p for key in todo for p in key[2] if p not in p_ids))
        for p, e in zip(new, encode_texts(tok, [fid_inputs.passage_text(t, x) for t, x in new])):
            p_ids[p] = e.ids[:max_len]
        if todo:
            # Lists shorter than k everywhere: no all-padding rows beyond the longest.
            n = max(len(key[2]) for key in todo)
            read = _decode_batches(run, [q_ids[key[1]] for key in todo],
                                   [[p_ids[p] for p in key[2]] for key in todo], n, batch_size)
            cache.update(zip(todo, read))
        preds = []
        for key in keys:
            text, score = cache.get(key, ("", None))
            preds.append(Prediction(text=text, score=score if text else None))
        out[k] = preds
    return out


def config_problems(config) -> list[str]:
    """Ranges of ``config.fid`` (docs/readers.md, "Fusion-in-Decoder"); it reads
    ``config.reader``'s files too."""
    out: list[str] = []
    f = config.fid
    checks.number(out, "fid.n_passages", f.n_passages, 1)
    checks.number(out, "fid.max_len", f.max_len, 2)            # the question's first piece + </s>
    checks.number(out, "fid.max_answer_len", f.max_answer_len, 2)
    checks.number(out, "fid.decode_len", f.decode_len, 1)
    return out


METHOD = Method(
    name="fid",
    config_block="fid",
    config_problems=config_problems,
    loss=lambda out: answer_nll_loss(**out),
    embed=fid_embed,
    inputs=Inputs(load=fid_inputs.load_config_split, prepare=lambda config, tokenizer, data: data,
                  spec=fid_inputs.spec_from_config, make_dataset=fid_inputs.make_dataset,
                  batch_iterator=fid_inputs.FiDBatchIterator,
                  file_problems=reader_inputs.file_problems),
    model=FID_MODEL,
    kind="reader",
    gather=False,
    predict=predict,
)
