"""Pseudo-evidence annotations (EADPR §3.1) for the ``evidence`` counterfactual strategy.

    python -m dense_cf.cli.evidence --input data/dpr/biencoder-nq-train.json.gz \
        --output data/dpr/biencoder-nq-train.evidence.jsonl --scorer t5:allenai/unifiedqa-t5-base

Scores every leave-one-sentence-out candidate of each positive passage with a QA model and
appends the sentence whose removal lowers the confidence most to the JSONL output (resumable;
format and decisions in :mod:`dense_cf.mining.evidence.annotate`). Prints the summary as JSON.
"""

from dense_cf import app
from dense_cf.mining.evidence.annotate import FLAGS, USAGE, main, run_cli

__all__ = ["FLAGS", "main", "run_cli"]

if __name__ == "__main__":
    app.run(main, FLAGS, USAGE)
