"""Corpus coverage / positive passage overlap / unique passage coverage (docs/method.md §7).

    python -m dense_cf.cli.stats --input biencoder.json[.gz] [--threshold 2] [--alpha 1.3] \
        [--fractions 0.1,0.25,...,1.0] [--seed 0] [--positives first|all] [--out stats.json]

Prints a markdown table for the whole file and its nested random subsets (the subsets that
``config.data.train_fraction`` / ``train_fraction_seed`` train on); ``--out`` also writes the
JSON report. Definitions: :mod:`dense_cf.mining.stats`.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

from absl import flags

from dense_cf import app as _app
from dense_cf.files import write_json
from dense_cf.mining.stats import DEFAULT_FRACTIONS, file_stats, markdown

__all__ = ["FLAGS", "USAGE", "main", "run_cli"]

USAGE = __doc__

FLAGS = flags.FlagValues()

_INPUT = flags.DEFINE_string("input", None, "biencoder-*.json[.gz]", required=True,
                             flag_values=FLAGS)
_THRESHOLD = flags.DEFINE_integer(
    "threshold", 2, "A positive 'overlaps' when it is the positive of >= this many questions.",
    flag_values=FLAGS)
_ALPHA = flags.DEFINE_float("alpha", 1.3, "Exponent of (1 - overlap) in unique coverage.",
                            flag_values=FLAGS)
_FRACTIONS = flags.DEFINE_list("fractions", [str(f) for f in DEFAULT_FRACTIONS],
                               "Subset fractions (comma list).", flag_values=FLAGS)
_SEED = flags.DEFINE_integer("seed", 0, "Subset permutation seed "
                             "(= config.data.train_fraction_seed).", flag_values=FLAGS)
_POSITIVES = flags.DEFINE_enum("positives", "first", ["first", "all"],
                               "Count positive_ctxs[0] only (what training uses) or all.",
                               flag_values=FLAGS)
_OUT = flags.DEFINE_string("out", "", "Write the JSON report here.", flag_values=FLAGS)


def main(argv: Sequence[str]) -> dict[str, Any]:
    """Computes the statistics, prints the table (and the skipped records), returns them."""
    _app.no_positional(argv)
    st = file_stats(_INPUT.value, fractions=[float(x) for x in _FRACTIONS.value],
                          seed=_SEED.value, threshold=_THRESHOLD.value, alpha=_ALPHA.value,
                          positives=_POSITIVES.value)
    if _OUT.value:
        write_json(_OUT.value, st)
    print(markdown(st))
    if st["skip_summary"]:
        print(st["skip_summary"], file=sys.stderr)
    return st


def run_cli(argv: Sequence[str]) -> dict[str, Any]:
    """``main`` in-process on ``argv`` (flags, no program name); returns the statistics."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, USAGE)
