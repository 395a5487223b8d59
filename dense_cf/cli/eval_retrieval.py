"""Retrieval evaluation of a trained run: export → index → search → DPR metrics (docs/method.md §6).

    python -m dense_cf.cli.eval_retrieval --workdir DIR [--corpus F] [--qa F] [--index flat] \
        [--k 100]

Writes ``DIR/eval/step_<N>/`` (DPR result JSON, TREC run/qrels, the report as JSON
and markdown: ``dense_cf.eval.outcomes.REPORT``), reusing the
run's export and index, and prints the summary as JSON. Also ``python -m
dense_cf.eval.retrieval``. Decisions: :mod:`dense_cf.eval.retrieval`.

Any encoder, untrained: ``--model NAME_OR_DIR [--question_model DIR] [--pooling auto|cls|mean]
[--config configs/demo.py | --data_dir D]`` instead of ``--workdir`` writes to
``model_eval/<model>-<pooling>-<hash>/eval/step_0/`` (``--out_root``; see :mod:`dense_cf.cli._model_flags`).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from absl import flags, logging

from dense_cf import app as _app
from dense_cf.cli import _model_flags
from dense_cf.eval.retrieval import evaluate_run
from dense_cf.files import workdir_lock

__all__ = ["FLAGS", "USAGE", "main", "run_cli"]

USAGE = __doc__

FLAGS = flags.FlagValues()

_model_flags.define_model_flags(FLAGS)  # --workdir RUN | --model CHECKPOINT
_DATA = _model_flags.define_data_flags(FLAGS, "corpus", "qa", "index",
                                       qa="Test qa CSV (default: the run's config).")
_K = flags.DEFINE_integer("k", None, "Passages per question (default: config).",
                          flag_values=FLAGS)
_REBUILD = flags.DEFINE_bool(
    "rebuild_changed_corpus", False, "When the corpus file changed since its passage store and "
    "export were made (an edited passage, reordered rows), rebuild them from it instead of "
    "refusing (unchanged export shards are kept).", flag_values=FLAGS)


def main(argv: Sequence[str]) -> dict[str, Any]:
    """Evaluates the run; prints and returns the summary."""
    _app.no_positional(argv)
    workdir, run = _model_flags.workdir_and_run(FLAGS)
    with workdir_lock(workdir, "eval_retrieval", warn=logging.warning):
        summary = evaluate_run(workdir, run=run, corpus_path=_DATA["corpus"].value, qa_path=_DATA["qa"].value,
                               index_kind=_DATA["index"].value, k=_K.value,
                               rebuild_changed_corpus=_REBUILD.value)
    print(json.dumps(summary, indent=2, default=float))
    _app.say_written(summary["out_dir"])
    return summary


def run_cli(argv: Sequence[str]) -> dict[str, Any]:
    """``main`` in-process on ``argv`` (flags, no program name); returns the summary."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, USAGE)
