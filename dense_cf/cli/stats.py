"""Corpus coverage / positive passage overlap / unique passage coverage (docs/method.md §7).

    python -m dense_cf.cli.stats --input biencoder.json[.gz] [--threshold 2] [--alpha 1.3] \
        [--fractions 0.1,0.25,...,1.0] [--seed 0] [--positives first|all] [--out report.json]

Prints a markdown table for the whole file and its nested random subsets (the subsets that
``config.data.train_fraction`` / ``train_fraction_seed`` train on); ``--out`` also writes the
JSON report. Definitions: :mod:`dense_cf.mining.stats`.
"""

from dense_cf import app
from dense_cf.mining.stats import FLAGS, USAGE, main, run_cli

__all__ = ["FLAGS", "main", "run_cli"]

if __name__ == "__main__":
    app.run(main, FLAGS, USAGE)
