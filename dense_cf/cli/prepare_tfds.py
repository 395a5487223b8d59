"""Build DPR's retriever data as the TFDS dataset ``dpr_retriever/<config>`` (docs/method.md §8).

    python -m dense_cf.cli.prepare_tfds --config nq --data_dir ~/tensorflow_datasets \
        [--manual_dir M] [--raw_dir DIR] [--base_url URL]

Prints the number of examples of every split. Exit status 1 on a download error. The builder
is :class:`dense_cf.datasets.dpr_tfds.DprRetriever`; see docs/datasets.md.
"""

from dense_cf import app
from dense_cf.datasets.dpr_tfds import FLAGS, USAGE, main, run_cli

__all__ = ["FLAGS", "main", "run_cli"]

if __name__ == "__main__":
    app.run(main, FLAGS, USAGE)
