"""Answer-awareness (AAR, AA score) of a trained run (docs/method.md §5).

    python -m dense_cf.cli.eval_aar --workdir DIR [--gold F] [--qa F] [--strategies sentence,answer]

Builds (q, p+, p*) triplets from the gold passages with the training counterfactual code,
writes ``DIR/eval/step_<N>/aar.{json,md}`` and ``aar_hist.png`` and prints AAR and the number
of triplets per strategy as JSON. Also ``python -m dense_cf.eval.aar``. Decisions:
:mod:`dense_cf.eval.aar`.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from absl import flags, logging

from dense_cf.cli import _app
from dense_cf.console import import_tensorflow
from dense_cf.eval.aar import evaluate_aar
from dense_cf.files import workdir_lock

FLAGS = flags.FlagValues()

_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (trained with dense_cf.main).",
                               required=True, flag_values=FLAGS)
_GOLD = flags.DEFINE_string("gold", None, "Gold passages info JSON (default: config).",
                            flag_values=FLAGS)
_QA = flags.DEFINE_string("qa", None, "Test qa CSV with the answers (default: config).",
                          flag_values=FLAGS)
_STRATEGIES = flags.DEFINE_list("strategies", None, "Counterfactual strategies "
                                "(default: config).", flag_values=FLAGS)


def main(argv: Sequence[str]) -> dict[str, Any]:
    """Evaluates the run; prints AAR and triplet counts per strategy, returns the result."""
    _app.no_positional(argv)
    tf = import_tensorflow()
    tf.config.set_visible_devices([], "GPU")   # tf.data must not grab accelerators JAX owns
    with workdir_lock(_WORKDIR.value, "eval_aar", warn=logging.warning):
        res = evaluate_aar(_WORKDIR.value, gold_path=_GOLD.value, qa_path=_QA.value,
                           strategies=_STRATEGIES.value)
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk in ("aar", "triplets", "triplet_fates")}
                      for k, v in res["strategies"].items()}, indent=2, default=float))
    _app.say_written(res["out_dir"])
    return res


def run_cli(argv: Sequence[str]) -> dict[str, Any]:
    """``main`` in-process on ``argv`` (flags, no program name); returns the result."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
