"""A trained run's retriever: export a corpus → index it → rank passages for questions.

The export (``dense_cf.retrieval.export``) and the index are reused when the command runs again
on the same corpus: reuse is keyed by the corpus content, and the index records the export it
was built from (``export_source.json``: corpus fingerprint, settings, row count) and is
rebuilt when that differs, or when the build settings ``config.eval.index_nlist`` /
``index_pq_m`` / ``index_train_size`` differ; ``eval.index_nprobe`` and ``eval.rerank`` (exact
re-ranking from the memory-mapped export, ``dense_cf.index.rerank``, docs/scale.md) apply at
search time.
:func:`retriever_for_run` picks the method's retrieval unit:
passages are searched directly; sentence-level runs (DCSR, docs/method.md §4) retrieve the top
``ceil(k · k̄)`` sentences and rank passages by HasAns (``sentence_ranking``).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any

import numpy as np
from absl import logging

from dense_cf.files import write_json
from dense_cf.index import kinds
from dense_cf.index.base import is_saved_index
from dense_cf.index.rerank import RerankIndex
from dense_cf.retrieval import export
from dense_cf.retrieval.corpus import Corpus, StoredCorpus
from dense_cf.retrieval.sentence_ranking import num_sentences_to_retrieve, rank_passages
from dense_cf.train.run import Run, RunDir

INDEX_SOURCE = "export_source.json"


def _index_source(manifest: dict) -> dict:
    """What an index was built from: the export's corpus, settings and row count."""
    return {"corpus_sha256": manifest["corpus"]["sha256"],
            "passages": manifest["corpus"]["passages"], "rows": manifest["count"],
            "settings": manifest["settings"]}


def index_spec(eval_cfg: Any, kind: str) -> Any:
    """The spec of index ``kind`` that ``config.eval`` asks for (docs/scale.md): a faiss kind's
    ``index_nlist`` / ``index_pq_m`` (0 = the defaults), ``index_train_size`` and
    ``index_nprobe``; ``jax``'s ``eval.jax`` (``kinds.spec_from_config``)."""
    return kinds.spec_from_config(kind, eval_cfg)


def _searchable(index, export_dir: str, rerank: int):
    """``index``, wrapped to re-rank ``rerank`` > 0 candidates exactly from the export shards."""
    return RerankIndex(index, export_dir, int(rerank)) if rerank else index


def open_saved_index(index_dir: str, export_dir: str, spec: Any, rerank: int = 0):
    """An index saved by :func:`load_or_build_index` (for callers that drop it and reload it
    later), with the same search-time settings (``spec``'s, and ``rerank``)."""
    return _searchable(kinds.load(index_dir, spec=spec), export_dir, rerank)


def load_or_build_index(export_dir: str, index_dir: str, kind: str, manifest: dict, *,
                        spec: Any = None, rerank: int = 0):
    """The index of ``export_dir`` (its ``manifest``): loaded from ``index_dir`` when it was
    built from that same export with the same build settings (``spec``, default the kind's
    default spec; ``spec.build_record()``), else built and saved there; the spec's search-time
    settings (a faiss ``nprobe``) apply either way. ``rerank`` > 0 wraps the index in a
    :class:`RerankIndex` over ``export_dir`` (that many candidates re-scored exactly from the
    memory-mapped shards). Returns ``(index, reused)``."""
    spec = spec if spec is not None else kinds.spec(kind)
    if spec.kind != kind:
        raise ValueError(f"spec.kind={spec.kind!r} but kind={kind!r}")
    want = dict(_index_source(manifest), **spec.build_record())
    source_path = os.path.join(index_dir, INDEX_SOURCE)
    reused = False
    if is_saved_index(index_dir):
        try:
            with open(source_path) as f:
                stored = json.load(f)
            # A record without "index" predates it: the index was built with the kind's
            # default spec.
            stored.setdefault("index", kinds.spec(kind).build_record()["index"])
            reused = stored == want
        except (OSError, ValueError, AttributeError):
            reused = False
        if not reused:
            logging.info("index %s was not built from the export in %s with these settings (or "
                         "predates %s): rebuilding", index_dir, export_dir, INDEX_SOURCE)
    if reused:
        index = kinds.load(index_dir, spec=spec)
    else:
        with contextlib.suppress(FileNotFoundError):  # a crash while saving must not leave
            os.remove(source_path)                     # the old record next to a new index
        index = kinds.build(export_dir, spec)
        index.save(index_dir)
        write_json(source_path, want)  # last: marks the index as built from it
    if index.ntotal != manifest["count"]:
        raise RuntimeError(f"index {index_dir} has {index.ntotal} vectors, the export in "
                           f"{export_dir} {manifest['count']} rows: delete the stale index")
    return _searchable(index, export_dir, rerank), reused


def export_corpus(run, corpus, workdir: str, *, sentences: bool, batch_size: int, dtype: str,
                  shard_size: int, encoder=None) -> tuple[dict, float]:
    """Exports ``corpus`` (``len`` and streamed ``rows()``) into ``workdir/export/step_N``, the
    run's passage or sentence vectors by its unit (resumable, content-keyed); returns
    ``(manifest, seconds)``."""
    export_dir = RunDir(workdir).export(run.step)
    fn = export.export_sentences if sentences else export.export_passages
    t0 = time.perf_counter()
    manifest = fn(run, corpus.rows(), export_dir, shard_size=shard_size, batch_size=batch_size,
                  dtype=dtype, encoder=encoder, source=getattr(corpus, "path", None),
                  num_rows=len(corpus))
    if manifest["corpus"]["passages"] != len(corpus):
        raise RuntimeError(f"export in {export_dir} has {manifest['corpus']['passages']} "
                           f"passages, corpus {len(corpus)}")
    return manifest, time.perf_counter() - t0


def _export_and_index(run, corpus, workdir: str, *, sentences: bool, kind: str, batch_size: int,
                      dtype: str, shard_size: int, encoder):
    """Exports ``corpus`` (:func:`export_corpus`) and loads or builds its index in
    ``workdir/index/step_N_<kind>``; returns ``(index, timing, manifest)``."""
    export_dir = RunDir(workdir).export(run.step)
    index_dir = RunDir(workdir).index(run.step, kind)
    manifest, export_s = export_corpus(run, corpus, workdir, sentences=sentences,
                                       batch_size=batch_size, dtype=dtype,
                                       shard_size=shard_size, encoder=encoder)
    t0 = time.perf_counter()
    cfg = run.config.eval
    index, reused = load_or_build_index(export_dir, index_dir, kind, manifest,
                                        spec=index_spec(cfg, kind), rerank=int(cfg.rerank))
    timing = {"export_s": export_s, "export_passages_per_s": manifest["passages_per_s"],
              "encoded_this_run": manifest["encoded_this_run"],
              "index_s": time.perf_counter() - t0, "index_reused": reused}
    return index, timing, manifest


def ensure_index(run, corpus: Corpus | StoredCorpus, workdir: str, *, kind: str, batch_size: int,
                 dtype: str, shard_size: int, encoder=None):
    """Exports the corpus (resumable) and builds or loads the index for this checkpoint.

    Reuses ``workdir/export/step_N`` and the index only when they hold this corpus (module
    docstring); raises ``ValueError`` naming both corpora when the export is of another one.
    """
    index, timing, _ = _export_and_index(run, corpus, workdir, sentences=False, kind=kind,
                                         batch_size=batch_size, dtype=dtype,
                                         shard_size=shard_size, encoder=encoder)
    return index, timing


def ensure_sentence_index(run, corpus: Corpus | StoredCorpus, workdir: str, *, kind: str, batch_size: int,
                          dtype: str, shard_size: int, encoder=None):
    """DCSR: exports every contextual sentence (resumable) and builds or loads their index.

    Returns ``(index, timing, sentence→passage rows, mean sentences per passage)``; reuse as in
    :func:`ensure_index`.
    """
    index, timing, manifest = _export_and_index(run, corpus, workdir, sentences=True, kind=kind,
                                                batch_size=batch_size, dtype=dtype,
                                                shard_size=shard_size, encoder=encoder)
    sentence_passage = export.load_sentence_passages(RunDir(workdir).export(run.step))
    return index, timing, sentence_passage, float(manifest["mean_sentences_per_passage"])


def retrieve_by_sentences(index, q_emb: np.ndarray, corpus: Corpus | StoredCorpus, k: int,
                          sentence_passage: np.ndarray, n_sentences: int
                          ) -> list[list[tuple[str, str, str, float]]]:
    """DCSR: top-k (id, title, text, HasAns) per question from the top ``n_sentences``."""
    scores, rows = index.search(np.asarray(q_emb, np.float32), n_sentences)
    p_rows, vals = rank_passages(scores, rows, sentence_passage, k)
    return [[(*corpus.get(int(r)), float(v)) for r, v in zip(pr, pv)]
            for pr, pv in zip(p_rows, vals)]


def retrieve(index, q_emb: np.ndarray, corpus: Corpus | StoredCorpus, k: int
             ) -> list[list[tuple[str, str, str, float]]]:
    """Top-k (id, title, text, score) per question."""
    scores, rows = index.search(np.asarray(q_emb, np.float32), k)
    out = []
    for s_row, r_row in zip(scores, rows):
        out.append([(*corpus.get(int(r)), float(s)) for s, r in zip(s_row, r_row) if r >= 0])
    return out




class Retriever:
    """Ranked passages of a run over one corpus: ``search(q_emb, k)`` → per question a list of
    (id, title, text, score). ``timing`` and ``extra`` describe the export/index for reports."""

    unit = "passage"

    def __init__(self, run: Run, corpus: Corpus | StoredCorpus, root: str, *, kind: str, k: int,
                 encoder: export.Encoder | None = None):
        cfg = run.config.eval
        self.run, self.corpus = run, corpus
        self.encoder = encoder or export.Encoder(run, cfg.batch_size)
        self.extra: dict[str, Any] = {}
        self._setup(root, kind=kind, k=k, batch_size=cfg.batch_size, dtype=cfg.embedding_dtype,
                    shard_size=cfg.shard_size)

    def _setup(self, root: str, *, kind: str, k: int, **kw) -> None:
        self.index, self.timing = ensure_index(self.run, self.corpus, root, kind=kind,
                                               encoder=self.encoder, **kw)

    def encode_questions(self, questions) -> np.ndarray:
        return export.encode_questions(self.run, questions, encoder=self.encoder)

    def search(self, q_emb: np.ndarray, k: int) -> list[list[tuple[str, str, str, float]]]:
        return retrieve(self.index, q_emb, self.corpus, k)


class SentenceRetriever(Retriever):
    """Sentence-level runs: top ``ceil(k · k̄)`` sentences, passages ranked by HasAns."""

    unit = "sentence"

    def _setup(self, root: str, *, kind: str, k: int, **kw) -> None:
        self.index, self.timing, self.sentence_passage, kbar = ensure_sentence_index(
            self.run, self.corpus, root, kind=kind, encoder=self.encoder, **kw)
        self.n_sentences = min(
            num_sentences_to_retrieve(k, kbar,
                                      self.run.method.sentence_index(self.run.config).retrieve_sentences),
            len(self.sentence_passage))
        self.extra = {"unit": "sentence", "sentences": int(len(self.sentence_passage)),
                      "mean_sentences_per_passage": kbar,
                      "sentences_retrieved": self.n_sentences}

    def search(self, q_emb: np.ndarray, k: int) -> list[list[tuple[str, str, str, float]]]:
        return retrieve_by_sentences(self.index, q_emb, self.corpus, k, self.sentence_passage,
                                     self.n_sentences)


def retriever_for_run(run: Run, corpus: Corpus | StoredCorpus, root: str, *, kind: str, k: int,
                      encoder: export.Encoder | None = None) -> Retriever:
    """The retriever of the run's method unit (passage or sentence) over ``corpus``, with its
    export and index under ``root`` (reused when they hold this corpus)."""
    cls = SentenceRetriever if run.method.unit == "sentence" else Retriever
    return cls(run, corpus, root, kind=kind, k=k, encoder=encoder)
