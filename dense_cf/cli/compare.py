"""Paired comparison of two evaluated runs: ``python -m dense_cf.cli.compare RUN_A RUN_B``.

Also ``python -m dense_cf.eval.compare RUN_A RUN_B``. ``RUN`` is a run directory (its latest
``eval/step_N`` unless ``--step_a``/``--step_b``) or an eval directory. Prints the markdown
table of :mod:`dense_cf.eval.compare` (McNemar on top-k hits and AAR / AA outcomes, paired
bootstrap on MRR and mean score gaps, 95 % intervals, significance at 0.05 in words);
``--out`` also writes it, ``--json_out`` the raw numbers.
"""

from dense_cf import app
from dense_cf.eval.compare import FLAGS, USAGE, main, run_cli

__all__ = ["FLAGS", "main", "run_cli"]

if __name__ == "__main__":
    app.run(main, FLAGS, USAGE)
