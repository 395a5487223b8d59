"""Download (or take from --manual_dir) DPR's retriever data into --data_dir (docs/method.md §8).

    python -m dense_cf.cli.prepare --datasets nq --splits train,dev,test,gold,corpus \
        --data_dir data/dpr [--manual_dir DIR] [--base_url URL] [--list [--sizes]]

Prints the files made ready and, per dataset, the ``--config.data.*`` flags that point a run at
them. Exit status 1 on a download error. The registry and the checks are in
:mod:`dense_cf.datasets.dpr` and :mod:`dense_cf.datasets.download`; see docs/datasets.md.
"""

from dense_cf import app
from dense_cf.datasets.dpr import FLAGS, USAGE, main, run_cli

__all__ = ["FLAGS", "main", "run_cli"]

if __name__ == "__main__":
    app.run(main, FLAGS, USAGE)
