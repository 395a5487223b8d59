"""Model-mined hard negatives from a trained run (ANCE-style one-shot refresh, docs/method.md §10).

    python -m dense_cf.cli.mine_model --workdir RUN --input biencoder.json[.gz] \
        --output out.json[.gz] [--corpus psgs_w100.tsv --k 100 --num_negatives 30 \
        --skip_top 0 --index flat --existing replace|append --store_dir DIR]

The run's checkpoint encodes the corpus (reusing ``RUN/export``), each question's top ``k``
passages are retrieved, and the first ``num_negatives`` that are neither positives nor
answer-bearing become ``hard_negative_ctxs`` (resumable shards, DPR format). Prints the summary
as JSON. Decisions: :mod:`dense_cf.mining.model_negatives`.
"""

from dense_cf import app
from dense_cf.mining.model_negatives import FLAGS, USAGE, main, run_cli

__all__ = ["FLAGS", "main", "run_cli"]

if __name__ == "__main__":
    app.run(main, FLAGS, USAGE)
