"""Embedding export: encode a corpus with a run's passage encoder into shards on disk.

Layout of an export directory::

    embeddings-00000.npy   float16/float32 [n_k, D]
    ids-00000.npy          int64 [n_k]   row of the passage in corpus order
    pids-00000.txt         the corpus ids (strings, one a line) of the same rows
    manifest.json          written last: shard list, dim, dtype, count, model step

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
                       pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``[CLS] question [SEP]``, as in training."""
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    enc = tokenizer.encode_batch(list(questions), add_special_tokens=False)
    ids = np.full((len(questions), max_len), pad_id, np.int32)
    mask = np.zeros((len(questions), max_len), np.int32)
    for i, e in enumerate(enc):
        row = [cls_id] + e.ids[:max_len - 2] + [sep_id]
        ids[i, :len(row)] = row
        mask[i, :len(row)] = 1
    return ids, mask


class Encoder:
    """Jitted, sharded question/passage encoding of a loaded run (fixed batch → one compile)."""

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

    def _encode(self, fn, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Encodes the GLOBAL rows ``ids`` (every host passes the same rows)."""
        n = len(ids)
        out = []
        lo_host = jax.process_index() * self.local
        with jax.set_mesh(self.run.mesh), nn.logical_axis_rules(self.run.rules):
            for start in range(0, n, self.batch_size):
                b_ids = ids[start:start + self.batch_size]
                b_mask = mask[start:start + self.batch_size]
                pad = self.batch_size - len(b_ids)
                if pad:  # fixed shapes: pad the tail with empty rows, dropped below
                    b_ids = np.concatenate([b_ids, np.zeros((pad, b_ids.shape[1]), b_ids.dtype)])
                    b_mask = np.concatenate([b_mask, np.zeros((pad, b_mask.shape[1]), b_mask.dtype)])
                local = {"ids": b_ids[lo_host:lo_host + self.local],
                         "mask": b_mask[lo_host:lo_host + self.local]}
                g = mesh_lib.global_batch(local, self.run.mesh)
                emb = fn(self.run.params, g["ids"], g["mask"])
                emb = np.asarray(multihost_utils.process_allgather(emb, tiled=True)
                                 if jax.process_count() > 1 else emb)
                out.append(emb[:len(emb) - pad])
        return np.concatenate(out) if out else np.zeros((0, 0), np.float32)

    def questions(self, ids, mask) -> np.ndarray:
        return self._encode(self._q, ids, mask)

    def passages(self, ids, mask) -> np.ndarray:
        return self._encode(self._p, ids, mask)


def encode_questions(run, questions: Sequence[str], *, batch_size: int = 64,
                     encoder: Encoder | None = None) -> np.ndarray:
    """float32 [Q, D] question embeddings."""
    encoder = encoder or Encoder(run, batch_size)
    ids, mask = tokenize_questions(run.tokenizer, questions, run.config.data.max_q_len)
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
        if os.path.exists(emb_path) and os.path.exists(os.path.join(out_dir, shards[-1]["pids"])):
            if len(np.load(emb_path, mmap_mode="r")) == len(chunk):
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
