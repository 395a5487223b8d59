"""Model-mined hard negatives from a trained run (ANCE-style one-shot refresh; PiCL Table 2's
"DPR negatives" row, docs/method.md §10).

``python -m dense_cf.cli.mine_model --workdir RUN --input biencoder.json[.gz]
--output out.json[.gz] [--corpus psgs_w100.tsv --k 100 --num_negatives 30 --skip_top 0
--index flat --existing replace|append --store_dir DIR]``

The run's latest (or ``--step``) checkpoint encodes the corpus (:func:`export.export_passages`,
resumable, in ``RUN/export/step_N/``) and a FAISS index is built or reused
(:func:`retrieval.retriever.ensure_index`, ``RUN/index/step_N_<kind>/``; a previous retrieval
evaluation on the same corpus is reused as is, an export of another corpus there is an error
naming both: reuse is keyed by the corpus content, see :mod:`dense_cf.retrieval.export`). Each question
of the input file is encoded with the question tower, the top ``k`` passages are retrieved by
inner product, the first ``skip_top`` ranks are dropped (RocketQA-style guard against false
negatives; 0 = off), and the first ``num_negatives`` passages that are neither a positive
(id, or title + text) nor answer-bearing (DPR ``has_answer``, docs/method.md §6) become
``hard_negative_ctxs`` with the model score as ``score``. Everything else is
:func:`mine_bm25.mine_file`: same filters, same DPR output format (docs/method.md §8), same resumable
shards and skip accounting.

Random access to passage texts uses a :class:`mine_bm25.PassageStore` (``--store_dir``, default
``RUN/mine/store``; a ``mine_bm25 --index_dir`` works too, it holds the same store).

Multi-host: every host encodes its slice of each batch (the export does the same); host 0
writes. Tested on one host with simulated devices only.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np
from absl import logging

from dense_cf.datasets import formats
from dense_cf.datasets.dpr import resolve_data_file
from dense_cf.mining.negatives import corpus_fingerprint, mine_file, open_store
from dense_cf.retrieval import export
from dense_cf.retrieval.corpus import StoredCorpus
from dense_cf.retrieval.retriever import ensure_index
from dense_cf.train.run import RunDir, load_run

__all__ = ["mine_model"]


def mine_model(workdir: str, input_path: str, output: str, *, corpus: str | None = None,
               k: int = 100, num_negatives: int = 30, skip_top: int = 0,
               step: int | None = None, index_kind: str | None = None,
               store_dir: str | None = None, answer_mode: str | None = None,
               existing: str = "replace", batch_size: int = 1024, shard_size: int = 5000,
               work_dir: str | None = None, keep_parts: bool = False, skip_bad: bool = True,
               run=None) -> dict[str, Any]:
    """Hard negatives retrieved by the run's model (see the module docstring); returns the summary.

    ``corpus`` and ``answer_mode`` default to the run's config (``data.corpus_file``,
    ``data.answer_mode``); ``index_kind`` to ``eval.index``. ``run`` skips ``load_run``.
    """
    if k < num_negatives + skip_top:
        raise ValueError(f"k ({k}) must be >= num_negatives + skip_top "
                         f"({num_negatives} + {skip_top})")
    run = run or load_run(workdir, step)
    cfg = run.config
    if run.method.unit != "passage":  # its export holds sentence vectors, not passages
        raise ValueError(f"{workdir} is a {run.method.unit}-level run ({cfg.method}): model "
                         f"mining needs a passage-level run (dpr, picl, eadpr)")
    corpus = resolve_data_file(cfg.data, "corpus_file", corpus)
    answer_mode = answer_mode or cfg.data.answer_mode
    kind = index_kind or cfg.eval.index
    store_report = formats.SkipReport()
    store = open_store(corpus, store_dir or os.path.join(RunDir(workdir).mine(), "store"),
                       skip_bad=skip_bad, report=store_report)
    if store_report.total:
        store_report.log()
    encoder = export.Encoder(run, cfg.eval.batch_size)
    index, timing = ensure_index(run, StoredCorpus(store, os.path.abspath(corpus)), workdir,
                                 kind=kind, batch_size=cfg.eval.batch_size,
                                 dtype=cfg.eval.embedding_dtype, shard_size=cfg.eval.shard_size,
                                 encoder=encoder)
    logging.info("model mining with %s step %d: index %s (%s)", workdir, run.step, kind, timing)

    def rank(questions: list[str]) -> list[list[tuple[int, float]]]:
        q = export.encode_questions(run, questions, encoder=encoder)
        scores, rows = index.search(np.asarray(q, np.float32), k)
        return [list(zip(r.tolist(), s.tolist())) for r, s in zip(rows, scores)]

    settings = {"kind": "model", "workdir": os.path.abspath(workdir), "step": int(run.step),
                "k": k, "index": kind, "embedding_dtype": cfg.eval.embedding_dtype,
                "corpus": {key: v for key, v in corpus_fingerprint(corpus).items()
                           if key != "mtime_ns"},  # content, not when it was last touched
                "corpus_passages": len(store)}
    summary = mine_file(input_path, output, rank=rank, lookup=store.get, settings=settings,
                        num_negatives=num_negatives, answer_mode=answer_mode, existing=existing,
                        min_score=None, skip_top=skip_top, shard_size=shard_size,
                        batch_size=batch_size, work_dir=work_dir, keep_parts=keep_parts,
                        skip_bad=skip_bad, writer=jax.process_index() == 0)
    summary["index_timing"] = timing
    summary["corpus_skipped_rows"] = store_report.total
    return summary


if __name__ == "__main__":  # the design card's command; its binary is cli/mine_model.py
    from dense_cf import app
    from dense_cf.cli import mine_model
    app.run(mine_model.main, mine_model.FLAGS, mine_model.USAGE)
