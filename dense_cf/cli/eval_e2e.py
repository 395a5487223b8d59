"""End-to-end QA: a trained reader over retrievers' saved top-k passages (docs/readers.md).

    python -m dense_cf.cli.eval_e2e --retriever RUN [--retriever RUN2 ...] --reader READER_RUN \
        [--k 1,5,20,100] [--names DPR,PiCL] [--out DIR]

Also ``python -m dense_cf.eval.e2e``. ``--retriever`` is a retriever run directory (its latest
``eval/step_N/retrieval.json``; ``--retriever_step`` for another), an eval directory, or a
``retrieval.json`` (DPR's results format). Writes ``READER_RUN/e2e/step_N/`` (``--out``):
the report (markdown and JSON: EM and F1 at each k with 95 % intervals, PiCL's Table 3 layout,
EM against AAR, EM by question type, McNemar between retrievers) and per retriever
``<label>/`` its per-question outcomes (``python -m dense_cf.eval.compare`` pairs two of them)
and ``predictions.json``; the file names are ``dense_cf.eval.outcomes``'. Prints the markdown.
"""

from __future__ import annotations

from typing import Any, Sequence

from absl import app, flags, logging

from dense_cf import app as _app
from dense_cf.eval.e2e import evaluate_e2e
from dense_cf.files import workdir_lock

__all__ = ["FLAGS", "USAGE", "main", "run_cli"]

USAGE = __doc__

FLAGS = flags.FlagValues()
_RETRIEVERS = flags.DEFINE_multi_string("retriever", [], "A retriever run directory, eval "
                                        "directory or retrieval.json; repeat for several (the "
                                        "first is the baseline of the paired tests).",
                                        flag_values=FLAGS)
_READER = flags.DEFINE_string("reader", None, "The reader run directory.", flag_values=FLAGS)
_KS = flags.DEFINE_list("k", ["1", "5", "20", "100"], "Passages read per question.",
                        flag_values=FLAGS)
_NAMES = flags.DEFINE_list("names", None, "Labels of the retrievers, in --retriever order "
                           "(default: each run's method).", flag_values=FLAGS)
_OUT = flags.DEFINE_string("out", None, "Report directory (default: READER/e2e/step_N).",
                           flag_values=FLAGS)
_READER_STEP = flags.DEFINE_integer("reader_step", None, "Reader checkpoint (default: latest).",
                                    flag_values=FLAGS)
_RETRIEVER_STEP = flags.DEFINE_integer("retriever_step", None, "Evaluation step of every "
                                       "retriever run directory (default: latest).",
                                       flag_values=FLAGS)
_BATCH = flags.DEFINE_integer("batch_size", 64, "Rows (question, passage) per reader call.",
                              flag_values=FLAGS)
_MAX_Q = flags.DEFINE_integer("max_questions", 0, "Read only the first N questions (0: all).",
                              flag_values=FLAGS)
_MODE = flags.DEFINE_enum("answer_mode", None, ["string", "regex"], "EM rules (default: the "
                          "reader run's data.answer_mode; regex for CuratedTREC).",
                          flag_values=FLAGS)


def main(argv: Sequence[str]) -> dict[str, Any]:
    """Evaluates; prints the markdown and returns the result."""
    _app.no_positional(argv)
    if not _RETRIEVERS.value or not _READER.value:
        raise app.UsageError("give --reader READER_RUN and at least one --retriever")
    try:
        ks = [int(k) for k in _KS.value]
    except ValueError as e:
        raise app.UsageError(f"--k takes integers, got {_KS.value}") from e
    with workdir_lock(_READER.value, "eval_e2e", warn=logging.warning):
        result = evaluate_e2e(_RETRIEVERS.value, _READER.value, ks=ks, names=_NAMES.value,
                              out_dir=_OUT.value, reader_step=_READER_STEP.value,
                              retriever_step=_RETRIEVER_STEP.value, batch_size=_BATCH.value,
                              max_questions=_MAX_Q.value, answer_mode=_MODE.value)
    print(result["markdown"])
    _app.say_written(result["out_dir"])
    return result


def run_cli(argv: Sequence[str]) -> dict[str, Any]:
    """``main`` in-process on ``argv`` (flags, no program name); returns the result."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, USAGE)
