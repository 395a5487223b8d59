"""Writes the synthetic two-hop benchmark in HotpotQA's format (docs/multihop.md; dense_cf.synthetic.multihop).

``python -m dense_cf.cli.synthetic_multihop --out DIR --num_questions N --seed S
[--bridge_frac F --dev_frac F --test_frac F --entities_per_question F --num_distractors K]``
"""

from __future__ import annotations

import json
from typing import Sequence

from absl import flags

from dense_cf import app as _app
from dense_cf.synthetic.multihop import generate_multihop

FLAGS = flags.FlagValues()

flags.DEFINE_string("out", None, "output directory", flag_values=FLAGS)
flags.DEFINE_integer("num_questions", 10000, "questions in all splits together", flag_values=FLAGS)
flags.DEFINE_integer("seed", 0, "generator seed", flag_values=FLAGS)
flags.DEFINE_float("bridge_frac", 0.5, "fraction of bridge questions (the rest: comparison)",
                   flag_values=FLAGS)
flags.DEFINE_float("dev_frac", 0.1, "dev questions as a fraction of num_questions", flag_values=FLAGS)
flags.DEFINE_float("test_frac", 0.1, "test questions as a fraction of num_questions", flag_values=FLAGS)
flags.DEFINE_float("entities_per_question", 2.0, "corpus passages per question (one per entity)",
                   flag_values=FLAGS)
flags.DEFINE_integer("num_distractors", 8, "context paragraphs besides the two gold ones",
                     flag_values=FLAGS)
flags.mark_flag_as_required("out", flag_values=FLAGS)


def main(argv: Sequence[str]) -> dict:
    """Generates the benchmark; prints and returns the counts."""
    _app.no_positional(argv)
    f = FLAGS
    res = generate_multihop(f.out, f.num_questions, f.seed, bridge_frac=f.bridge_frac,
                            dev_frac=f.dev_frac, test_frac=f.test_frac,
                            entities_per_question=f.entities_per_question,
                            num_distractors=f.num_distractors)
    print(json.dumps(res["counts"], indent=2))
    _app.say_written(f.out, "benchmark")
    return res["counts"]


def run_cli(argv: Sequence[str]) -> dict:
    """``main`` in-process on ``argv`` (flags, no program name); returns the counts."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
