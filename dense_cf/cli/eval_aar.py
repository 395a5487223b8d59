"""Answer-awareness (AAR, AA score) of a trained run (docs/method.md §5).

    python -m dense_cf.cli.eval_aar --workdir DIR [--gold F] [--qa F] [--strategies sentence,answer]

Builds (q, p+, p*) triplets from the gold passages with the training counterfactual code,
writes ``DIR/eval/step_<N>/aar.{json,md}`` and ``aar_hist.png`` and prints AAR and the number
of triplets per strategy as JSON. Also ``python -m dense_cf.eval.aar``. Decisions:
:mod:`dense_cf.eval.aar`.

Any encoder, untrained: ``--model NAME_OR_DIR [--question_model DIR] [--pooling auto|cls|mean]
[--config configs/demo.py | --data_dir D]`` instead of ``--workdir`` writes to
``model_eval/<model>-<pooling>-<hash>/eval/step_0/`` (``--out_root``; see :mod:`dense_cf.eval.model_flags`).
"""

from dense_cf import app
from dense_cf.eval.aar import FLAGS, USAGE, main, run_cli

__all__ = ["FLAGS", "main", "run_cli"]

if __name__ == "__main__":
    app.run(main, FLAGS, USAGE)
