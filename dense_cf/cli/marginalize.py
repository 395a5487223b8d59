"""Encoder marginalisation: attribute retrieval accuracy to question vs passage encoders (docs/method.md §7).

    python -m dense_cf.cli.marginalize --workdirs A B C ... --test FILE [--corpus FILE] \
        [--k 1,5,20,100] [--in_domain NAME] [--out DIR]

Pairs every question encoder of K trained runs with every passage encoder, prints the top-k
matrices with the encoders' marginal contributions (eq. 7) and writes its report
(``dense_cf.eval.outcomes.REPORT``), ``report.md`` and ``heatmap.png`` into ``--out``. Run
directories are ``DIR`` or ``DIR@STEP``;
``--workdirs`` takes a comma list, and the command's other arguments are further runs (so
``--workdirs A B C`` and ``--workdirs runs/frac*`` work as well). Decisions:
:mod:`dense_cf.eval.marginalize`.
"""

from __future__ import annotations

from typing import Any, Sequence

from absl import flags

from dense_cf import app as _app
from dense_cf.cli import _model_flags
from dense_cf.eval.marginalize import DEFAULT_KS, run_marginalization, summary_text

__all__ = ["FLAGS", "USAGE", "main", "run_cli"]

USAGE = __doc__

FLAGS = flags.FlagValues()

_WORKDIRS = flags.DEFINE_list("workdirs", None, "Run dirs (DIR or DIR@STEP); more may follow "
                              "as arguments.", required=True, flag_values=FLAGS)
_TEST = flags.DEFINE_string("test", None, "Test qa CSV (question \\t answers).", required=True,
                            flag_values=FLAGS)
_CORPUS = flags.DEFINE_string("corpus", None, "Corpus TSV (default: the first run's).",
                              flag_values=FLAGS)
_K = flags.DEFINE_list("k", [str(k) for k in DEFAULT_KS], "Top-k cut-offs.",
                       flag_values=FLAGS)
_IN_DOMAIN = flags.DEFINE_string("in_domain", None, "Run name or index whose tandem = 100%.",
                                 flag_values=FLAGS)
_INDEX = _model_flags.define_data_flags(
    FLAGS, "index", index=_model_flags.index_help("flat"))["index"]
_ANSWER_MODE = flags.DEFINE_enum("answer_mode", None, ["string", "regex"],
                                 "DPR has_answer mode (default: the first run's).",
                                 flag_values=FLAGS)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", None, "Encoding batch size (default: config).",
                                   flag_values=FLAGS)
_OUT = flags.DEFINE_string("out", None, "Report directory.", flag_values=FLAGS)


def main(argv: Sequence[str]) -> dict[str, Any]:
    """Cross-pairs the runs (``--workdirs`` and the arguments); prints and returns the report."""
    rep = run_marginalization(
        [*_WORKDIRS.value, *argv[1:]], _TEST.value, corpus_path=_CORPUS.value,
        ks=[int(x) for x in _K.value], out_dir=_OUT.value, in_domain=_IN_DOMAIN.value,
        index_kind=_INDEX.value or "flat", answer_mode=_ANSWER_MODE.value, batch_size=_BATCH_SIZE.value)
    print(summary_text(rep))
    _app.say_written(rep["out_dir"])
    return rep


def run_cli(argv: Sequence[str]) -> dict[str, Any]:
    """``main`` in-process on ``argv`` (flags and runs, no program name); returns the report."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, USAGE)
