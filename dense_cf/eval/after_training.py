"""The evaluations a run gets when training ends (``config.eval.after_training``)."""

from __future__ import annotations

from typing import Any

from absl import logging

from dense_cf.eval.aar import evaluate_aar
from dense_cf.eval.multihop import evaluate_multihop
from dense_cf.eval.retrieval import evaluate_run
from dense_cf.eval.robustness import evaluate_robustness
from dense_cf.train.run import Run


def evaluate_after_training(run: Run, workdir: str) -> dict[str, Any]:
    """Retrieval (top-k, MRR), then answer-awareness and robustness of passage-level runs;
    two-hop runs get the multi-hop evaluation (docs/multihop.md)."""
    if run.method.kind != "retriever":
        logging.warning("retrieval evaluation skipped: %s is a %s", run.method.name,
                        run.method.kind)
        return {"skipped": f"{run.method.kind} run: no retrieval evaluation"}
    if run.method.hops == 2:  # MDR: the two-hop evaluation holds its own AAR per hop
        return {"multihop": evaluate_multihop(workdir, run=run)}
    out: dict[str, Any] = {"retrieval": evaluate_run(workdir, run=run)}
    if not run.config.data.get("gold_file"):
        return out
    if run.method.unit != "passage":
        logging.warning("AAR/robustness skipped: not defined for %s's %s vectors "
                        "(docs/dcsr.md)", run.method.name, run.method.unit)
        out["aar"] = {"skipped": f"{run.method.unit}-level run: passage-level AAR is not "
                                 f"supported"}
        return out
    out["aar"] = evaluate_aar(workdir, run=run)
    counts = tuple(int(c) for c in run.config.eval.robustness_counts)
    if counts:
        out["robustness"] = evaluate_robustness(workdir, run=run, counts=counts,
                                                max_distractors=max(counts))
    return out
