"""Robustness of a trained run to near-duplicate distractors (docs/method.md §5; EADPR Fig. 5).

    python -m dense_cf.cli.eval_robustness --workdir DIR [--max_distractors 20] \
        [--counts 0,1,2,5,10,20] [--gold F] [--qa F] [--corpus F] [--seed 0] [--index jax] \
        [--heldout [--heldout_kinds value_swap,paraphrase,namesake,rule_paraphrase]] [--out D]

Adds K answer-free variants of every gold passage to the run's corpus index and reports top-k
and MRR against K; writes ``DIR/eval/step_<N>/robustness.{json,md,png}`` and prints the table
as JSON. Also ``python -m dense_cf.eval.robustness``. Decisions: :mod:`dense_cf.eval.robustness`.

Any encoder, untrained: ``--model NAME_OR_DIR [--question_model DIR] [--pooling auto|cls|mean]
[--config configs/demo.py | --data_dir D]`` instead of ``--workdir`` writes to
``model_eval/<model>-<pooling>-<hash>/eval/step_0/`` (``--out_root``; see :mod:`dense_cf.cli._model_flags`).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from absl import flags, logging

from dense_cf import app as _app
from dense_cf.cli import _model_flags
from dense_cf.eval.robustness import DEFAULT_COUNTS, evaluate_robustness
from dense_cf.files import workdir_lock

__all__ = ["FLAGS", "USAGE", "main", "run_cli"]

USAGE = __doc__

FLAGS = flags.FlagValues()

_model_flags.define_model_flags(FLAGS)  # --workdir RUN | --model CHECKPOINT
_MAX_DISTRACTORS = flags.DEFINE_integer(
    "max_distractors", 20, "Distractor variants generated per question.", flag_values=FLAGS)
_COUNTS = flags.DEFINE_list(
    "counts", [str(c) for c in DEFAULT_COUNTS],
    "Distractors per question to evaluate (each <= max_distractors).", flag_values=FLAGS)
_DATA = _model_flags.define_data_flags(
    FLAGS, "gold", "qa", "corpus", "index", corpus="Corpus TSV (default: config).",
    index="jax: exact JaxIndex search (no faiss needed); any faiss kind: faiss Flat (default: "
    "the config's eval.index).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the distractor sentence orders.",
                             flag_values=FLAGS)
_HELDOUT = flags.DEFINE_bool(
    "heldout", None, "Also the held-out distractor family (value swaps, paraphrases, namesakes; "
    "default: the config's eval.robustness_heldout).", flag_values=FLAGS)
_HELDOUT_KINDS = flags.DEFINE_list(
    "heldout_kinds", None, "Held-out kinds and their round-robin order, e.g. "
    "value_swap,paraphrase,namesake,rule_paraphrase or rule_paraphrase alone (default: the "
    "config's eval.robustness_heldout_kinds; names: synthetic.distractors.KINDS).",
    flag_values=FLAGS)
_OUT = flags.DEFINE_string(
    "out", None, "Report directory (default: DIR/eval/step_<N>). With an opt-in --heldout_kinds, "
    "so that the run's stored robustness report is not replaced.", flag_values=FLAGS)


def main(argv: Sequence[str]) -> dict[str, Any]:
    """Evaluates the run; prints top-k and MRR per distractor count, returns the result."""
    _app.no_positional(argv)
    workdir, run = _model_flags.workdir_and_run(FLAGS)
    with workdir_lock(workdir, "eval_robustness", warn=logging.warning):
        res = evaluate_robustness(workdir, run=run, counts=[int(c) for c in _COUNTS.value],
                                  max_distractors=_MAX_DISTRACTORS.value, gold_path=_DATA["gold"].value,
                                  qa_path=_DATA["qa"].value, corpus_path=_DATA["corpus"].value, seed=_SEED.value,
                                  index_kind=_DATA["index"].value, heldout=_HELDOUT.value,
                                  heldout_kinds=_HELDOUT_KINDS.value, out_dir=_OUT.value)
        table = {K: {"top_k": e["top_k"], "mrr": e["mrr"],
                     "distractors_per_question_actual": e["distractors_per_question_actual"]}
                 for K, e in res["table"].items()}
    print(json.dumps({"n_questions": res["n_questions"],
                      "distractor_stats": res["distractor_stats"], "table": table},
                     indent=2, default=float))
    _app.say_written(res["out_dir"])
    return res


def run_cli(argv: Sequence[str]) -> dict[str, Any]:
    """``main`` in-process on ``argv`` (flags, no program name); returns the result."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, USAGE)
