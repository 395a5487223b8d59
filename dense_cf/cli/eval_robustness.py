"""Robustness of a trained run to near-duplicate distractors (docs/method.md §5; EADPR Fig. 5).

    python -m dense_cf.cli.eval_robustness --workdir DIR [--max_distractors 20] \
        [--counts 0,1,2,5,10,20] [--gold F] [--qa F] [--corpus F] [--seed 0] [--index jax] \
        [--heldout]

Adds K answer-free variants of every gold passage to the run's corpus index and reports top-k
and MRR against K; writes ``DIR/eval/step_<N>/robustness.{json,md,png}`` and prints the table
as JSON. Also ``python -m dense_cf.eval.robustness``. Decisions: :mod:`dense_cf.eval.robustness`.

Any encoder, untrained: ``--model NAME_OR_DIR [--question_model DIR] [--pooling auto|cls|mean]
[--config configs/demo.py | --data_dir D]`` instead of ``--workdir`` writes to
``model_eval/<model>-<pooling>-<hash>/eval/step_0/`` (``--out_root``; see :mod:`dense_cf.eval.model_flags`).
"""

from dense_cf import app
from dense_cf.eval.robustness import FLAGS, USAGE, main, run_cli

__all__ = ["FLAGS", "main", "run_cli"]

if __name__ == "__main__":
    app.run(main, FLAGS, USAGE)
