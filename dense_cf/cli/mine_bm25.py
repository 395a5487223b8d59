"""BM25 hard-negative mining for a DPR biencoder file (docs/method.md §8; docs/mining.md).

``python -m dense_cf.cli.mine_bm25 --input biencoder-x.json[.gz] --corpus psgs_w100.tsv[.gz]
--output out.json[.gz] [--num_negatives 30 --top_k 100 --answer_mode string|regex
--index_dir DIR --existing replace|append --k1 0.9 --b 0.4]``

The job itself is :func:`dense_cf.mining.negatives.mine_bm25`. Prints the summary as JSON.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from absl import flags

from dense_cf import app as _app
from dense_cf.cli._mining_flags import define_common_flags
from dense_cf.index.bm25 import ANSERINI
from dense_cf.mining.negatives import mine_bm25

FLAGS = flags.FlagValues()
define_common_flags(FLAGS)
_TOP_K = flags.DEFINE_integer("top_k", 100, "BM25 passages retrieved per question.",
                              flag_values=FLAGS)
_INDEX_DIR = flags.DEFINE_string("index_dir", None,
                                 "Where the BM25 index is saved/loaded (built once).",
                                 flag_values=FLAGS)
_THREADS = flags.DEFINE_integer("threads", 0, "bm25s retrieval threads (0 = sequential, -1 = all).",
                                flag_values=FLAGS)
_K1 = flags.DEFINE_float("k1", ANSERINI["k1"], "BM25 k1 (Lucene/Anserini default).",
                         flag_values=FLAGS)
_B = flags.DEFINE_float("b", ANSERINI["b"], "BM25 b (Lucene/Anserini default).", flag_values=FLAGS)


def main(argv: Sequence[str]) -> dict[str, Any]:
    """Mines ``--input`` into ``--output``; prints and returns the summary."""
    _app.no_positional(argv)
    f = FLAGS
    summary = mine_bm25(f.input, f.corpus, f.output, num_negatives=f.num_negatives,
                        top_k=_TOP_K.value, answer_mode=f.answer_mode, index_dir=_INDEX_DIR.value,
                        existing=f.existing, threads=_THREADS.value, batch_size=f.batch_size,
                        shard_size=f.shard_size, work_dir=f.work_dir, keep_parts=f.keep_parts,
                        skip_bad=not f.strict, k1=_K1.value, b=_B.value)
    print(json.dumps(summary, indent=2, default=str))
    return summary


def run_cli(argv: Sequence[str]) -> dict[str, Any]:
    """``main`` in-process on ``argv`` (flags, no program name); returns the result."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
