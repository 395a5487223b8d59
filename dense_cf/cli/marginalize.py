"""Encoder marginalisation: attribute retrieval accuracy to question vs passage encoders (docs/method.md §7).

    python -m dense_cf.cli.marginalize --workdirs A B C ... --test FILE [--corpus FILE] \
        [--k 1,5,20,100] [--in_domain NAME] [--out DIR]

Pairs every question encoder of K trained runs with every passage encoder, prints the top-k
matrices with the encoders' marginal contributions (eq. 7) and writes ``report.json``,
``report.md`` and ``heatmap.png`` into ``--out``. Run directories are ``DIR`` or ``DIR@STEP``;
``--workdirs`` takes a comma list, and the command's other arguments are further runs (so
``--workdirs A B C`` and ``--workdirs runs/frac*`` work as well). Decisions:
:mod:`dense_cf.eval.marginalize`.
"""

from dense_cf import app
from dense_cf.eval.marginalize import FLAGS, USAGE, main, run_cli

__all__ = ["FLAGS", "main", "run_cli"]

if __name__ == "__main__":
    app.run(main, FLAGS, USAGE)
