"""Paired comparison of two evaluated runs: ``python -m dense_cf.cli.compare RUN_A RUN_B``.

Also ``python -m dense_cf.eval.compare RUN_A RUN_B``. ``RUN`` is a run directory (its latest
``eval/step_N`` unless ``--step_a``/``--step_b``) or an eval directory. Prints the markdown
table of :mod:`dense_cf.analysis.compare`: every metric both runs saved, paired on the same
items (McNemar on rates such as top-k hits and AAR / AA outcomes, paired bootstrap on means such
as MRR and mean score gaps, 95 % intervals, significance at 0.05 in words); ``--out`` also
writes it, ``--json_out`` the raw numbers.
"""

from __future__ import annotations

import sys
from typing import Sequence

from absl import app, flags

from dense_cf import app as _app
from dense_cf.analysis.compare import compare
from dense_cf.eval import report as report_lib

__all__ = ["FLAGS", "USAGE", "main", "run_cli"]

USAGE = __doc__

FLAGS = flags.FlagValues()
_STEP_A = flags.DEFINE_integer("step_a", None, "Step of RUN_A's evaluation (default: latest).", flag_values=FLAGS)
_STEP_B = flags.DEFINE_integer("step_b", None, "Step of RUN_B's evaluation (default: latest).", flag_values=FLAGS)
_SEED = flags.DEFINE_integer("seed", 0, "Bootstrap seed.", flag_values=FLAGS)
_RESAMPLES = flags.DEFINE_integer("n_resamples", 10_000, "Bootstrap resamples.", flag_values=FLAGS)
_OUT = flags.DEFINE_string("out", None, "Also write the markdown report here.", flag_values=FLAGS)
_NAMES = flags.DEFINE_list("names", None, "Two labels for RUN_A and RUN_B in the table (default: "
                           "method and step), e.g. DPR,MiniLM-untrained.", flag_values=FLAGS)
_JSON_OUT = flags.DEFINE_string("json_out", None, "Also write the rows and notes as JSON here.", flag_values=FLAGS)


def main(argv: Sequence[str]) -> None:
    if len(argv) != 3:
        raise app.UsageError("usage: python -m dense_cf.cli.compare RUN_A RUN_B [flags]")
    names = _NAMES.value
    if names is not None and len(names) != 2:
        raise app.UsageError(f"--names takes two labels, got {len(names)}")
    try:
        result = compare(argv[1], argv[2], step_a=_STEP_A.value, step_b=_STEP_B.value,
                         seed=_SEED.value, n_resamples=_RESAMPLES.value, verbose=False,
                         names=tuple(names) if names else None)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(result["markdown"])
    if _OUT.value:
        with report_lib.atomic_open(_OUT.value) as f:
            f.write(result["markdown"])
        _app.say_written(_OUT.value, "report")
    if _JSON_OUT.value:
        report_lib.write_json(_JSON_OUT.value, {k: v for k, v in result.items()
                                                if k != "markdown"})
        _app.say_written(_JSON_OUT.value, "JSON")


def run_cli(argv: Sequence[str]) -> None:
    """``main`` in-process on ``argv`` (RUN_A RUN_B and flags, no program name)."""
    main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, USAGE)
