"""Multi-hop retrieval evaluation of an MDR run (docs/multihop.md; EADPR §4.3 Tables 4/5).

    python -m dense_cf.cli.eval_multihop --workdir RUN [--qa F] [--corpus F] [--index flat] \
        [--beam_size 20] [--hop2_k 20] [--top_chains 20] [--max_questions N] \
        [--reader READER_RUN [--reader_ks 1,5,10]]

Exports and indexes the run's corpus (reused when unchanged), runs the two-hop beam search over
the questions of a HotpotQA-format file and writes ``RUN/eval/step_<N>/`` (the report as
JSON and markdown, chains.json, per-hop AAR scores; with ``--reader`` the reader's answer EM/F1
over the top chains in the report, its per-question outcomes and predictions.json; file names:
``dense_cf.eval.outcomes``); prints the summary as JSON. Also ``python -m
dense_cf.eval.multihop``. Metrics and decisions: :mod:`dense_cf.eval.multihop`.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from absl import app, flags, logging

from dense_cf import app as _app
from dense_cf.cli import _model_flags
from dense_cf.eval.multihop import READER_KS, evaluate_multihop
from dense_cf.files import workdir_lock

__all__ = ["FLAGS", "USAGE", "main", "run_cli"]

USAGE = __doc__

FLAGS = flags.FlagValues()

_WORKDIR = flags.DEFINE_string("workdir", None, "The run directory.", flag_values=FLAGS)
_DATA = _model_flags.define_data_flags(
    FLAGS, "qa", "corpus", "index",
    qa="HotpotQA-format question file (default: the run's config.data.test_file).")
_BEAM = flags.DEFINE_integer("beam_size", None, "Hop-1 passages expanded (default: "
                             "config.multihop.beam_size).", flag_values=FLAGS)
_HOP2_K = flags.DEFINE_integer("hop2_k", None, "Hop-2 passages per beam (default: config).",
                               flag_values=FLAGS)
_TOP = flags.DEFINE_integer("top_chains", None, "Chains kept (default: config).",
                            flag_values=FLAGS)
_MAX_Q = flags.DEFINE_integer("max_questions", 0, "Evaluate the first N questions (0: all).",
                              flag_values=FLAGS)
_READER = flags.DEFINE_string("reader", None, "A trained reader run: answer EM/F1 over the top "
                              "chains (EADPR Table 5).", flag_values=FLAGS)
_READER_KS = flags.DEFINE_list("reader_ks", [str(k) for k in READER_KS], "Top-k chains the "
                               "reader reads (each k at most --top_chains).", flag_values=FLAGS)


def main(argv: Sequence[str]) -> dict[str, Any]:
    """Evaluates the run; prints and returns the summary."""
    _app.no_positional(argv)
    if not _WORKDIR.value:
        raise app.UsageError("--workdir is required")
    workdir = _WORKDIR.value
    with workdir_lock(workdir, "eval_multihop", warn=logging.warning):
        summary = evaluate_multihop(workdir, qa_path=_DATA["qa"].value, corpus_path=_DATA["corpus"].value,
                                    index_kind=_DATA["index"].value, beam_size=_BEAM.value,
                                    hop2_k=_HOP2_K.value, top_chains=_TOP.value,
                                    max_questions=_MAX_Q.value, reader=_READER.value,
                                    reader_ks=[int(k) for k in _READER_KS.value])
    print(json.dumps({k: v for k, v in summary.items() if k != "units"}, indent=2, default=float))
    _app.say_written(summary["out_dir"])
    return summary


def run_cli(argv: Sequence[str]) -> dict[str, Any]:
    """``main`` in-process on ``argv`` (flags, no program name); returns the summary."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, USAGE)
