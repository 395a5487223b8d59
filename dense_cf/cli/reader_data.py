"""A retriever's results on the train / dev questions, for training a reader (docs/readers.md).

    python -m dense_cf.cli.reader_data --retriever RUN --split train [--qa FILE] [--k 100] \\
        [--max_questions N] [--out DIR]

Retrieves the top ``k`` passages of every ``--split`` question (the run's ``data.train_file`` /
``dev_file`` / ``test_file``, or ``--qa``: a biencoder JSON or qa CSV) with the run's export and
index (reused), and writes ``RUN/reader_data/step_N/<split>/retrieval.json`` (DPR's results
format) with a top-k report. Point the reader at it: ``--config.reader.train_file=...``. Prints
the summary as JSON. Decisions: :mod:`dense_cf.mining.reader_data`.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from absl import flags, logging

from dense_cf import app as _app
from dense_cf.cli import _model_flags
from dense_cf.files import workdir_lock
from dense_cf.mining.reader_data import SPLIT_FILES, reader_data

FLAGS = flags.FlagValues()
_RETRIEVER = flags.DEFINE_string("retriever", None, "A trained retriever run directory.",
                                 required=True, flag_values=FLAGS)
_SPLIT = flags.DEFINE_enum("split", "train", list(SPLIT_FILES), "Whose questions: the run's "
                           "data.<split>_file (or --qa).", flag_values=FLAGS)
_QA = flags.DEFINE_string("qa", None, "Questions and answers: a biencoder JSON or a qa CSV; "
                          "HotpotQA JSON for a two-hop run (default: the run's file of --split).", flag_values=FLAGS)
_K = flags.DEFINE_integer("k", None, "Passages per question (default: the run's eval.k); "
                          "chains for a two-hop run (default: multihop.top_chains).",
                          flag_values=FLAGS)
_MAX_Q = flags.DEFINE_integer("max_questions", 0, "Only the first N questions (0: all).",
                              flag_values=FLAGS)
_OUT = flags.DEFINE_string("out", None, "Output directory (default: "
                           "RUN/reader_data/step_N/<split>).", flag_values=FLAGS)
_INDEX = _model_flags.define_data_flags(
    FLAGS, "index", index=_model_flags.index_help("the run's eval.index"))["index"]
_CORPUS = flags.DEFINE_string("corpus", None, "Corpus TSV (default: the run's).",
                              flag_values=FLAGS)
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: latest).",
                             flag_values=FLAGS)


def main(argv: Sequence[str]) -> dict[str, Any]:
    """Writes the results file; prints and returns the summary."""
    _app.no_positional(argv)
    with workdir_lock(_RETRIEVER.value, "reader_data", warn=logging.warning):
        summary = reader_data(_RETRIEVER.value, _SPLIT.value, qa_path=_QA.value, k=_K.value,
                              max_questions=_MAX_Q.value, out_dir=_OUT.value,
                              index_kind=_INDEX.value, corpus_path=_CORPUS.value, step=_STEP.value)
    print(json.dumps({k: v for k, v in summary.items() if k != "timing"}, indent=2, default=str))
    _app.say_written(summary["out_dir"], "reader data")
    return summary


def run_cli(argv: Sequence[str]) -> dict[str, Any]:
    """``main`` in-process on ``argv`` (flags, no program name); returns the summary."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
