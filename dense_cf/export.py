"""Embedding export: encode a corpus with a run's passage encoder into shards on disk.

Layout of an export directory::

    embeddings-00000.npy   float16/float32 [n_k, D]
    ids-00000.npy          int64 [n_k]   row of the passage in corpus order
    pids-00000.txt         the corpus ids (strings, one a line) of the same rows
    manifest.json          written last: shard list, dim, dtype, count, model step

DCSR runs (SPEC §4) export one vector per contextual sentence instead
(:func:`export_sentences`): the same files hold sentence rows, plus ``spids-00000.npy`` (int64
passage row of every sentence) while ``pids-*.txt`` still lists the shard's passages; the
manifest has ``unit="sentence"``, ``count`` = sentences and ``passages``.

Shards are written atomically (tmp + rename), so an interrupted export resumes by skipping
finished shards. Encoding runs on the run's mesh: each batch is split over the ``data`` axis;
on several hosts every host feeds its slice of the batch and host 0 writes the shards (a shared
file system is assumed, as for checkpoints).
"""

from __future__ import annotations

import json
import os
import time
from typing import Iterable, Iterator, Sequence

import jax
import numpy as np
from absl import logging
from flax import linen as nn
from jax.experimental import multihost_utils

from dense_cf.train import mesh as mesh_lib


def tokenize_passages(tokenizer, titles: Sequence[str], texts: Sequence[str], max_len: int,
                      pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """DPR passage input ``[CLS] title [SEP] text [SEP]`` (the training format), padded."""
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    t_enc = tokenizer.encode_batch(list(titles), add_special_tokens=False)
    x_enc = tokenizer.encode_batch(list(texts), add_special_tokens=False)
    ids = np.full((len(texts), max_len), pad_id, np.int32)
    mask = np.zeros((len(texts), max_len), np.int32)
    for i, (t, x) in enumerate(zip(t_enc, x_enc)):
        row = ([cls_id] + t.ids + [sep_id] + x.ids)[:max_len - 1] + [sep_id]
        ids[i, :len(row)] = row
        mask[i, :len(row)] = 1
    return ids, mask


def tokenize_questions(tokenizer, questions: Sequence[str], max_len: int,
                       pad_id: int = 0, prefix_id: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``[CLS] question [SEP]``, as in training; ``prefix_id`` (DCSR's ``<sent>``) goes after
    [CLS]."""
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    enc = tokenizer.encode_batch(list(questions), add_special_tokens=False)
    ids = np.full((len(questions), max_len), pad_id, np.int32)
    mask = np.zeros((len(questions), max_len), np.int32)
    head = [cls_id] if prefix_id is None else [cls_id, prefix_id]
    for i, e in enumerate(enc):
        row = head + e.ids[:max_len - 1 - len(head)] + [sep_id]
        ids[i, :len(row)] = row
        mask[i, :len(row)] = 1
    return ids, mask


def is_sentence_run(run) -> bool:
    """DCSR runs score sentences, not passages (SPEC §4)."""
    return (run.config.get("method") if hasattr(run.config, "get") else None) == "dcsr"


class Encoder:
    """Jitted, sharded question/passage encoding of a loaded run (fixed batch → one compile).

    On a DCSR run :meth:`passages` raises (a passage has no single vector there);
    :meth:`sentences` gives the vectors at given marker positions.
    """

    def __init__(self, run, batch_size: int):
        data = run.mesh.shape["data"]
        self.run = run
        self.batch_size = max(data, (batch_size + data - 1) // data * data)
        self.local = self.batch_size // jax.process_count()
        model = run.model
        out = mesh_lib.replicated(run.mesh)
        bsh = mesh_lib.batch_sharding(run.mesh)
        psh = jax.tree.map(lambda x: x.sharding, run.params)

        def enc(method):
            def f(params, ids, mask):
                return model.apply({"params": params}, ids, mask, method=method)
            return jax.jit(f, in_shardings=(psh, bsh, bsh), out_shardings=out)

        self._q, self._p = enc(model.encode_question), enc(model.encode_passage)

        def sent(params, ids, mask, positions):
            return model.apply({"params": params}, ids, mask, positions,
                               method=model.encode_passage_at)

        self._s = jax.jit(sent, in_shardings=(psh, bsh, bsh, bsh), out_shardings=out)

    def _encode(self, fn, ids: np.ndarray, mask: np.ndarray, *extra: np.ndarray) -> np.ndarray:
        """Encodes the GLOBAL rows ``ids`` (every host passes the same rows)."""
        n = len(ids)
        out = []
        lo_host = jax.process_index() * self.local
        arrays = (ids, mask) + extra
        with jax.set_mesh(self.run.mesh), nn.logical_axis_rules(self.run.rules):
            for start in range(0, n, self.batch_size):
                parts = [a[start:start + self.batch_size] for a in arrays]
                pad = self.batch_size - len(parts[0])
                if pad:  # fixed shapes: pad the tail with empty rows, dropped below
                    parts = [np.concatenate([a, np.zeros((pad,) + a.shape[1:], a.dtype)])
                             for a in parts]
                local = {str(j): a[lo_host:lo_host + self.local] for j, a in enumerate(parts)}
                g = mesh_lib.global_batch(local, self.run.mesh)
                emb = fn(self.run.params, *(g[str(j)] for j in range(len(parts))))
                emb = np.asarray(multihost_utils.process_allgather(emb, tiled=True)
                                 if jax.process_count() > 1 else emb)
                out.append(emb[:len(emb) - pad])
        return np.concatenate(out) if out else np.zeros((0, 0), np.float32)

    def questions(self, ids, mask) -> np.ndarray:
        return self._encode(self._q, ids, mask)

    def passages(self, ids, mask) -> np.ndarray:
        if is_sentence_run(self.run):
            raise NotImplementedError(
                "this is a DCSR run: it encodes sentences, and a passage has no single vector "
                "(SPEC §4). Retrieval works (python -m dense_cf.eval.retrieval --workdir DIR ranks "
                "passages by HasAns over their sentences); passage-level AAR / robustness are not "
                "supported for DCSR runs (see docs/dcsr.md).")
        return self._encode(self._p, ids, mask)

    def sentences(self, ids, mask, positions) -> np.ndarray:
        """float32 [n, S, D]: passage-encoder outputs at ``positions`` [n, S] (SPEC §4)."""
        return self._encode(self._s, ids, mask, np.asarray(positions, np.int32))


def encode_questions(run, questions: Sequence[str], *, batch_size: int = 64,
                     encoder: Encoder | None = None) -> np.ndarray:
    """float32 [Q, D] question embeddings."""
    encoder = encoder or Encoder(run, batch_size)
    prefix = None
    if is_sentence_run(run) and run.config.dcsr.question_prefix:
        from dense_cf.models.tokenizer import SENT_TOKEN
        prefix = run.tokenizer.token_to_id(SENT_TOKEN)
    ids, mask = tokenize_questions(run.tokenizer, questions, run.config.data.max_q_len,
                                   prefix_id=prefix)
    return encoder.questions(ids, mask)


def _shard_name(kind: str, k: int, ext: str) -> str:
    return f"{kind}-{k:05d}.{ext}"


def _chunks(rows: Iterable[tuple[str, str, str]], size: int) -> Iterator[list[tuple[str, str, str]]]:
    chunk = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def export_passages(run, rows: Iterable[tuple[str, str, str]], out_dir: str, *,
                    shard_size: int = 100_000, batch_size: int = 128, dtype: str = "float16",
                    max_p_len: int | None = None, encoder: Encoder | None = None) -> dict:
    """Encodes ``rows`` = (id, text, title) into shards in ``out_dir``; resumes finished shards.

    Returns the manifest. float16 halves disk and RAM (scores change by ~1e-3 relative); use
    float32 for exact reproducibility of scores.
    """
    if dtype not in ("float16", "float32"):
        raise ValueError(f"dtype must be float16 or float32, got {dtype!r}")
    os.makedirs(out_dir, exist_ok=True)
    max_p_len = max_p_len or run.config.data.max_p_len
    encoder = encoder or Encoder(run, batch_size)
    writer = jax.process_index() == 0
    shards, total, done_rows, t0, encoded = [], 0, 0, time.perf_counter(), 0
    for k, chunk in enumerate(_chunks(rows, shard_size)):
        emb_path = os.path.join(out_dir, _shard_name("embeddings", k, "npy"))
        shards.append({"embeddings": os.path.basename(emb_path), "ids": _shard_name("ids", k, "npy"),
                       "pids": _shard_name("pids", k, "txt"), "count": len(chunk)})
        done = (os.path.exists(emb_path) and os.path.exists(os.path.join(out_dir, shards[-1]["pids"]))
                and len(np.load(emb_path, mmap_mode="r")) == len(chunk))
        if jax.process_count() > 1:  # host 0 (the writer) decides: encoding is a collective
            done = bool(multihost_utils.broadcast_one_to_all(np.asarray(done)))
        if done:
            logging.info("export: shard %d already done, skipped", k)
            total += len(chunk)
            done_rows += len(chunk)
            continue
        ids, mask = tokenize_passages(run.tokenizer, [r[2] for r in chunk], [r[1] for r in chunk],
                                      max_p_len)
        emb = encoder.passages(ids, mask).astype(dtype)
        if writer:
            rows_idx = np.arange(total, total + len(chunk), dtype=np.int64)
            _atomic_save(os.path.join(out_dir, shards[-1]["ids"]), rows_idx)
            _atomic_text(os.path.join(out_dir, shards[-1]["pids"]), "".join(r[0] + "\n" for r in chunk))
            _atomic_save(emb_path, emb)  # last: its presence marks the shard done
        total += len(chunk)
        encoded += len(chunk)
        dt = time.perf_counter() - t0
        logging.info("export: shard %d written, %d passages (%d this run) at %.1f passages/s",
                     k, total, encoded, encoded / max(dt, 1e-9))
    manifest = {"shards": shards, "count": total, "dim": int(run.model.config.hidden_size),
                "dtype": dtype, "max_p_len": max_p_len, "step": int(run.step),
                "encoded_this_run": encoded, "skipped_done": done_rows,
                "passages_per_s": encoded / max(time.perf_counter() - t0, 1e-9)}
    if writer:
        _atomic_text(os.path.join(out_dir, "manifest.json"), json.dumps(manifest, indent=2))
    return manifest


def export_sentences(run, rows: Iterable[tuple[str, str, str]], out_dir: str, *,
                     shard_size: int = 100_000, batch_size: int = 128, dtype: str = "float16",
                     max_p_len: int | None = None, max_sents: int | None = None,
                     encoder: Encoder | None = None) -> dict:
    """DCSR export (SPEC §4): every contextual sentence of ``rows`` = (id, text, title).

    Passages are tokenised as in training (``dense_cf.data.dcsr.tokenize_passages``), encoded
    once, and the vectors at their valid ``<sent>`` markers (at most ``max_sents``) become rows.
    A passage without any valid sentence (empty text) is indexed by its [CLS] vector so it stays
    retrievable (counted). Shards hold ``shard_size`` passages; resumable like
    :func:`export_passages`. Returns the manifest.
    """
    from dense_cf.data import dcsr as dcsr_data
    if dtype not in ("float16", "float32"):
        raise ValueError(f"dtype must be float16 or float32, got {dtype!r}")
    os.makedirs(out_dir, exist_ok=True)
    cfg = run.config
    max_p_len = max_p_len or cfg.data.max_p_len
    max_sents = max_sents or cfg.dcsr.max_sents
    encoder = encoder or Encoder(run, batch_size)
    writer = jax.process_index() == 0
    shards: list[dict] = []
    n_sent = n_pass = done = encoded = dropped = no_sent = 0
    t0 = time.perf_counter()
    for k, chunk in enumerate(_chunks(rows, shard_size)):
        names = {"embeddings": _shard_name("embeddings", k, "npy"), "ids": _shard_name("ids", k, "npy"),
                 "pids": _shard_name("pids", k, "txt"), "sentence_pids": _shard_name("spids", k, "npy")}
        emb_path = os.path.join(out_dir, names["embeddings"])
        if all(os.path.exists(os.path.join(out_dir, f)) for f in names.values()):
            spid = np.load(os.path.join(out_dir, names["sentence_pids"]))
            if len(np.load(emb_path, mmap_mode="r")) == len(spid) and \
                    (len(spid) == 0 or int(spid.max()) < n_pass + len(chunk)):
                logging.info("export: sentence shard %d already done, skipped", k)
                shards.append(dict(names, count=len(spid), passages=len(chunk)))
                n_sent += len(spid)
                n_pass += len(chunk)
                done += len(chunk)
                continue
        tok = dcsr_data.tokenize_passages(run.tokenizer, [r[2] for r in chunk], [r[1] for r in chunk],
                                          max_len=max_p_len, max_sents=max_sents,
                                          title=cfg.dcsr.title)
        valid = tok["valid"].copy()
        empty = ~valid.any(axis=1)
        valid[empty, 0] = True  # positions are 0 there: the [CLS] vector
        no_sent += int(empty.sum())
        dropped += tok["dropped"]
        # Encode in slices and keep only valid rows at once: [n, max_sents, D] for a whole
        # shard would be ~10 GB at 100k passages x 32 x 768 float32.
        parts, step = [], encoder.batch_size * 8
        for lo in range(0, len(chunk), step):
            sl = slice(lo, lo + step)
            vecs = encoder.sentences(tok["ids"][sl], tok["mask"][sl], tok["positions"][sl])
            parts.append(vecs[valid[sl]].astype(dtype))                   # row-major: by passage
        emb = np.concatenate(parts)
        spid = (n_pass + np.nonzero(valid)[0]).astype(np.int64)
        if writer:
            _atomic_save(os.path.join(out_dir, names["ids"]),
                         np.arange(n_sent, n_sent + len(emb), dtype=np.int64))
            _atomic_save(os.path.join(out_dir, names["sentence_pids"]), spid)
            _atomic_text(os.path.join(out_dir, names["pids"]), "".join(r[0] + "\n" for r in chunk))
            _atomic_save(emb_path, emb)  # last: its presence marks the shard done
        shards.append(dict(names, count=len(emb), passages=len(chunk)))
        n_sent += len(emb)
        n_pass += len(chunk)
        encoded += len(chunk)
        logging.info("export: sentence shard %d written, %d passages / %d sentences (%d passages "
                     "this run) at %.1f passages/s", k, n_pass, n_sent, encoded,
                     encoded / max(time.perf_counter() - t0, 1e-9))
    manifest = {"unit": "sentence", "shards": shards, "count": n_sent, "passages": n_pass,
                "mean_sentences_per_passage": n_sent / max(n_pass, 1),
                "dim": int(run.model.config.hidden_size), "dtype": dtype, "max_p_len": max_p_len,
                "max_sents": max_sents, "title": bool(cfg.dcsr.title), "step": int(run.step),
                "encoded_this_run": encoded, "skipped_done": done,
                "dropped_sentences_this_run": dropped, "cls_only_passages_this_run": no_sent,
                "passages_per_s": encoded / max(time.perf_counter() - t0, 1e-9)}
    if dropped:
        logging.warning("export: %d sentences beyond max_sents=%d were not indexed", dropped,
                        max_sents)
    if writer:
        _atomic_text(os.path.join(out_dir, "manifest.json"), json.dumps(manifest, indent=2))
    return manifest


def load_sentence_passages(out_dir: str) -> np.ndarray:
    """int64 [sentences]: the passage row (corpus order) of every exported sentence row."""
    with open(os.path.join(out_dir, "manifest.json")) as f:
        manifest = json.load(f)
    if manifest.get("unit") != "sentence":
        raise ValueError(f"{out_dir} is a passage export, not a DCSR sentence export")
    return np.concatenate([np.load(os.path.join(out_dir, s["sentence_pids"]))
                           for s in manifest["shards"]] or [np.zeros(0, np.int64)])


def load_passage_ids(out_dir: str) -> list[str]:
    """Corpus ids in row order, from an export directory."""
    with open(os.path.join(out_dir, "manifest.json")) as f:
        manifest = json.load(f)
    out: list[str] = []
    for s in manifest["shards"]:
        with open(os.path.join(out_dir, s["pids"])) as f:
            out.extend(line.rstrip("\n") for line in f)
    return out


def load_embeddings(out_dir: str) -> np.ndarray:
    """All embeddings (float32) of an export, in row order (small corpora/tests)."""
    with open(os.path.join(out_dir, "manifest.json")) as f:
        manifest = json.load(f)
    return np.concatenate([np.load(os.path.join(out_dir, s["embeddings"])).astype(np.float32)
                           for s in manifest["shards"]])


def _atomic_save(path: str, arr: np.ndarray) -> None:
    tmp = path + ".tmp.npy"
    np.save(tmp, arr)
    os.replace(tmp, path)


def _atomic_text(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
