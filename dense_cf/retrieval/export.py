"""Embedding export: encode a corpus with a run's passage encoder into shards on disk.

Layout of an export directory::

    embeddings-00000.npy   float16/float32 [n_k, D]
    ids-00000.npy          int64 [n_k]   row of the passage in corpus order
    pids-00000.txt         the corpus ids (strings, one a line) of the same rows
    shard-00000.json       the shard's record: sha256 of its rows, settings, row count
    manifest.json          written last: shard list, dim, dtype, count, model step

DCSR runs (docs/method.md §4) export one vector per contextual sentence instead
(:func:`export_sentences`): the same files hold sentence rows, plus ``spids-00000.npy`` (int64
passage row of every sentence) while ``pids-*.txt`` still lists the shard's passages; the
manifest has ``unit="sentence"``, ``count`` = sentences and ``passages``.

Shards are written atomically (tmp + rename), so an interrupted export resumes by skipping
finished shards. Encoding runs on the run's mesh: each batch is split over the ``data`` axis;
on several hosts every host feeds its slice of the batch and host 0 writes the shards (a shared
file system is assumed, as for checkpoints). Rows are encoded in length buckets
(``eval.length_buckets``, :class:`Encoder`), on a CPU in calls of at most
``eval.cpu_call_tokens`` token slots per device, and optionally packed (``eval.pack_row_len``):
the vectors match full padding within float tolerance, so none of these is a setting of a shard
or changes its key.

Reuse is keyed by content, not by row counts. Every shard has a record ``shard-00000.json``
(written before its embeddings) holding the sha256 of its rows and the encoding settings (unit,
checkpoint step, dim, dtype, max_p_len, and for DCSR max_sents/title); a shard is reused only
when the rows being exported hash to the same value under the same settings. The manifest holds
``corpus`` = the sha256 over all rows in order (see :func:`rows_fingerprint`), the passage count
and the corpus ``source`` (its path, informational). Hashing the text itself, rather than a
file's path/size/mtime, works for every row source (TSV, passage store, in-memory corpora), is
not fooled by two corpora with the same ids and size (synthetic corpora number passages 1..N),
and costs one sha256 pass over the text (~13 GB for psgs_w100: tens of seconds, against hours
of encoding); it is computed while the rows stream past, so there is no extra read.

Integrity: ``SHA256SUMS`` (``files.write_sums``) holds the sha256 of every shard file and of the
manifest, written when the export finishes. A shard is reused only after its files match it,
and every reader checks the export first (``index.shards.verify_export``): a changed file is
refused with one line naming it (delete it and rerun to re-encode its shard).

A directory whose manifest records a *complete* export of another corpus is never overwritten:
the export stops with an error naming both corpora at the first shard whose rows differ, before
overwriting it (re-exporting in place would destroy hours of encoding; a fresh sibling
directory would leave callers that read ``RUN/export/step_N`` and ``RUN/index/step_N_<kind>``
pointing at the other corpus). Deleting its
``manifest.json`` allows re-exporting in place; shards whose rows are unchanged are kept.
Partial exports (no manifest) are resumed shard by shard, and shards of other rows overwritten.
Exports written before fingerprints existed (a manifest without ``corpus``, shards without
records) cannot be verified and are re-encoded. Changed settings (e.g. dtype) re-encode in
place. The shard size of an existing directory is kept (it is a layout choice, not a result).
The model is identified by the checkpoint step only: an export directory belongs to one run.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import time
from typing import Any, Callable, Iterable, Iterator, Sequence

import jax
import numpy as np
from absl import logging
from flax import linen as nn
from jax.experimental import multihost_utils

from dense_cf import files
from dense_cf.index.shards import MANIFEST, SHARD_FILE_RE, shard_name, verify_export
from dense_cf.inputs import buckets as bucket_lib
from dense_cf.inputs import packing
from dense_cf.inputs.tokens import tokenize_marked_passages, tokenize_passages, tokenize_questions  # noqa: F401
from dense_cf.parallel import jit_cache
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.progress import Progress

# Recorded in export settings: 2 = title-less passages as "[CLS] text [SEP]" (docs/method.md
# §8). An export made with another format is re-encoded (with a warning), never reused.
INPUT_FORMAT = 2


def _encoder_fns(model, params_shardings: Any, mesh) -> tuple:
    """Jitted question, passage and sentence encoders of ``model`` with these param shardings,
    then the packed question and passage encoders (``inputs.packing`` rows, one pack per data
    shard: [S, R, L] rows, [S, P] starts).

    Shared by value (``parallel.jit_cache``; a flax module hashes by its fields): the Encoders
    of an evaluation's stages and of runs of one architecture share one trace and compile per
    shape, where a new ``jax.jit`` per Encoder would trace and compile each time.
    """
    def build() -> tuple:
        out, bsh = mesh_lib.replicated(mesh), mesh_lib.batch_sharding(mesh)
        psh = params_shardings

        def enc(method):
            def f(params, ids, mask):
                return model.apply({"params": params}, ids, mask, method=method)
            return jax.jit(f, in_shardings=(psh, bsh, bsh), out_shardings=out)

        def packed(method):
            def f(params, ids, mask, segment_ids, position_ids, starts):
                return model.apply({"params": params}, ids, mask, segment_ids, position_ids,
                                   starts, method=method)
            return jax.jit(f, in_shardings=(psh,) + (bsh,) * 5, out_shardings=out)

        def sent(params, ids, mask, positions):
            return model.apply({"params": params}, ids, mask, positions,
                               method=model.encode_passage_at)

        return (enc(model.encode_question), enc(model.encode_passage),
                jax.jit(sent, in_shardings=(psh, bsh, bsh, bsh), out_shardings=out),
                packed(model.encode_question_packed), packed(model.encode_passage_packed))

    return jit_cache.cached("encoders", (model, jit_cache.shardings_key(params_shardings), mesh),
                            build)


def packed_row_len(pack_row_len: int, padded_len: int) -> int:
    """The packed row length for inputs padded to ``padded_len``: ``min(pack_row_len, 2 x
    padded_len)``, 0 = packing off. At most two full-length rows share a packed row: attention
    over a packed row costs its length squared, so longer rows would buy fill with attention
    (docs/scale.md "Packed export")."""
    return min(int(pack_row_len), 2 * int(padded_len)) if pack_row_len > 0 else 0


def packed_calls(n_rows: int, shard_rows: int, shards: int) -> list[tuple[int, int]]:
    """``[(first row, rows per shard)]`` splitting ``n_rows`` packed rows into calls of
    ``shards`` x ``rows per shard``: ``shard_rows`` while that many remain, then the largest
    power of two below it that fits, the last call padded with empty rows. The shapes are few
    (``shard_rows`` and the powers of two below it: a bounded number of compiles), and the tail
    wastes less than one small call, where one fixed size would pad the tail to a whole call."""
    sizes = sorted({shard_rows} | {1 << k for k in range(shard_rows.bit_length())
                                   if (1 << k) < shard_rows}, reverse=True)
    out, lo = [], 0
    while lo < n_rows:
        left = n_rows - lo
        size = next((c for c in sizes if c * shards <= left), 1)
        out.append((lo, size))
        lo += size * shards
    return out


def _eval_setting(run, key: str, default: Any) -> Any:
    """``run.config.eval[key]``, or ``default`` where the run's config has no such entry (a
    run saved before it existed, or a benchmark's bare config: a ConfigDict or a dict)."""
    return (run.config.get("eval") or {}).get(key, default)


class Encoder:
    """Jitted, sharded question/passage encoding of a loaded run.

    Fixed batch shapes: one compile per padded length. ``length_buckets`` (default the run's
    ``eval.length_buckets``; ``()`` = off) pads each batch to the smallest bucket that holds
    its longest row instead of the full length (``inputs.buckets``, docs/scale.md
    "Length-aware encoding"); rows are sorted by length for that and the vectors returned in
    the input order. ``pack_row_len`` (default the run's ``eval.pack_row_len``; 0 = off) encodes
    the question and passage rows several to a row of :func:`packed_row_len` tokens, with
    block-diagonal attention and restarted positions (``inputs.packing``; docs/scale.md
    "Packed export"); rows longer than that are padded as above. Both give the full-padding
    vectors within float tolerance. ``tokens`` / ``tokens_at_max`` count the token positions
    encoded and those full padding would have encoded (empty rows of a short last batch
    included); ``packed_passages`` the rows encoded packed.

    On a DCSR run :meth:`passages` raises (a passage has no single vector there);
    :meth:`sentences` gives the vectors at given marker positions.
    """

    def __init__(self, run, batch_size: int, *, length_buckets: Sequence[int] | None = None,
                 token_budget: int = 0, in_flight: int = 2, pack_row_len: int | None = None,
                 call_tokens: int | None = None):
        if run.method.kind != "retriever":
            raise ValueError(f"{run.method.name} is a {run.method.kind}, not a retriever: it has "
                             "no question or passage vectors to export")
        data = run.mesh.shape["data"]
        self.run = run
        self.batch_size = max(data, (batch_size + data - 1) // data * data)
        self.local = self.batch_size // jax.process_count()
        if length_buckets is None:
            length_buckets = _eval_setting(run, "length_buckets", ())
        self.length_buckets = tuple(int(b) for b in length_buckets)
        if pack_row_len is None:
            pack_row_len = _eval_setting(run, "pack_row_len", 0)
        self.pack_row_len = max(0, int(pack_row_len))
        self.tokens = self.tokens_at_max = 0
        self.packed_passages = 0
        # Export levers (issue 47), off by default: see plan_token_batches; in_flight = batches
        # dispatched before the oldest is copied back (2: one computing while one is collected).
        self.token_budget, self.in_flight = int(token_budget), max(2, int(in_flight))
        # On a CPU backend, calls are capped at call_tokens token slots per device (rows per
        # call = call_tokens // the bucket's length, at most batch_size; mesh.cpu_call_tokens).
        # Accelerators keep the batch as given. The vectors do not depend on the call size
        # (float tolerance).
        if call_tokens is None:
            call_tokens = _eval_setting(run, "cpu_call_tokens", 0)
        self.call_tokens = 0 if self.token_budget else mesh_lib.cpu_call_tokens(call_tokens)
        psh = jax.tree.map(lambda x: x.sharding, run.params)
        self._q, self._p, self._s, self._q_packed, self._p_packed = _encoder_fns(
            run.model, psh, run.mesh)

    def _encode(self, fn, ids: np.ndarray, mask: np.ndarray, *extra: np.ndarray,
                packed_fn=None, progress: Progress | None = None) -> np.ndarray:
        """Encodes the GLOBAL rows ``ids`` (every host passes the same rows), in input order.

        ``extra`` arrays (marker positions) are per row but not along the token axis. With
        ``packed_fn`` and packing on, the rows that fit a packed row are encoded packed
        (:meth:`_dispatch_packed`), the others padded. A batch is dispatched before the
        previous one is copied to the host, so the copy and the next batch's host work overlap
        device compute (jax dispatch is asynchronous).
        """
        n, full = ids.shape[0], ids.shape[1]
        result: np.ndarray | None = None
        pending: list[tuple[np.ndarray, np.ndarray, jax.Array]] = []

        def collect(rows: np.ndarray, take: np.ndarray, emb) -> None:
            nonlocal result
            emb = np.asarray(multihost_utils.process_allgather(emb, tiled=True)
                             if jax.process_count() > 1 else emb)
            if result is None:
                result = np.empty((n,) + emb.shape[1:], emb.dtype)
            result[rows] = emb[take]
            if progress is not None:
                progress.update(len(rows))

        def dispatch(rows: np.ndarray, take: np.ndarray, emb) -> None:
            pending.append((rows, take, emb))
            if len(pending) >= self.in_flight:
                collect(*pending.pop(0))

        lengths = bucket_lib.row_lengths(mask)
        padded = np.arange(n)
        row_len = packed_row_len(self.pack_row_len, full) if packed_fn is not None else 0
        with jax.set_mesh(self.run.mesh), nn.logical_axis_rules(self.run.rules):
            if row_len and not extra and n:
                # Packed rows need right-padded masks (real tokens first), as tokenize_* give.
                ok = (lengths > 0) & (lengths <= row_len) & (np.asarray(mask).sum(1) == lengths)
                if ok.any():
                    self._dispatch_packed(packed_fn, ids, mask, np.flatnonzero(ok), lengths,
                                          row_len, dispatch)
                padded = np.flatnonzero(~ok)
            if padded.size:
                self._dispatch_padded(fn, ids, mask, extra, padded, lengths, dispatch)
            for item in pending:
                collect(*item)
        return result if result is not None else np.zeros((0, 0), np.float32)

    def _dispatch_padded(self, fn, ids, mask, extra, subset: np.ndarray, lengths: np.ndarray,
                         dispatch) -> None:
        """Rows ``subset`` in batches padded to their length bucket (or full length)."""
        full = ids.shape[1]
        buckets = bucket_lib.bucket_lengths(self.length_buckets, full)
        data = self.run.mesh.shape["data"]
        if self.token_budget:
            plan = plan_token_batches(lengths[subset], buckets, self.batch_size,
                                      self.token_budget, data)
        elif self.call_tokens:
            plan = plan_length_batches(lengths[subset], buckets, lambda length: mesh_lib.call_rows(
                self.batch_size, length, data, self.call_tokens))
        else:
            plan = [(r, length, self.batch_size) for r, length in
                    bucket_lib.plan_batches(lengths[subset], buckets, self.batch_size)]
        for local_rows, length, size in plan:
            rows = subset[local_rows]
            parts = [ids[rows, :length], mask[rows, :length]] + [a[rows] for a in extra]
            pad = size - len(rows)
            if pad:  # fixed shapes: pad the tail with empty rows, dropped in collect
                parts = [np.concatenate([a, np.zeros((pad,) + a.shape[1:], a.dtype)])
                         for a in parts]
            self.tokens += size * length
            self.tokens_at_max += size * full
            local_n = size // jax.process_count()
            lo_host = jax.process_index() * local_n
            local = {str(j): a[lo_host:lo_host + local_n] for j, a in enumerate(parts)}
            g = mesh_lib.global_batch(local, self.run.mesh)
            dispatch(rows, np.arange(len(rows)),
                     fn(self.run.params, *(g[str(j)] for j in range(len(parts)))))

    def _dispatch_packed(self, fn, ids, mask, subset: np.ndarray, lengths: np.ndarray,
                         row_len: int, dispatch) -> None:
        """Rows ``subset`` packed into rows of ``row_len`` (``inputs.packing``; docs/scale.md
        "Packed export"): one assignment over all of them (best fit), then calls of S data
        shards x ``shard_rows`` packed rows (:func:`packed_calls`), as many token slots per
        call as a padded batch at full length (on a CPU, at most ``call_tokens``). Each
        shard's rows are laid out on their own, so its ``starts`` index its own tokens; a shard
        takes at most ``row_len // 8`` passages a row, which fixes the ``starts`` length
        (unused entries gather token 0 and are dropped)."""
        full = ids.shape[1]
        shards = self.run.mesh.shape["data"]
        max_segments = max(2, row_len // 8)
        rows = packing.assign_rows(lengths[subset], row_len, max_segments)
        shard_rows = max(1, self.batch_size * full // (row_len * shards))
        if self.call_tokens:
            shard_rows = max(1, min(shard_rows, self.call_tokens // row_len))
        hosts, me = jax.process_count(), jax.process_index()
        mine = range(me * shards // hosts, (me + 1) * shards // hosts)
        for lo, size in packed_calls(len(rows), shard_rows, shards):
            per = size * max_segments
            fields: dict[str, list[np.ndarray]] = {k: [] for k in
                                                  ("ids", "mask", "seg", "pos", "starts")}
            members, takes = [], []
            for s in range(shards):
                shard = rows[lo + s * size:lo + (s + 1) * size]
                sel = np.array(sorted(i for row in shard for i in row), np.int64)
                members.append(subset[sel])
                takes.append(s * per + np.arange(len(sel)))
                if s not in mine:
                    continue
                # layout over the shard's own passages: renumber the assignment into them.
                where = {int(i): k for k, i in enumerate(sel)}
                b = packing.layout(ids[subset[sel]], mask[subset[sel]],
                                   [[where[i] for i in row] for row in shard], row_len,
                                   num_rows=size)
                starts = np.zeros(per, np.int32)
                starts[:len(sel)] = b.starts
                for k, a in (("ids", b.ids), ("mask", b.mask), ("seg", b.segment_ids),
                             ("pos", b.position_ids), ("starts", starts)):
                    fields[k].append(a)
            passages = sum(len(m) for m in members)
            self.tokens += shards * size * row_len
            self.tokens_at_max += passages * full
            self.packed_passages += passages
            local = {k: np.stack(v).astype(np.int32 if k != "ids" else ids.dtype)
                     for k, v in fields.items()}
            g = mesh_lib.global_batch(local, self.run.mesh)
            dispatch(np.concatenate(members), np.concatenate(takes),
                     fn(self.run.params, g["ids"], g["mask"], g["seg"], g["pos"], g["starts"]))

    def padding_removed(self) -> float:
        """Share of the token positions of full padding not encoded so far."""
        return bucket_lib.padding_removed(self.tokens, self.tokens_at_max)

    def questions(self, ids, mask, *, progress: Progress | None = None) -> np.ndarray:
        return self._encode(self._q, ids, mask, packed_fn=self._q_packed, progress=progress)

    def passages(self, ids, mask, *, progress: Progress | None = None) -> np.ndarray:
        if self.run.method.unit != "passage":
            raise NotImplementedError(
                f"this is a {self.run.method.unit}-level run ({self.run.method.name}): a passage "
                "has no single vector (docs/method.md §4). Retrieval works (it ranks passages "
                "by HasAns over their sentences); passage-level AAR / robustness are not "
                "supported for such runs (see docs/dcsr.md).")
        return self._encode(self._p, ids, mask, packed_fn=self._p_packed, progress=progress)

    def sentences(self, ids, mask, positions, *, progress: Progress | None = None) -> np.ndarray:
        """float32 [n, S, D]: passage-encoder outputs at ``positions`` [n, S] (docs/method.md §4)."""
        return self._encode(self._s, ids, mask, np.asarray(positions, np.int32),
                            progress=progress)


def encode_questions(run, questions: Sequence[str], *, batch_size: int = 64,
                     encoder: Encoder | None = None) -> np.ndarray:
    """float32 [Q, D] question embeddings."""
    encoder = encoder or Encoder(run, batch_size)
    prefix = None
    sentences = run.method.sentence_index(run.config)
    if sentences is not None and sentences.question_prefix:
        prefix = run.tokenizer.token_to_id(sentences.token)
    ids, mask = tokenize_questions(run.tokenizer, questions, run.config.data.max_q_len,
                                   prefix_id=prefix)
    return encoder.questions(ids, mask)


def plan_length_batches(lengths: np.ndarray, buckets: Sequence[int],
                        rows_at: Callable[[int], int]) -> list[tuple[np.ndarray, int, int]]:
    """``[(row indices, padded length, batch rows)]``: rows longest first (as
    ``inputs.buckets.plan_batches``), each batch ``rows_at(length)`` rows, ``length`` the bucket
    of its longest row. A batch's size is set by its longest row; the batch's bucket is then
    that of its own longest row."""
    lengths = np.asarray(lengths, np.int64)
    order = np.argsort(-lengths, kind="stable")
    out, lo = [], 0
    while lo < len(order):
        length = bucket_lib.fit_bucket(int(lengths[order[lo]]), buckets)
        size = rows_at(length)
        out.append((order[lo:lo + size], length, size))
        lo += size
    return out


def plan_token_batches(lengths: np.ndarray, buckets: Sequence[int], batch_size: int,
                       token_budget: int, multiple: int = 1) -> list[tuple[np.ndarray, int, int]]:
    """:func:`plan_length_batches` with as many rows as ``token_budget`` tokens allow at each
    bucket length (at least ``batch_size``, a multiple of ``multiple``), so short buckets run
    larger batches at a fixed token count (gpu-levers.md §5.2 lever 4)."""
    return plan_length_batches(
        lengths, buckets, lambda length: max(batch_size, token_budget // length // multiple * multiple))


class ShardWriter:
    """Writes shards on one background thread while the next shard encodes (gpu-levers.md
    §5.2 lever 5); ``background=False`` writes at once. Writes keep their order; at most one
    waits behind the one being written, and an error is raised at the next submit or wait."""

    def __init__(self, background: bool) -> None:
        self._pool = (concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="export-write")
                      if background else None)
        self._pending: list[concurrent.futures.Future] = []

    def submit(self, fn, *args, **kwargs) -> None:
        if self._pool is None:
            fn(*args, **kwargs)
            return
        self._pending.append(self._pool.submit(fn, *args, **kwargs))
        while len(self._pending) > 1:
            self._pending.pop(0).result()

    def wait(self) -> None:
        try:
            while self._pending:
                self._pending.pop(0).result()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)


def encode_in_slices(fn, *arrays: np.ndarray, encoder=None, progress: Progress | None = None
                     ) -> np.ndarray:
    """``fn(*arrays)`` (an encoder method) called on slices of rows, counting rows in ``progress``.

    Slices are a multiple of the encoder's batch size, so without length buckets, a CPU call
    cap or packing every batch holds the same rows as one call over all rows would: the vectors
    are identical, only progress is reported in between (with any of them, each slice is
    planned on its own: equal within float tolerance). Works with any encoder whose methods
    take row arrays (``batch_size`` defaults to 128).
    """
    n = len(arrays[0])
    rows = int(getattr(encoder, "batch_size", 128)) * 8
    if n <= rows:
        out = fn(*arrays)
        if progress is not None:
            progress.update(n)
        return out
    parts = []
    for lo in range(0, n, rows):
        parts.append(fn(*(a[lo:lo + rows] for a in arrays)))
        if progress is not None:
            progress.update(len(parts[-1]))
    return np.concatenate(parts)


def encode_rows(fn, *arrays: np.ndarray, encoder=None, progress: Progress | None = None
                ) -> np.ndarray:
    """``fn(*arrays)`` over all rows: an :class:`Encoder` method takes them at once (its length
    buckets sort all of them) and counts batches in ``progress``; any other encoder's through
    :func:`encode_in_slices`."""
    if isinstance(encoder, Encoder):
        return fn(*arrays, progress=progress)
    return encode_in_slices(fn, *arrays, encoder=encoder, progress=progress)


def _token_counts(encoder) -> tuple[int, int]:
    """(tokens encoded, tokens at full padding) so far; (0, 0) for encoders that do not count."""
    return int(getattr(encoder, "tokens", 0)), int(getattr(encoder, "tokens_at_max", 0))


def _len_or_none(rows) -> int | None:
    """The row count where ``rows`` knows it (a list, a corpus), for progress totals."""
    try:
        return len(rows)
    except TypeError:
        return None


def _chunks(rows: Iterable[tuple[str, str, str]], size: int) -> Iterator[list[tuple[str, str, str]]]:
    chunk = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


FINGERPRINT_FORMAT = "sha256 of netstrings id,title,text per row (v1)"


def _rows_bytes(chunk: Sequence[tuple[str, str, str]]) -> bytes:
    """Rows (id, text, title) as netstrings ``len:field`` in the order id, title, text: unambiguous
    for any text (tabs, newlines, NULs), and one join + encode per shard."""
    return "".join(f"{len(p)}:{p}{len(ti)}:{ti}{len(tx)}:{tx}" for p, tx, ti in chunk
                   ).encode("utf-8", "surrogatepass")


def rows_fingerprint(rows: Iterable[tuple[str, str, str]], *, source: str | None = None) -> dict:
    """The content fingerprint an export manifest stores as ``corpus``: sha256 over the rows
    (id, text, title) in order, their count and ``source`` (a name; not part of the identity)."""
    n = 0

    def blobs() -> Iterator[bytes]:
        nonlocal n
        for chunk in _chunks(rows, 10_000):
            n += len(chunk)
            yield _rows_bytes(chunk)

    sha = files.content_sha256(blobs())
    return {"sha256": sha, "passages": n, "format": FINGERPRINT_FORMAT, "source": source}


def describe_corpus(fingerprint: dict) -> str:
    """``source (N passages, sha256 abcdef…)`` for messages."""
    return (f"{fingerprint.get('source') or 'an unnamed corpus'} ({fingerprint['passages']} "
            f"passages, sha256 {fingerprint['sha256'][:16]}…)")


def _read_json(path: str) -> dict | None:
    """:func:`files.read_json`, but only a JSON object counts (anything else is foreign)."""
    out = files.read_json(path)
    return out if isinstance(out, dict) else None


def _shards_ahead(exp: "_ShardedExport", rows: Iterable[tuple[str, str, str]], tokenize,
                  *kinds: tuple[str, str, str]) -> Iterator[tuple]:
    """``(k, chunk, names, stored, record, tokens)`` per shard, in order (``exp.check``'s
    ``stored``/``record``; ``tokens`` a future of ``tokenize(chunk)``, None for a reused shard).

    Rows are hashed and checked in order on the calling thread; tokenising runs on a background
    thread one shard ahead, so it overlaps the encoding of the shard before it (the tokenizer
    and the encoder both release the GIL).
    """
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="export-tokenize") as pool:
        ahead = None
        for k, chunk in exp.shards(rows):
            names = exp.names(k, *kinds)
            stored, record = exp.check(k, chunk, names)
            job = (k, chunk, names, stored, record,
                   pool.submit(tokenize, chunk) if stored is None else None)
            if ahead is not None:
                yield ahead
            ahead = job
        if ahead is not None:
            yield ahead


class _ShardedExport:
    """Content-keyed, resumable shard bookkeeping shared by both exports (module docstring).

    Host 0 decides whether a shard is reused and broadcasts it (encoding is a collective);
    every host hashes the rows it streams, so every host can raise the same error.
    """

    _KEY = ("rows_sha256", "passages", "shard_size", "settings")

    def __init__(self, out_dir: str, settings: dict, shard_size: int, source: str | None):
        os.makedirs(out_dir, exist_ok=True)
        self.out_dir, self.settings, self.source = out_dir, settings, source
        self.writer = jax.process_index() == 0
        previous = _read_json(self.path(MANIFEST))
        if previous is not None and not isinstance(previous.get("corpus"), dict):
            logging.warning("export: %s predates corpus fingerprints; its shards cannot be "
                            "verified against this corpus and are re-encoded", out_dir)
            previous = None
        self.previous = previous  # a complete export of a known corpus: never overwritten
        self.sums = self._recorded_sums()  # {file name: sha256} of the last finished export
        self.reused: set[str] = set()      # names of the shard files kept (checked) this run
        first = _read_json(self.path(shard_name("shard", 0, "json"))) or {}
        kept = (previous or {}).get("shard_size") or first.get("shard_size")
        if kept and int(kept) != shard_size:
            logging.warning("export: %s was written with shard_size=%d; keeping it (not %d)",
                            out_dir, kept, shard_size)
            shard_size = int(kept)
        self.shard_size = shard_size
        self.hash = hashlib.sha256()  # = rows_fingerprint's, fed shard by shard
        self.passages = 0
        self._incomplete = False
        self._warned_settings = False

    def path(self, name: str) -> str:
        return os.path.join(self.out_dir, name)

    def _recorded_sums(self) -> dict[str, str]:
        if not os.path.exists(self.path(files.SUMS_NAME)):
            return {}
        sums = files.read_sums(self.path(files.SUMS_NAME))
        if self.previous is not None and MANIFEST in sums:  # trusted for reuse and conflicts
            verify_export(self.out_dir, [MANIFEST])
        return sums

    def _write_sums(self, names: Iterable[str], known: dict[str, str]) -> dict[str, str]:
        return files.write_sums(self.path(files.SUMS_NAME), [self.path(n) for n in names], known)

    def shards(self, rows: Iterable[tuple[str, str, str]]):
        return enumerate(_chunks(rows, self.shard_size))

    def names(self, k: int, *kinds: tuple[str, str, str]) -> dict[str, str]:
        names = {"embeddings": shard_name("embeddings", k, "npy"), "ids": shard_name("ids", k, "npy"),
                 "pids": shard_name("pids", k, "txt"), "record": shard_name("shard", k, "json")}
        names.update({key: shard_name(prefix, k, ext) for key, prefix, ext in kinds})
        return names

    def check(self, k: int, chunk: Sequence[tuple[str, str, str]], names: dict[str, str]
              ) -> tuple[dict | None, dict]:
        """(stored record if the finished shard holds exactly these rows, else None; new record).

        Raises when the shard would overwrite a shard of a complete export of other rows.
        """
        data = _rows_bytes(chunk)
        self.hash.update(data)
        record = {"rows_sha256": files.content_sha256([data]), "passages": len(chunk),
                  "first_passage": self.passages, "shard_size": self.shard_size,
                  "settings": self.settings}
        self.passages += len(chunk)
        stored, code, damaged = None, 0, ""
        if self.writer:
            stored, code = self._decide(k, record, names)
            if code == 1:  # a kept shard's files must be the ones its export recorded
                try:
                    verify_export(self.out_dir, [n for n in names.values() if n in self.sums])
                except files.IntegrityError as e:
                    code, damaged = 3, str(e)
        if jax.process_count() > 1:
            code = int(multihost_utils.broadcast_one_to_all(np.asarray(code, np.int32)))
            if code == 1 and stored is None:  # other hosts read the record host 0 accepted
                stored = _read_json(self.path(names["record"]))
        if code == 3:
            raise files.IntegrityError(damaged or f"shard {k} of {self.out_dir} is damaged "
                                       "(process 0 names the file)")
        if code == 1:
            self.reused.update(names.values())
        if code == 2:
            raise ValueError(self._conflict(f"differs from it in passages {record['first_passage']}"
                                            f"-{self.passages - 1} (shard {k})"))
        return (stored if code == 1 else None), record

    def _decide(self, k: int, record: dict, names: dict[str, str]) -> tuple[dict | None, int]:
        stored = _read_json(self.path(names["record"]))
        if stored is not None and all(stored.get(f) == record[f] for f in self._KEY) and \
                all(os.path.exists(self.path(f)) for f in names.values()):
            try:
                rows = len(np.load(self.path(names["embeddings"]), mmap_mode="r"))
            except (OSError, ValueError):
                rows = -1
            if rows == stored.get("rows"):
                return stored, 1
        prev = self.previous
        if prev is not None and k < len(prev.get("shards", [])) and \
                prev["shards"][k].get("rows_sha256") != record["rows_sha256"]:
            return None, 2
        if stored is not None and stored.get("rows_sha256") == record["rows_sha256"] and \
                stored.get("settings") != record["settings"] and not self._warned_settings:
            logging.warning("export: %s was encoded with %s; re-encoding with %s", self.out_dir,
                            stored.get("settings"), record["settings"])
            self._warned_settings = True
        return None, 0

    def _conflict(self, how: str) -> str:
        return (f"{self.out_dir} holds the complete export of another corpus: "
                f"{describe_corpus(self.previous['corpus'])}. The corpus being exported "
                f"({self.source or 'rows passed in'}) {how}. Reusing the export would pair vectors "
                f"with the wrong passages and overwriting it would destroy it: export this corpus "
                f"into another directory (e.g. another workdir), or delete "
                f"{self.path(MANIFEST)} to re-export here (shards of unchanged rows are kept).")

    def write(self, names: dict[str, str], record: dict, emb: np.ndarray, *,
              arrays: dict[str, np.ndarray], texts: dict[str, str]) -> None:
        """Host 0 writes a shard; its embeddings go last (their presence marks it done)."""
        if not self.writer:
            return
        if not self._incomplete:  # from now on the directory is no complete export
            files.remove_if_exists(self.path(MANIFEST))
            self._incomplete = True
        files.remove_if_exists(self.path(names["embeddings"]))  # a crash below: not "done"
        if any(n in self.sums for n in names.values()):  # their recorded hashes are stale now
            self.sums = {n: h for n, h in self.sums.items() if n not in names.values()}
            self._write_sums(self.sums, self.sums)
        for key, arr in arrays.items():
            files.atomic_save_npy(self.path(names[key]), arr)
        for key, text in texts.items():
            with files.atomic_open(self.path(names[key])) as f:
                f.write(text)
        files.write_json(self.path(names["record"]), dict(record, rows=int(len(emb))), indent=None)
        files.atomic_save_npy(self.path(names["embeddings"]), emb)

    def finish(self, shards: list[dict], fields: dict) -> dict:
        """Writes the manifest (host 0) after removing shards beyond the last one."""
        corpus = {"sha256": self.hash.hexdigest(), "passages": self.passages,
                  "format": FINGERPRINT_FORMAT, "source": self.source}
        prev = self.previous
        same = prev is not None and prev["corpus"].get("sha256") == corpus["sha256"]
        if prev is not None and not same and len(prev.get("shards", [])) > len(shards):
            raise ValueError(self._conflict(f"is a prefix of it ({self.passages} passages)"))
        if same and not self.source:  # keep the name a caller with a path gave it
            corpus["source"] = prev["corpus"].get("source")
        manifest = {"corpus": corpus, "settings": self.settings, "shard_size": self.shard_size,
                    "shards": shards, **fields}
        if self.writer:
            # Index builders list every embeddings-K.npy: leftovers of a longer export must go,
            # and so must temp files of a killed writer (this host is the directory's only one).
            for name in os.listdir(self.out_dir):
                m = SHARD_FILE_RE.fullmatch(name)
                if (m and int(m.group(1)) >= len(shards)) or files.is_tmp_name(name):
                    files.remove_if_exists(self.path(name))
            # Checksums of the shards before the manifest marks the export complete; a shard
            # kept this run has the hash it was checked against, a new one is read back.
            names = [n for sh in shards for n in sh.values()
                     if isinstance(n, str) and SHARD_FILE_RE.fullmatch(n)]
            known = {n: self.sums[n] for n in self.reused if n in self.sums}
            known = self._write_sums(names, known)
            files.write_json(self.path(MANIFEST), manifest)
            self._write_sums(names + [MANIFEST], known)
        return manifest


def export_passages(run, rows: Iterable[tuple[str, str, str]], out_dir: str, *,
                    shard_size: int = 100_000, batch_size: int = 128, dtype: str = "float16",
                    max_p_len: int | None = None, encoder: Encoder | None = None,
                    source: str | None = None, num_rows: int | None = None,
                    tokenize: Any = None, background_write: bool = False) -> dict:
    """Encodes ``rows`` = (id, text, title) into shards in ``out_dir``; reuses finished shards
    of the same rows and settings (module docstring). ``source`` names the corpus (e.g. its
    path) in the manifest and in errors; ``num_rows`` (the row count, when ``rows`` is a stream)
    only gives progress lines their ETA. ``tokenize`` (rows -> padded ids, mask) replaces
    ``tokenize_passages``, e.g. ``retrieval.token_table.TokenTable.tokenize``; it must give the
    same arrays (the shard key does not record it). ``background_write`` writes each shard on
    a :class:`ShardWriter` thread while the next one encodes.

    Returns the manifest. float16 halves disk and RAM (scores change by ~1e-3 relative); use
    float32 for exact reproducibility of scores.
    """
    if dtype not in ("float16", "float32"):
        raise ValueError(f"dtype must be float16 or float32, got {dtype!r}")
    max_p_len = max_p_len or run.config.data.max_p_len
    settings = {"unit": "passage", "input_format": INPUT_FORMAT, "step": int(run.step),
                "dim": int(run.model.config.hidden_size),
                "dtype": dtype, "max_p_len": int(max_p_len)}
    exp = _ShardedExport(out_dir, settings, shard_size, source)
    encoder = encoder or Encoder(run, batch_size)
    shards, total, done_rows, t0, encoded = [], 0, 0, time.perf_counter(), 0
    counts0 = _token_counts(encoder)

    def padding_removed() -> float:
        (tokens, at_max), (tokens0, at_max0) = _token_counts(encoder), counts0
        return bucket_lib.padding_removed(tokens - tokens0, at_max - at_max0)

    progress = Progress("export passages", num_rows if num_rows is not None else _len_or_none(rows),
                        unit="passages", enabled=exp.writer)

    writer = ShardWriter(background_write)

    def tokenize_rows(chunk):
        return tokenize_passages(run.tokenizer, [r[2] for r in chunk], [r[1] for r in chunk],
                                 max_p_len)

    for k, chunk, names, stored, record, tokens in _shards_ahead(exp, rows,
                                                                 tokenize or tokenize_rows):
        shards.append(dict(names, count=len(chunk), rows_sha256=record["rows_sha256"]))
        if stored is not None:
            logging.info("export: shard %d already done, skipped", k)
            total += len(chunk)
            done_rows += len(chunk)
            progress.skip(len(chunk))
            continue
        ids, mask = tokens.result()
        # The whole shard at once: sorting it by length fills the buckets best.
        emb = encode_rows(encoder.passages, ids, mask, encoder=encoder,
                          progress=progress).astype(dtype)
        writer.submit(exp.write, names, record, emb,
                      arrays={"ids": np.arange(total, total + len(chunk), dtype=np.int64)},
                      texts={"pids": "".join(r[0] + "\n" for r in chunk)})
        total += len(chunk)
        encoded += len(chunk)
        dt = time.perf_counter() - t0
        logging.info("export: shard %d written, %d passages (%d this run) at %.1f passages/s, "
                     "%.1f%% of padded token positions not computed", k, total, encoded,
                     encoded / max(dt, 1e-9), 100 * padding_removed())
    writer.wait()
    progress.done()
    return exp.finish(shards, {
        "count": total, "dim": settings["dim"], "dtype": dtype, "max_p_len": max_p_len,
        "step": int(run.step), "encoded_this_run": encoded, "skipped_done": done_rows,
        "passages_per_s": encoded / max(time.perf_counter() - t0, 1e-9),
        "padding_removed": padding_removed()})


def export_sentences(run, rows: Iterable[tuple[str, str, str]], out_dir: str, *,
                     shard_size: int = 100_000, batch_size: int = 128, dtype: str = "float16",
                     max_p_len: int | None = None, max_sents: int | None = None,
                     encoder: Encoder | None = None, source: str | None = None,
                     num_rows: int | None = None) -> dict:
    """DCSR export (docs/method.md §4): every contextual sentence of ``rows`` = (id, text, title).

    Passages are tokenised as in training (``dense_cf.inputs.tokens``), encoded
    once, and the vectors at their valid ``<sent>`` markers (at most ``max_sents``) become rows.
    A passage without any valid sentence (empty text) is indexed by its [CLS] vector so it stays
    retrievable (counted). Shards hold ``shard_size`` passages; reuse, resume and ``num_rows`` as
    in :func:`export_passages`. Returns the manifest.
    """
    if dtype not in ("float16", "float32"):
        raise ValueError(f"dtype must be float16 or float32, got {dtype!r}")
    cfg = run.config
    si = run.method.sentence_index(cfg)
    if si is None:
        raise ValueError(f"method {run.method.name!r} indexes passages, not sentences")
    max_p_len = max_p_len or cfg.data.max_p_len
    max_sents = max_sents or si.max_sents
    settings = {"unit": "sentence", "input_format": INPUT_FORMAT, "step": int(run.step),
                "dim": int(run.model.config.hidden_size), "dtype": dtype,
                "max_p_len": int(max_p_len), "max_sents": int(max_sents),
                "title": si.title}
    exp = _ShardedExport(out_dir, settings, shard_size, source)
    encoder = encoder or Encoder(run, batch_size)
    shards: list[dict] = []
    n_sent = n_pass = done = encoded = dropped = no_sent = 0
    t0 = time.perf_counter()
    progress = Progress("export sentences", num_rows if num_rows is not None else _len_or_none(rows),
                        unit="passages", enabled=exp.writer)

    def tokenize(chunk):
        return tokenize_marked_passages(run.tokenizer, [r[2] for r in chunk],
                                        [r[1] for r in chunk], max_len=max_p_len,
                                        max_sents=max_sents, title=si.title,
                                        sent_token=si.token)

    for k, chunk, names, stored, record, tokens in _shards_ahead(
            exp, rows, tokenize, ("sentence_pids", "spids", "npy")):
        if stored is not None:
            logging.info("export: sentence shard %d already done, skipped", k)
            shards.append(dict(names, count=int(stored["rows"]), passages=len(chunk),
                               rows_sha256=record["rows_sha256"]))
            n_sent += int(stored["rows"])
            n_pass += len(chunk)
            done += len(chunk)
            progress.skip(len(chunk))
            continue
        tok = tokens.result()
        valid = tok["valid"].copy()
        empty = ~valid.any(axis=1)
        valid[empty, 0] = True  # positions are 0 there: the [CLS] vector
        no_sent += int(empty.sum())
        dropped += tok["dropped"]
        # Encode in slices and keep only valid rows at once: [n, max_sents, D] for a whole
        # shard would be ~10 GB at 100k passages x 32 x 768 float32. Slices of rows sorted by
        # length (one argsort per shard) keep the length buckets full.
        order = (np.argsort(-bucket_lib.row_lengths(tok["mask"]), kind="stable")
                 if getattr(encoder, "length_buckets", ()) else np.arange(len(chunk)))
        parts, step = [None] * len(chunk), encoder.batch_size * 8
        for lo in range(0, len(chunk), step):
            sl = order[lo:lo + step]
            vecs = encoder.sentences(tok["ids"][sl], tok["mask"][sl], tok["positions"][sl])
            for i, v, ok in zip(sl, vecs, valid[sl]):
                parts[i] = v[ok].astype(dtype)                     # row-major: by passage
            progress.update(len(vecs))
        emb = np.concatenate(parts)
        exp.write(names, record, emb,
                  arrays={"ids": np.arange(n_sent, n_sent + len(emb), dtype=np.int64),
                          "sentence_pids": (n_pass + np.nonzero(valid)[0]).astype(np.int64)},
                  texts={"pids": "".join(r[0] + "\n" for r in chunk)})
        shards.append(dict(names, count=len(emb), passages=len(chunk),
                           rows_sha256=record["rows_sha256"]))
        n_sent += len(emb)
        n_pass += len(chunk)
        encoded += len(chunk)
        logging.info("export: sentence shard %d written, %d passages / %d sentences (%d passages "
                     "this run) at %.1f passages/s", k, n_pass, n_sent, encoded,
                     encoded / max(time.perf_counter() - t0, 1e-9))
    progress.done()
    if dropped:
        logging.warning("export: %d sentences beyond max_sents=%d were not indexed", dropped,
                        max_sents)
    return exp.finish(shards, {
        "unit": "sentence", "count": n_sent, "passages": n_pass,
        "mean_sentences_per_passage": n_sent / max(n_pass, 1), "dim": settings["dim"],
        "dtype": dtype, "max_p_len": max_p_len, "max_sents": max_sents,
        "title": si.title, "step": int(run.step), "encoded_this_run": encoded,
        "skipped_done": done, "dropped_sentences_this_run": dropped,
        "cls_only_passages_this_run": no_sent,
        "passages_per_s": encoded / max(time.perf_counter() - t0, 1e-9)})


def load_sentence_passages(out_dir: str) -> np.ndarray:
    """int64 [sentences]: the passage row (corpus order) of every exported sentence row."""
    verify_export(out_dir)
    with open(os.path.join(out_dir, MANIFEST)) as f:
        manifest = json.load(f)
    if manifest.get("unit") != "sentence":
        raise ValueError(f"{out_dir} is a passage export, not a DCSR sentence export")
    return np.concatenate([np.load(os.path.join(out_dir, s["sentence_pids"]))
                           for s in manifest["shards"]] or [np.zeros(0, np.int64)])


def load_passage_ids(out_dir: str) -> list[str]:
    """Corpus ids in row order, from an export directory."""
    verify_export(out_dir)
    with open(os.path.join(out_dir, MANIFEST)) as f:
        manifest = json.load(f)
    out: list[str] = []
    for s in manifest["shards"]:
        with open(os.path.join(out_dir, s["pids"])) as f:
            out.extend(line.rstrip("\n") for line in f)
    return out


def load_embeddings(out_dir: str) -> np.ndarray:
    """All embeddings (float32) of an export, in row order (small corpora/tests)."""
    verify_export(out_dir)
    with open(os.path.join(out_dir, MANIFEST)) as f:
        manifest = json.load(f)
    return np.concatenate([np.load(os.path.join(out_dir, s["embeddings"])).astype(np.float32)
                           for s in manifest["shards"]])
