"""Multi-hop retrieval evaluation of an MDR run (docs/multihop.md; EADPR §4.3 Tables 4/5).

    python -m dense_cf.cli.eval_multihop --workdir RUN [--qa F] [--corpus F] [--index flat] \
        [--beam_size 20] [--hop2_k 20] [--top_chains 20] [--max_questions N] \
        [--reader READER_RUN [--reader_ks 1,5,10]]

Exports and indexes the run's corpus (reused when unchanged), runs the two-hop beam search over
the questions of a HotpotQA-format file and writes ``RUN/eval/step_<N>/`` (report.json/md,
chains.json, aar_scores_hop{1,2}.npz; with ``--reader`` the reader's answer EM/F1 over the top
chains in report.json/md, e2e.json and predictions.json); prints the summary as JSON. Also ``python -m
dense_cf.eval.multihop``. Metrics and decisions: :mod:`dense_cf.eval.multihop`.
"""

from dense_cf import app
from dense_cf.eval.multihop import FLAGS, USAGE, main, run_cli

__all__ = ["FLAGS", "main", "run_cli"]

if __name__ == "__main__":
    app.run(main, FLAGS, USAGE)
