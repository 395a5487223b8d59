"""Train, then evaluate: the one module that joins the training loop and the evaluators.

``train_and_evaluate(config, workdir)`` generates the synthetic benchmark when the config asks
for it and it is absent, trains (or resumes) the run, and, with ``config.eval.after_training``,
evaluates the final checkpoint in the same process with the evaluators it chooses
(``config.eval.evaluators``, else the method's own set; ``eval.evaluators``). Entry points (``dense_cf.main``, the demo)
call it; libraries never do.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import ml_collections
from absl import logging

from dense_cf.eval import evaluators as evaluators_lib
from dense_cf.files import write_json
from dense_cf.parallel.hosts import host0_first, host0_value, is_host0
from dense_cf.synthetic import generate as synthetic
from dense_cf.synthetic import multihop as synthetic_multihop
from dense_cf.train import loop
from dense_cf.train.metric_writer import MetricWriter, flatten_numbers
from dense_cf.train.run import RunDir

__all__ = ["maybe_generate_synthetic", "train_and_evaluate"]


def maybe_generate_synthetic(config: ml_collections.ConfigDict) -> None:
    """Writes the synthetic benchmark into ``config.data.data_dir`` when the config asks for it
    (``data.synthetic.generate``) and its train file is absent; with
    ``multihop.synthetic_questions`` > 0 the two-hop world of that many questions (reused when
    its meta.json records the same settings, refused when it records others)."""
    syn = config.data.synthetic
    if not syn.generate:
        return
    n_multihop = int(config.multihop.get("synthetic_questions", 0))
    if n_multihop:
        if is_host0():
            synthetic_multihop.generate_or_check(config.data.data_dir, n_multihop, seed=syn.seed)
        host0_first(lambda: None, "synthetic-data")
        return
    train_file = os.path.join(config.data.data_dir, config.data.train_file)
    if host0_value(os.path.exists(train_file)):  # every host takes the same branch
        return

    if is_host0():
        logging.info("generating the synthetic benchmark in %s", config.data.data_dir)
        synthetic.generate(config.data.data_dir, num_passages=syn.num_passages, seed=syn.seed,
                           test_questions=syn.test_questions or None,
                           questions_per_passage=int(syn.questions_per_passage),
                           world=str(syn.get("world", "entity")),
                           hard_negatives=str(syn.get("hard_negatives", "sibling")))
    # A barrier: the other hosts must not read half-written files (shared storage multi-host).
    host0_first(lambda: None, "synthetic-data")


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    """Trains the run in ``workdir``; evaluates it when ``config.eval.after_training``.

    Returns the training summary; with evaluation it has an ``eval`` entry (also written to
    ``summary.json``). The trained :class:`~dense_cf.train.run.Run` is under ``"run"``.
    """
    # Set-up once per training run: paths, the method's weights, the check (files generated
    # below are not checked before they exist), then the lock; train() does none of it again.
    config = loop.prepare(config, check_files=not config.data.synthetic.generate)
    # An unknown evaluator fails now, not after training.
    evaluators = evaluators_lib.chosen(config) if config.eval.after_training else []
    # Refuse at once; train and evaluation under one lock, no evaluator in between.
    with loop.lock_workdir(config, workdir):
        return _train_and_evaluate(config, workdir, evaluators)


def _train_and_evaluate(config: ml_collections.ConfigDict, workdir: str,
                        evaluators: list[evaluators_lib.Evaluator]) -> dict[str, Any]:
    maybe_generate_synthetic(config)
    summary, run = loop.train_prepared(config, workdir)
    finished = summary["step"] == summary["total_steps"]
    if config.eval.after_training and finished and jax.process_count() > 1:
        # Export/index/report writers are not multi-host safe (every host would build and
        # save the index); the checkpoint restores in one process for evaluation instead.
        msg = (f"skipped on {jax.process_count()} hosts; run `python -m dense_cf.cli.eval_retrieval "
               f"--workdir {workdir}` (and dense_cf.cli.eval_aar) on one host")
        logging.warning("eval.after_training %s", msg)
        summary["eval"] = {"skipped": msg}
    elif config.eval.after_training and finished:
        summary["eval"] = evaluators_lib.run_evaluators(run, workdir, evaluators)
        # The evaluation's numbers beside the training curves, at the final step.
        writer = MetricWriter(workdir)
        writer.tensorboard_scalars(summary["step"], flatten_numbers(summary["eval"], "eval"))
        writer.close()
    if "eval" in summary and is_host0():
        write_json(RunDir(workdir).summary, summary)
    summary["run"] = run
    return summary
