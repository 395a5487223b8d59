"""Retrieval evaluation of a trained run: export → index → search → DPR metrics (docs/method.md §6).

    python -m dense_cf.cli.eval_retrieval --workdir DIR [--corpus F] [--qa F] [--index flat] \
        [--k 100]

Writes ``DIR/eval/step_<N>/`` (DPR result JSON, TREC run/qrels, report.json/md), reusing the
run's export and index, and prints the summary as JSON. Also ``python -m
dense_cf.eval.retrieval``. Decisions: :mod:`dense_cf.eval.retrieval`.

Any encoder, untrained: ``--model NAME_OR_DIR [--question_model DIR] [--pooling auto|cls|mean]
[--config configs/demo.py | --data_dir D]`` instead of ``--workdir`` writes to
``model_eval/<model>-<pooling>-<hash>/eval/step_0/`` (``--out_root``; see :mod:`dense_cf.eval.model_flags`).
"""

from dense_cf import app
from dense_cf.eval.retrieval import FLAGS, USAGE, main, run_cli

__all__ = ["FLAGS", "main", "run_cli"]

if __name__ == "__main__":
    app.run(main, FLAGS, USAGE)
