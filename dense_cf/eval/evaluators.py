"""The evaluator registry and the one loop that runs a trained run's evaluations (issue 48).

``config.eval.evaluators`` (comma-separated names, or ``package.module:ATTRIBUTE`` for an
evaluator defined elsewhere) chooses them; empty means the method's own set
(``Method.evaluators``). Adding an evaluation: a module that ends in
``EVALUATOR = Evaluator(...)`` (``eval.base``), registered here or named on the command line.
"""

from __future__ import annotations

import os
import time
from typing import Any, Sequence

from absl import logging

from dense_cf import methods
from dense_cf.eval import aar, multihop, outcomes, retrieval, robustness
from dense_cf.eval.base import Evaluator, Result
from dense_cf.registry import Registry
from dense_cf.train.run import Run, RunDir

__all__ = ["chosen", "get", "names", "register", "run_evaluators"]

_REGISTRY: Registry[Evaluator] = Registry(Evaluator, "evaluator")


def register(evaluator: Evaluator) -> Evaluator:
    """Adds ``evaluator`` under its name (refuses a second one of that name)."""
    return _REGISTRY.register(evaluator)


def names() -> list[str]:
    return _REGISTRY.names()


def get(name: str) -> Evaluator:
    """The evaluator called ``name`` (a registered name or ``"module:ATTRIBUTE"``)."""
    return _REGISTRY.get(name)


def chosen(config: Any) -> list[Evaluator]:
    """The evaluators ``config`` asks for (``config.eval.evaluators``, else its method's)."""
    spec = str(config.eval.get("evaluators", "") or "")
    wanted = ([n.strip() for n in spec.split(",") if n.strip()] if spec
              else list(methods.get(config.method).evaluators))
    return [get(n) for n in wanted]


def run_evaluators(run: Run, workdir: str, evaluators: Sequence[Evaluator]) -> dict[str, Any]:
    """Runs each evaluator on ``run`` in order; returns ``{name: summary, "wall_s": {name:
    seconds}}`` (an evaluator that does not apply is left out). Outcomes an evaluator returns
    are saved in the run's eval directory (``outcomes.write``)."""
    if not evaluators:
        logging.warning("no evaluation after training: none chosen for %s (a %s)",
                        run.method.name, run.method.kind)
        return {"skipped": f"{run.method.kind} run: no evaluator"}
    out: dict[str, Any] = {}
    wall: dict[str, float] = {}
    for ev in evaluators:
        t0 = time.perf_counter()
        res = ev.run(run, workdir)
        if res is None:
            continue
        if isinstance(res, Result):
            if res.outcomes is not None:
                eval_dir = RunDir(workdir).eval(run.step)
                os.makedirs(eval_dir, exist_ok=True)
                outcomes.write(eval_dir, ev.name, res.outcomes)
            res = res.summary
        out[ev.name] = res
        wall[ev.name] = time.perf_counter() - t0
    out["wall_s"] = wall
    return out


for _ev in (retrieval.EVALUATOR, aar.EVALUATOR, robustness.EVALUATOR, multihop.EVALUATOR):
    register(_ev)
