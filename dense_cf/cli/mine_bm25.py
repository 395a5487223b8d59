"""BM25 hard-negative mining for a DPR biencoder file (docs/method.md §8; docs/mining.md).

``python -m dense_cf.cli.mine_bm25 --input biencoder-x.json[.gz] --corpus psgs_w100.tsv[.gz]
--output out.json[.gz] [--num_negatives 30 --top_k 100 --answer_mode string|regex
--index_dir DIR --existing replace|append --k1 0.9 --b 0.4]``

The job itself is :func:`dense_cf.mining.negatives.mine_bm25`.
"""

from __future__ import annotations

import json
from typing import Sequence

from absl import app, flags

from dense_cf.index.bm25 import ANSERINI
from dense_cf.mining.negatives import define_common_flags, mine_bm25

define_common_flags(flags)
flags.DEFINE_integer("top_k", 100, "BM25 passages retrieved per question.")
flags.DEFINE_string("index_dir", None, "Where the BM25 index is saved/loaded (build once).")
flags.DEFINE_integer("threads", 0, "bm25s retrieval threads (0 = sequential, -1 = all).")
flags.DEFINE_float("k1", ANSERINI["k1"], "BM25 k1 (Lucene/Anserini default).")
flags.DEFINE_float("b", ANSERINI["b"], "BM25 b (Lucene/Anserini default).")


def main(argv: Sequence[str]) -> None:
    del argv
    f = flags.FLAGS
    summary = mine_bm25(f.input, f.corpus, f.output, num_negatives=f.num_negatives,
                        top_k=f.top_k, answer_mode=f.answer_mode, index_dir=f.index_dir,
                        existing=f.existing, threads=f.threads, batch_size=f.batch_size,
                        shard_size=f.shard_size, work_dir=f.work_dir, keep_parts=f.keep_parts,
                        skip_bad=not f.strict, k1=f.k1, b=f.b)
    print(json.dumps(summary, indent=2, default=str))


if __name__ == "__main__":
    app.run(main)
