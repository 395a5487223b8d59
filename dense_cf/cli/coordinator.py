"""jax's coordination service in a process of its own: the side process that process 0 of a
multi-host run starts (``--coordinator_service=sidecar``; dense_cf/parallel/coordinator.py,
docs/reliability.md "A lost host"). Not meant to be run by hand.

    python -m dense_cf.cli.coordinator --bind=[::]:PORT --num_processes=N

It serves until ``stop`` arrives on stdin, or until ``--linger_s`` seconds after stdin's EOF
(process 0 gone). It ignores SIGINT and SIGTERM: a scheduler's SIGTERM reaches every process of
a job step, and the service must outlive process 0's save of the step in flight.
"""

from __future__ import annotations

import signal
from typing import Sequence

from absl import flags

from dense_cf import app as _app
from dense_cf.parallel import coordinator
from dense_cf.parallel.distributed import HEARTBEAT_TIMEOUT_S, JAX_SHUTDOWN_TIMEOUT_S

FLAGS = flags.FlagValues()
flags.DEFINE_string("bind", None, "Address to serve on, e.g. [::]:PORT.", flag_values=FLAGS)
flags.DEFINE_integer("num_processes", None, "Processes of the run.", lower_bound=1,
                     flag_values=FLAGS)
flags.DEFINE_integer("heartbeat_timeout_s", HEARTBEAT_TIMEOUT_S, "Seconds without a heartbeat "
                     "after which a process is declared dead.", lower_bound=1, flag_values=FLAGS)
flags.DEFINE_integer("shutdown_timeout_s", JAX_SHUTDOWN_TIMEOUT_S, "Seconds the shutdown "
                     "barrier waits for every process.", lower_bound=1, flag_values=FLAGS)
flags.DEFINE_float("linger_s", coordinator.LINGER_S, "Seconds the service stays up after "
                   "stdin's EOF (process 0 gone).", lower_bound=0.0, flag_values=FLAGS)
flags.mark_flags_as_required(["bind", "num_processes"], flag_values=FLAGS)

__all__ = ["FLAGS", "main"]


def main(argv: Sequence[str]) -> int:
    _app.no_positional(argv)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    f = FLAGS
    coordinator.serve(f.bind, f.num_processes, f.heartbeat_timeout_s, f.shutdown_timeout_s,
                      f.linger_s)
    return 0


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
