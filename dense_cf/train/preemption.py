"""Preemption: SIGTERM/SIGINT stop training at a step every host agrees on (docs/reliability.md).

:class:`StopSignals` turns the first SIGTERM (a preempted cloud VM, TPU maintenance, SLURM's
``scancel``/preemption) or SIGINT (Ctrl-C) into a request; the training loop asks
:meth:`StopSignals.agreed` after every step, saves that step synchronously (model, optimizer and
data-iterator state) and raises :class:`Preempted`. ``dense_cf.main`` turns that into exit status
:data:`PREEMPTED_EXIT` after the workdir lock is released; the launch scripts rerun the same
command on that status, which resumes from the saved step.

Several hosts: each host's request is all-gathered after every step (one tiny collective), so
every host stops after the same step and the pod never saves different steps on different hosts,
whichever host got the signal first. A second signal while the first is being handled restores
the previous handlers and delivers it again: a second Ctrl-C (or SIGTERM) stops at once.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import jax
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

from dense_cf.app import Stopped

__all__ = ["PREEMPTED_EXIT", "Preempted", "StopSignals"]

# EX_TEMPFAIL (sysexits.h): "a temporary failure; the user is invited to retry". The launch
# scripts rerun the command on this status; anything else is a real outcome.
PREEMPTED_EXIT = 75
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(Stopped):
    """Training stopped on a signal after saving ``step`` in ``directory``. Every binary built
    on ``dense_cf.app`` (a study, the demo) reports it in one line and exits 75."""

    exit_status = PREEMPTED_EXIT

    def __init__(self, step: int, directory: str, signame: str):
        self.step, self.directory, self.signame = step, directory, signame
        super().__init__(f"stopped by {signame} after saving step {step} in {directory}; run the "
                         f"same command again to resume (exit status {PREEMPTED_EXIT})")


class StopSignals:
    """Context manager: SIGTERM/SIGINT handlers that only record the signal (main thread only;
    elsewhere it does nothing). The previous handlers come back on exit."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.acted = False  # agreed() said stop: the caller saved and is stopping
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self._restore()
        if self.signum is not None and not self.acted and exc_type is None:
            # The signal came after the last step's check (training had finished and saved):
            # it still means "stop", so it takes its usual effect now, not after evaluation.
            signal.raise_signal(self.signum)

    def _restore(self) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)
        self._previous = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:  # the second one: the old behaviour, at once
            self._restore()
            signal.raise_signal(signum)
            return
        self.signum = signum
        logging.warning("%s received: finishing the step in flight, then saving a checkpoint "
                        "and exiting (send it again to stop at once)", signal.Signals(signum).name)

    @property
    def signame(self) -> str:
        return signal.Signals(self.signum).name if self.signum else "a signal on another host"

    def agreed(self) -> bool:
        """Whether any host got a signal; every host gets the same answer (a collective on
        several hosts: call it at the same point of every step on all of them)."""
        local = self.signum is not None
        if jax.process_count() > 1:
            local = bool(np.asarray(multihost_utils.process_allgather(np.asarray(local, np.int32))).max())
        self.acted = self.acted or local
        return local
