"""Alias of ``python -m dense_cf.eval.robustness``; its help text (``USAGE``) is kept there."""

from dense_cf import app
from dense_cf.eval.robustness import FLAGS, USAGE, main, run_cli

__doc__ = USAGE  # one text, in the owner: ``--help`` and ``pydoc`` show it

__all__ = ["FLAGS", "main", "run_cli"]

if __name__ == "__main__":
    app.run(main, FLAGS, USAGE)
