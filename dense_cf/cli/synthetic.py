"""Writes the synthetic answer-aware QA benchmark (docs/method.md §8; dense_cf.synthetic).

``python -m dense_cf.cli.synthetic --out DIR --num_passages N --seed S
[--questions_per_passage K --world mixed --hard_negatives other_entity
--entity_types person,work --domains N]``
"""

from __future__ import annotations

import json
import logging
from typing import Sequence

from absl import app, flags

from dense_cf import app as _app
from dense_cf.synthetic.generate import (
    HARD_NEGATIVES,
    TYPE_NAMES,
    WORLDS,
    generate,
    generate_domains,
)

FLAGS = flags.FlagValues()

flags.DEFINE_string("out", None, "output directory", flag_values=FLAGS)
flags.DEFINE_integer("num_passages", 10000, "passages in the corpus", flag_values=FLAGS)
flags.DEFINE_integer("seed", 0, "generator seed", flag_values=FLAGS)
flags.DEFINE_float("train_per_passage", 0.5, "train questions per passage", flag_values=FLAGS)
flags.DEFINE_float("dev_frac", 0.1, "dev questions as a fraction of train", flag_values=FLAGS)
flags.DEFINE_integer("test_questions", None, "default: 10% of train", flag_values=FLAGS)
flags.DEFINE_integer("num_hard_negatives", 3, "BM25 hard negatives per question", flag_values=FLAGS)
flags.DEFINE_integer("num_negatives", 2, "random negatives per question", flag_values=FLAGS)
flags.DEFINE_integer("bm25_top_k", 20, "BM25 passages ranked per question", flag_values=FLAGS)
flags.DEFINE_integer("max_mined", None, "max BM25-mined questions per split", flag_values=FLAGS)
flags.DEFINE_integer("workers", None, "generator processes (output does not depend on it)", flag_values=FLAGS)
flags.DEFINE_integer("questions_per_passage", 1,
                     "k > 1: questions on up to k different sentences of each positive", flag_values=FLAGS)
flags.DEFINE_enum("world", "entity", list(WORLDS),
                  "entity: every sentence of a passage is about its title's entity; mixed: "
                  "SQuAD-like, each fact sentence about a different, named entity", flag_values=FLAGS)
flags.DEFINE_enum("hard_negatives", "sibling", list(HARD_NEGATIVES),
                  "sibling: top BM25 passages lacking the answer (the gold entity's siblings); "
                  "other_entity: only other entities' passages (as NQ's)", flag_values=FLAGS)
flags.DEFINE_string("entity_types", "",
                    f"comma-separated subset of {','.join(TYPE_NAMES)} (default: all)", flag_values=FLAGS)
flags.DEFINE_integer("domains", 0, "N > 0: write N template-disjoint domains into OUT/<domain>/", flag_values=FLAGS)
flags.mark_flag_as_required("out", flag_values=FLAGS)


def main(argv: Sequence[str]) -> dict:
    """Generates the benchmark; prints and returns the counts and timings."""
    _app.no_positional(argv)
    f = FLAGS
    # The library logs through the stdlib logger; absl's handler would hide INFO.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    kw = dict(train_per_passage=f.train_per_passage, dev_frac=f.dev_frac,
              test_questions=f.test_questions, num_hard_negatives=f.num_hard_negatives,
              num_negatives=f.num_negatives, bm25_top_k=f.bm25_top_k, max_mined=f.max_mined,
              workers=f.workers, questions_per_passage=f.questions_per_passage, world=f.world,
              hard_negatives=f.hard_negatives)
    if f.domains:
        if f.entity_types:
            raise app.UsageError("--domains and --entity_types are exclusive")
        res_d = generate_domains(f.out, f.domains, f.num_passages, f.seed, **kw)
        out = {d: {"counts": r["counts"], "timing": r["timing"]} for d, r in res_d.items()}
    else:
        types = tuple(t.strip() for t in f.entity_types.split(",") if t.strip()) or None
        res = generate(f.out, f.num_passages, f.seed, entity_types=types, **kw)
        out = {"counts": res["counts"], "timing": res["timing"]}
    print(json.dumps(out, indent=2))
    return out


def run_cli(argv: Sequence[str]) -> dict:
    """``main`` in-process on ``argv`` (flags, no program name); returns the result."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
