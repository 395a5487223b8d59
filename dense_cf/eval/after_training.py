"""The evaluations a run gets when training ends (``config.eval.after_training``)."""

from __future__ import annotations

import time
from typing import Any, Callable

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
    wall: dict[str, float] = {}  # seconds per stage (retrieval: export + index + search + report)

    def timed(stage: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        result = fn()
        wall[stage] = time.perf_counter() - t0
        return result

    if run.method.hops == 2:  # MDR: the two-hop evaluation holds its own AAR per hop
        return {"multihop": timed("multihop", lambda: evaluate_multihop(workdir, run=run)),
                "wall_s": wall}
    out: dict[str, Any] = {"retrieval": timed("retrieval", lambda: evaluate_run(workdir, run=run)),
                           "wall_s": wall}
    if not run.config.data.get("gold_file"):
        return out
    if run.method.unit != "passage":
        logging.warning("AAR/robustness skipped: not defined for %s's %s vectors "
                        "(docs/dcsr.md)", run.method.name, run.method.unit)
        out["aar"] = {"skipped": f"{run.method.unit}-level run: passage-level AAR is not "
                                 f"supported"}
        return out
    out["aar"] = timed("aar", lambda: evaluate_aar(workdir, run=run))
    counts = tuple(int(c) for c in run.config.eval.robustness_counts)
    if counts:
        out["robustness"] = timed("robustness", lambda: evaluate_robustness(
            workdir, run=run, counts=counts, max_distractors=max(counts)))
    return out
