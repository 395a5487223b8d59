"""Build DPR's retriever data as the TFDS dataset ``dpr_retriever/<config>`` (docs/method.md §8).

    python -m dense_cf.cli.prepare_tfds --config nq --data_dir ~/tensorflow_datasets \
        [--manual_dir M] [--raw_dir DIR] [--base_url URL]

Prints the number of examples of every split. Exit status 1 on a download error. The builder
is :class:`dense_cf.datasets.dpr_tfds.DprRetriever`; see docs/datasets.md.
"""

from __future__ import annotations

import sys
from typing import Sequence

import tensorflow_datasets as tfds
from absl import flags

from dense_cf import app as _app
from dense_cf.datasets import download
from dense_cf.datasets.dpr_tfds import DprRetriever

__all__ = ["FLAGS", "USAGE", "main", "run_cli"]

USAGE = __doc__

FLAGS = flags.FlagValues()

_CONFIG = flags.DEFINE_string(
    "config", None, ", ".join(c.name for c in DprRetriever.BUILDER_CONFIGS),
    required=True, flag_values=FLAGS)
_DATA_DIR = flags.DEFINE_string("data_dir", None, "TFDS data_dir.", required=True,
                                flag_values=FLAGS)
_MANUAL_DIR = flags.DEFINE_string("manual_dir", None, "Take raw files from here (no network).",
                                  flag_values=FLAGS)
_RAW_DIR = flags.DEFINE_string(
    "raw_dir", None, "Where raw files are (or go); e.g. a prepare --data_dir to reuse them.",
    flag_values=FLAGS)
_BASE_URL = flags.DEFINE_string("base_url", None, "DPR mirror URL.", flag_values=FLAGS)


def main(argv: Sequence[str]) -> int:
    """Downloads (or takes) the raw files and prepares the TFDS dataset."""
    _app.no_positional(argv)
    builder = DprRetriever(config=_CONFIG.value, data_dir=_DATA_DIR.value,
                                    base_url=_BASE_URL.value, raw_dir=_RAW_DIR.value)
    try:
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(manual_dir=_MANUAL_DIR.value))
    except download.DownloadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for name, split in builder.info.splits.items():
        print(f"{builder.info.full_name} {name}: {split.num_examples} examples")
    return 0


def run_cli(argv: Sequence[str]) -> int:
    """``main`` in-process on ``argv`` (flags, no program name); returns the exit status."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, USAGE)
