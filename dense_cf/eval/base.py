"""The evaluation contract (issue 48): an evaluator is a named entry, like a method.

``Evaluator(name, run, metrics)``: ``run(run, workdir)`` evaluates a trained
:class:`~dense_cf.train.run.Run` whose directory is ``workdir`` and returns its summary (a JSON
dict), a :class:`Result` (summary plus per-item :class:`~dense_cf.eval.outcomes.Outcomes`, which
``eval.evaluators.run_evaluators`` saves through the one outcome writer), or None when it does
not apply to this run (e.g. AAR without a gold file). ``metrics`` are the metrics its outcomes
measure; ``report`` is the file in the eval directory whose presence says it ran (default: its
generic outcome file).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from dense_cf.eval import outcomes
from dense_cf.eval.outcomes import Metric, Outcomes
from dense_cf.train.run import Run

__all__ = ["Evaluator", "Result"]


@dataclasses.dataclass
class Result:
    """What an evaluator returns: its ``summary`` and, for the generic store, its ``outcomes``."""

    summary: dict[str, Any]
    outcomes: Outcomes | None = None


RunFn = Callable[[Run, str], "dict[str, Any] | Result | None"]


@dataclasses.dataclass(frozen=True)
class Evaluator:
    """One evaluation of a trained run (module docstring)."""

    name: str
    run: RunFn
    metrics: tuple[Metric, ...] = ()
    report: str = ""

    def __post_init__(self) -> None:
        if not self.name or "," in self.name:
            raise ValueError(f"evaluator name {self.name!r}: needs a name without commas")
        if not self.report:
            object.__setattr__(self, "report", outcomes.outcomes_name(self.name))
