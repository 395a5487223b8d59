"""Retrieval evaluation of a trained run: export → index → search → DPR-exact metrics (SPEC §6).

``python -m dense_cf.eval.retrieval --workdir DIR [--corpus F] [--qa F] [--index flat] [--k 100]``

Writes to ``DIR/eval/step_<N>/``: ``retrieval.json`` (DPR's result format: question, answers,
ctxs with id/title/text/score/has_answer), ``run.trec`` + ``qrels.trec`` (pyserini/trec_eval),
``report.json`` (top-k, MRR, per-question first-hit ranks) and ``report.md``. Embeddings go to
``DIR/export/step_<N>/`` and the index to ``DIR/index/step_<N>_<kind>/``; both are reused (and
an interrupted export resumes) when the command is run again on the same corpus. Reuse is keyed
by the corpus content (sha256 over ids, titles and texts, see :mod:`dense_cf.export`), not by
row counts: an export of another corpus in ``DIR/export/step_<N>/`` is an error naming both
corpora, never reused. The index records the export it was built from (``export_source.json``:
corpus fingerprint, settings, row count) and is rebuilt when that differs (or is missing, as
in indexes built before it existed).

DCSR runs (``method == "dcsr"``, SPEC §4) go through the same command and reports: the export
holds one vector per contextual sentence, the top ``ceil(k · k̄)`` sentences are retrieved
(k̄ = mean sentences per passage), softmaxed per question and aggregated into passage scores
HasAns(P) = 1 − Π(1 − p_i) (:mod:`dense_cf.eval.sentence_ranking`); the top k passages are then
scored exactly as DPR's (``score`` in the result files is HasAns).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import time
from typing import Any, Sequence

import numpy as np
from absl import app, flags, logging

FLAGS = flags.FLAGS

from dense_cf.data.formats import SkipReport, read_corpus_tsv, read_qa_csv
from dense_cf.eval import metrics as metrics_lib
from dense_cf.eval import report as report_lib
from dense_cf.eval import results as results_lib


@dataclasses.dataclass
class Corpus:
    ids: list[str]
    texts: list[str]
    titles: list[str]
    path: str | None = None  # where it was read from: named in manifests and errors

    def __len__(self) -> int:
        return len(self.ids)

    def rows(self):
        return zip(self.ids, self.texts, self.titles)


def data_path(config, key: str, override: str | None = None) -> str:
    name = override or config.data.get(key)
    if not name:
        raise ValueError(f"no file given for {key}: pass it on the command line or set config.data.{key}")
    path = name if os.path.isabs(name) or os.path.exists(name) else os.path.join(config.data.data_dir, name)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{key} not found: {path} (SPEC §8 lists DPR's public files; get them with "
            f"python -m dense_cf.data.prepare --datasets nq --splits test,gold,corpus "
            f"--data_dir {config.data.data_dir}, see docs/datasets.md)")
    return path


def file_tag(path: str) -> str:
    """``<stem>-<hash of path, size, mtime>``: a directory name for caches of one corpus file."""
    st = os.stat(path)
    h = hashlib.sha1(json.dumps([os.path.abspath(path), st.st_size, st.st_mtime_ns]).encode())
    return f"{os.path.basename(path).split('.')[0]}-{h.hexdigest()[:10]}"


def corpus_root(workdir: str, config, corpus_path: str, subdir: str = "corpora") -> str:
    """Where exports/indexes of ``corpus_path`` live: the run's own corpus (config.data.corpus_file)
    uses ``workdir/{export,index}``; any other corpus gets ``workdir/<subdir>/<file_tag>/`` so the
    run's own export is never overwritten (reuse is content-keyed either way)."""
    try:
        own = os.path.abspath(data_path(config, "corpus_file"))
    except (ValueError, FileNotFoundError):
        own = None
    if own == os.path.abspath(corpus_path):
        return workdir
    return os.path.join(workdir, subdir, file_tag(corpus_path))


def load_corpus(path: str) -> Corpus:
    """The whole corpus in memory (texts are needed for has_answer and the result file)."""
    report = SkipReport()
    ids, texts, titles = [], [], []
    for pid, text, title in read_corpus_tsv(path, skip_bad=True, report=report):
        ids.append(pid)
        texts.append(text)
        titles.append(title)
    if report.total:
        report.log()
    logging.info("corpus %s: %d passages, %d rows skipped", path, len(ids), report.total)
    return Corpus(ids, texts, titles, path=os.path.abspath(path))


def load_qa(path: str) -> tuple[list[str], list[list[str]]]:
    report = SkipReport()
    qs, ans = [], []
    for q, a in read_qa_csv(path, skip_bad=True, report=report):
        qs.append(q)
        ans.append(a)
    if report.total:
        report.log()
    logging.info("questions %s: %d, %d rows skipped", path, len(qs), report.total)
    return qs, ans


INDEX_SOURCE = "export_source.json"


def _index_source(manifest: dict) -> dict:
    """What an index was built from: the export's corpus, settings and row count."""
    return {"corpus_sha256": manifest["corpus"]["sha256"],
            "passages": manifest["corpus"]["passages"], "rows": manifest["count"],
            "settings": manifest["settings"]}


def load_or_build_index(export_dir: str, index_dir: str, kind: str, manifest: dict):
    """The index of ``export_dir`` (its ``manifest``): loaded from ``index_dir`` when it was
    built from that same export, else built and saved there. Returns ``(index, reused)``."""
    from dense_cf.index.faiss_index import (DenseIndex, IndexSpec, build_index_from_dir,
                                            is_saved_index)

    want = _index_source(manifest)
    source_path = os.path.join(index_dir, INDEX_SOURCE)
    reused = False
    if is_saved_index(index_dir):
        try:
            with open(source_path) as f:
                reused = json.load(f) == want
        except (OSError, ValueError):
            reused = False
        if not reused:
            logging.info("index %s was not built from the export in %s (or predates %s): "
                         "rebuilding", index_dir, export_dir, INDEX_SOURCE)
    if reused:
        index = DenseIndex.load(index_dir)
    else:
        with contextlib.suppress(FileNotFoundError):  # a crash while saving must not leave
            os.remove(source_path)                     # the old record next to a new index
        index = build_index_from_dir(export_dir, IndexSpec(kind=kind))
        index.save(index_dir)
        report_lib.write_json(source_path, want)  # last: marks the index as built from it
    if index.ntotal != manifest["count"]:
        raise RuntimeError(f"index {index_dir} has {index.ntotal} vectors, the export in "
                           f"{export_dir} {manifest['count']} rows: delete the stale index")
    return index, reused


def _export_and_index(run, corpus, workdir: str, *, sentences: bool, kind: str, batch_size: int,
                      dtype: str, shard_size: int, encoder):
    """Exports ``corpus`` into ``workdir/export/step_N`` (resumable, content-keyed) and loads or
    builds its index in ``workdir/index/step_N_<kind>``; returns ``(index, timing, manifest)``."""
    from dense_cf import export

    export_dir = os.path.join(workdir, "export", f"step_{run.step}")
    index_dir = os.path.join(workdir, "index", f"step_{run.step}_{kind}")
    fn = export.export_sentences if sentences else export.export_passages
    t0 = time.perf_counter()
    manifest = fn(run, corpus.rows(), export_dir, shard_size=shard_size, batch_size=batch_size,
                  dtype=dtype, encoder=encoder, source=getattr(corpus, "path", None))
    export_s = time.perf_counter() - t0
    if manifest["corpus"]["passages"] != len(corpus):
        raise RuntimeError(f"export in {export_dir} has {manifest['corpus']['passages']} "
                           f"passages, corpus {len(corpus)}")
    t0 = time.perf_counter()
    index, reused = load_or_build_index(export_dir, index_dir, kind, manifest)
    timing = {"export_s": export_s, "export_passages_per_s": manifest["passages_per_s"],
              "encoded_this_run": manifest["encoded_this_run"],
              "index_s": time.perf_counter() - t0, "index_reused": reused}
    return index, timing, manifest


def ensure_index(run, corpus: Corpus, workdir: str, *, kind: str, batch_size: int,
                 dtype: str, shard_size: int, encoder=None):
    """Exports the corpus (resumable) and builds or loads the index for this checkpoint.

    Reuses ``workdir/export/step_N`` and the index only when they hold this corpus (module
    docstring); raises ``ValueError`` naming both corpora when the export is of another one.
    """
    index, timing, _ = _export_and_index(run, corpus, workdir, sentences=False, kind=kind,
                                         batch_size=batch_size, dtype=dtype,
                                         shard_size=shard_size, encoder=encoder)
    return index, timing


def ensure_sentence_index(run, corpus: Corpus, workdir: str, *, kind: str, batch_size: int,
                          dtype: str, shard_size: int, encoder=None):
    """DCSR: exports every contextual sentence (resumable) and builds or loads their index.

    Returns ``(index, timing, sentence→passage rows, mean sentences per passage)``; reuse as in
    :func:`ensure_index`.
    """
    from dense_cf import export

    index, timing, manifest = _export_and_index(run, corpus, workdir, sentences=True, kind=kind,
                                                batch_size=batch_size, dtype=dtype,
                                                shard_size=shard_size, encoder=encoder)
    sentence_passage = export.load_sentence_passages(
        os.path.join(workdir, "export", f"step_{run.step}"))
    return index, timing, sentence_passage, float(manifest["mean_sentences_per_passage"])


def retrieve_by_sentences(index, q_emb: np.ndarray, corpus: Corpus, k: int,
                          sentence_passage: np.ndarray, n_sentences: int
                          ) -> list[list[tuple[str, str, str, float]]]:
    """DCSR: top-k (id, title, text, HasAns) per question from the top ``n_sentences``."""
    from dense_cf.eval.sentence_ranking import rank_passages
    scores, rows = index.search(np.asarray(q_emb, np.float32), n_sentences)
    p_rows, vals = rank_passages(scores, rows, sentence_passage, k)
    return [[(corpus.ids[r], corpus.titles[r], corpus.texts[r], float(v)) for r, v in zip(pr, pv)]
            for pr, pv in zip(p_rows, vals)]


def retrieve(index, q_emb: np.ndarray, corpus: Corpus, k: int) -> list[list[tuple[str, str, str, float]]]:
    """Top-k (id, title, text, score) per question."""
    scores, rows = index.search(np.asarray(q_emb, np.float32), k)
    out = []
    for s_row, r_row in zip(scores, rows):
        out.append([(corpus.ids[r], corpus.titles[r], corpus.texts[r], float(s))
                    for s, r in zip(s_row, r_row) if r >= 0])
    return out


def evaluate_run(workdir: str, *, corpus_path: str | None = None, qa_path: str | None = None,
                 index_kind: str | None = None, k: int | None = None, run=None,
                 out_dir: str | None = None) -> dict[str, Any]:
    """The full retrieval evaluation of a run; returns the report dict (also written to disk)."""
    from dense_cf import export
    from dense_cf.train.loop import load_run

    run = run or load_run(workdir)
    cfg = run.config
    kind = index_kind or cfg.eval.index
    k = k or cfg.eval.k
    ks = tuple(int(x) for x in cfg.eval.ks)
    corpus_file = data_path(cfg, "corpus_file", corpus_path)
    corpus = load_corpus(corpus_file)
    questions, answers = load_qa(data_path(cfg, "test_file", qa_path))
    root = corpus_root(workdir, cfg, corpus_file)  # another corpus: its own export/index/eval dirs
    encoder = export.Encoder(run, cfg.eval.batch_size)
    extra: dict[str, Any] = {}
    if export.is_sentence_run(run):
        from dense_cf.eval.sentence_ranking import num_sentences_to_retrieve
        index, timing, sent_pid, kbar = ensure_sentence_index(
            run, corpus, root, kind=kind, batch_size=cfg.eval.batch_size,
            dtype=cfg.eval.embedding_dtype, shard_size=cfg.eval.shard_size, encoder=encoder)
        n_sent = min(num_sentences_to_retrieve(k, kbar, int(cfg.dcsr.retrieve_sentences)),
                     len(sent_pid))
        extra = {"unit": "sentence", "sentences": int(len(sent_pid)),
                 "mean_sentences_per_passage": kbar, "sentences_retrieved": n_sent}
        t0 = time.perf_counter()
        q_emb = export.encode_questions(run, questions, encoder=encoder)
        retrieved = retrieve_by_sentences(index, q_emb, corpus, k, sent_pid, n_sent)
    else:
        index, timing = ensure_index(run, corpus, root, kind=kind, batch_size=cfg.eval.batch_size,
                                     dtype=cfg.eval.embedding_dtype, shard_size=cfg.eval.shard_size,
                                     encoder=encoder)
        t0 = time.perf_counter()
        q_emb = export.encode_questions(run, questions, encoder=encoder)
        retrieved = retrieve(index, q_emb, corpus, k)
    timing["search_s"] = time.perf_counter() - t0
    rep = metrics_lib.evaluate_retrieval(questions, answers, retrieved, mode=cfg.data.answer_mode,
                                         ks=ks)
    out_dir = out_dir or os.path.join(root, "eval", f"step_{run.step}")
    os.makedirs(out_dir, exist_ok=True)
    results_lib.write_dpr_results(os.path.join(out_dir, "retrieval.json"), questions, answers,
                                  retrieved, rep["hits"], mode=cfg.data.answer_mode)
    qids = [str(i) for i in range(len(questions))]
    results_lib.write_trec_run(os.path.join(out_dir, "run.trec"), qids, retrieved,
                               run_name=f"dense_cf_{cfg.method}")
    results_lib.write_trec_qrels(os.path.join(out_dir, "qrels.trec"), qids, rep["hits"], retrieved)
    summary = {"workdir": os.path.abspath(workdir), "method": cfg.method, "step": run.step,
               "index": kind, "k": k, "corpus_size": len(corpus), "n_questions": rep["n_questions"],
               "top_k": rep["top_k"], "mrr": rep["mrr"], "mode": rep["mode"], "timing": timing,
               **extra}
    report_lib.write_json(os.path.join(out_dir, "report.json"),
                          dict(summary, first_hit_rank=rep["first_hit_rank"]))
    row = {"method": cfg.method, "step": run.step, **{f"top-{kk}": rep["top_k"][kk] for kk in ks},
           "MRR": 100 * rep["mrr"]}
    table = report_lib.markdown_table([row], list(row))
    report_lib.write_markdown(os.path.join(out_dir, "report.md"), f"Retrieval: {workdir}",
                              [("Top-k accuracy (%) and MRR (×100)", table),
                               ("Setup", f"index={kind}, k={k}, corpus={len(corpus)} passages, "
                                         f"questions={rep['n_questions']}"
                                         + (f"; DCSR: {extra['sentences']} sentences indexed, "
                                            f"top {extra['sentences_retrieved']} retrieved, "
                                            f"passages ranked by HasAns" if extra else ""))])
    logging.info("retrieval %s step %d: %s MRR=%.4f", cfg.method, run.step,
                 {kk: round(v, 2) for kk, v in rep["top_k"].items()}, rep["mrr"])
    return summary


def main(argv: Sequence[str]) -> None:
    del argv
    import tensorflow as tf
    tf.config.set_visible_devices([], "GPU")
    summary = evaluate_run(FLAGS.workdir, corpus_path=FLAGS.corpus, qa_path=FLAGS.qa,
                           index_kind=FLAGS.index, k=FLAGS.k)
    print(json.dumps(summary, indent=2, default=float))


if __name__ == "__main__":
    # Flags are defined only when run as a program: the module is also a library.
    flags.DEFINE_string("workdir", None, "Run directory (trained with dense_cf.main).")
    flags.DEFINE_string("corpus", None, "Corpus TSV (default: the run's config).")
    flags.DEFINE_string("qa", None, "Test qa CSV (default: the run's config).")
    flags.DEFINE_string("index", None, "flat | hnsw | ivfpq | sq8 | ivfsq (default: config).")
    flags.DEFINE_integer("k", None, "Passages per question (default: config).")
    flags.mark_flag_as_required("workdir")
    app.run(main)
