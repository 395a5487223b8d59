"""Model-mined hard negatives from a trained run (ANCE-style one-shot refresh, docs/method.md §10).

    python -m dense_cf.cli.mine_model --workdir RUN --input biencoder.json[.gz] \
        --output out.json[.gz] [--corpus psgs_w100.tsv --k 100 --num_negatives 30 \
        --skip_top 0 --index flat --existing replace|append --store_dir DIR]

The run's checkpoint encodes the corpus (reusing ``RUN/export``), each question's top ``k``
passages are retrieved, and the first ``num_negatives`` that are neither positives nor
answer-bearing become ``hard_negative_ctxs`` (resumable shards, DPR format). Prints the summary
as JSON. Decisions: :mod:`dense_cf.mining.model_negatives`.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from absl import flags

from dense_cf import app as _app
from dense_cf.cli import _model_flags
from dense_cf.cli._mining_flags import define_common_flags
from dense_cf.mining.model_negatives import mine_model

__all__ = ["FLAGS", "USAGE", "main", "run_cli"]

USAGE = __doc__

FLAGS = flags.FlagValues()


define_common_flags(FLAGS)   # --input --corpus --output --num_negatives --answer_mode ...
_WORKDIR = flags.DEFINE_string("workdir", None, "Trained run directory (dense_cf.main).",
                               required=True, flag_values=FLAGS)
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: latest).",
                             flag_values=FLAGS)
_K = flags.DEFINE_integer("k", 100, "Passages retrieved per question.", flag_values=FLAGS)
_SKIP_TOP = flags.DEFINE_integer(
    "skip_top", 0, "Ignore the top N retrieved ranks (false-negative guard).", flag_values=FLAGS)
_INDEX = _model_flags.define_data_flags(
    FLAGS, "index", index=_model_flags.index_help("eval.index"))["index"]
_STORE_DIR = flags.DEFINE_string(
    "store_dir", None, "Passage store (default RUN/mine/store) or a mine_bm25 --index_dir.",
    flag_values=FLAGS)


def main(argv: Sequence[str]) -> dict[str, Any]:
    """Mines ``--input`` into ``--output`` with the run's model; prints and returns the summary."""
    _app.no_positional(argv)
    f = FLAGS
    summary = mine_model(_WORKDIR.value, f.input, f.output, corpus=f.corpus, k=_K.value,
                         num_negatives=f.num_negatives, skip_top=_SKIP_TOP.value,
                         step=_STEP.value, index_kind=_INDEX.value, store_dir=_STORE_DIR.value,
                         answer_mode=f.answer_mode if f["answer_mode"].present else None,
                         existing=f.existing, batch_size=f.batch_size, shard_size=f.shard_size,
                         work_dir=f.work_dir, keep_parts=f.keep_parts, skip_bad=not f.strict)
    print(json.dumps(summary, indent=2, default=str))
    return summary


def run_cli(argv: Sequence[str]) -> dict[str, Any]:
    """``main`` in-process on ``argv`` (flags, no program name); returns the summary."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, USAGE)
