"""Answer-awareness (AAR, AA score) of a trained run (docs/method.md §5).

    python -m dense_cf.cli.eval_aar --workdir DIR [--gold F] [--qa F] [--strategies sentence,answer]

Builds (q, p+, p*) triplets from the gold passages with the training counterfactual code,
writes ``DIR/eval/step_<N>/aar.{json,md}`` and ``aar_hist.png`` and prints AAR and the number
of triplets per strategy as JSON. Also ``python -m dense_cf.eval.aar``. Decisions:
:mod:`dense_cf.eval.aar`.

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
from dense_cf.eval.aar import evaluate_aar
from dense_cf.files import workdir_lock

__all__ = ["FLAGS", "USAGE", "main", "run_cli"]

USAGE = __doc__

FLAGS = flags.FlagValues()

_model_flags.define_model_flags(FLAGS)  # --workdir RUN | --model CHECKPOINT
_DATA = _model_flags.define_data_flags(FLAGS, "gold", "qa")
_STRATEGIES = flags.DEFINE_list("strategies", None, "Counterfactual strategies "
                                "(default: config).", flag_values=FLAGS)


def main(argv: Sequence[str]) -> dict[str, Any]:
    """Evaluates the run; prints AAR and triplet counts per strategy, returns the result."""
    _app.no_positional(argv)
    workdir, run = _model_flags.workdir_and_run(FLAGS)
    with workdir_lock(workdir, "eval_aar", warn=logging.warning):
        res = evaluate_aar(workdir, run=run, gold_path=_DATA["gold"].value, qa_path=_DATA["qa"].value,
                           strategies=_STRATEGIES.value)
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk in ("aar", "triplets", "triplet_fates")}
                      for k, v in res["strategies"].items()}, indent=2, default=float))
    _app.say_written(res["out_dir"])
    return res


def run_cli(argv: Sequence[str]) -> dict[str, Any]:
    """``main`` in-process on ``argv`` (flags, no program name); returns the result."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, USAGE)
