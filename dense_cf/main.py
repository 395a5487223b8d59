"""Entry point: ``python -m dense_cf.main --config=configs/picl_nq.py --workdir=DIR [--config.x.y=v]``.

Re-running with the same workdir resumes from the latest checkpoint. SIGTERM or SIGINT saves the
step in flight and exits with status 75 (``train.preemption.PREEMPTED_EXIT``): rerun to resume. Multi-host: run the same
command on every host with ``--distributed=tpu|slurm`` (or ``auto``, the default), or with
``--distributed=explicit --coordinator_address=HOST:PORT --num_processes=N --process_id=I``;
the workdir must be on storage every host sees (GCS or a shared filesystem). See docs/launch.md.
"""

from __future__ import annotations

import json
import os
import sys

import jax
from absl import app, flags, logging
from ml_collections import config_flags

from dense_cf import app as _app
from dense_cf.console import quiet_library_logs
from dense_cf.experiment import train_and_evaluate
from dense_cf.files import UserError
from dense_cf.parallel import distributed, xla_flags
from dense_cf.train.preemption import PREEMPTED_EXIT, Preempted

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and reports.")
_DISTRIBUTED = flags.DEFINE_enum(
    "distributed", "auto", ["auto", "none", "tpu", "slurm", "explicit"],
    "Multi-host start-up (dense_cf/parallel/distributed.py): auto = explicit if "
    "--coordinator_address is set, else SLURM inside a multi-task srun step, else TPU if TPU "
    "chips are attached, else a single process.")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None,
    "HOST:PORT of process 0 (--distributed=explicit; overrides the SLURM-derived address).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None,
                                      "Number of processes (explicit; overrides detection).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None,
                                   "This process' index (explicit; overrides detection).")
_LOCAL_DEVICE_IDS = flags.DEFINE_list(
    "local_device_ids", None, "Comma-separated local device ids this process drives "
    "(default: all, or one GPU per task under SLURM with several tasks per node).")
_HEARTBEAT = flags.DEFINE_integer(
    "heartbeat_timeout_s", distributed.HEARTBEAT_TIMEOUT_S,
    "Multi-host: seconds without a heartbeat after which a process is declared dead and every "
    "other process stops (the bound on a hang in a collective with a lost peer; "
    "docs/reliability.md).")
_SHUTDOWN = flags.DEFINE_integer(
    "shutdown_timeout_s", None, "Multi-host: seconds a finishing process waits for the others "
    "at shutdown (default: jax's, 300).")
_COORDINATOR_SERVICE = flags.DEFINE_enum(
    "coordinator_service", "sidecar", list(distributed.COORDINATOR_SERVICES),
    "Multi-host (explicit, SLURM): where jax's coordination service runs. sidecar = a side "
    "process started by process 0, so that losing process 0 stops the others with one line "
    "like losing any other; in_process = inside process 0, as jax does (docs/reliability.md).")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv) -> None:
    del argv
    quiet_library_logs()
    # Before anything touches devices: jax.distributed must come first.
    local_ids = [int(i) for i in _LOCAL_DEVICE_IDS.value] if _LOCAL_DEVICE_IDS.value else None
    distributed.initialize(_DISTRIBUTED.value, coordinator_address=_COORDINATOR.value,
                           num_processes=_NUM_PROCESSES.value, process_id=_PROCESS_ID.value,
                           local_device_ids=local_ids, heartbeat_timeout_s=_HEARTBEAT.value,
                           shutdown_timeout_s=_SHUTDOWN.value,
                           coordinator_service=_COORDINATOR_SERVICE.value)
    logging.info("process %d/%d: %d local of %d %s devices", jax.process_index(), jax.process_count(),
                 jax.local_device_count(), jax.device_count(), jax.default_backend())
    unset = xla_flags.missing(jax.default_backend())
    if unset and jax.process_index() == 0:
        logging.warning("XLA flags adopted for %s are not in XLA_FLAGS: %s. Set those this jaxlib "
                        "accepts before starting: export XLA_FLAGS=\"$XLA_FLAGS $(python -m "
                        "dense_cf.cli.xla_flags --platform=%s)\" (docs/launch.md)",
                        jax.default_backend(), " ".join(unset), jax.default_backend())
    try:
        summary = train_and_evaluate(_CONFIG.value, _WORKDIR.value)
    except Preempted as e:  # the step is saved and the lock released: rerun to resume
        if jax.process_index() == 0:
            sys.stderr.write(f"preempted: {e}\n")
        logging.flush()
        sys.stderr.flush()
        os._exit(PREEMPTED_EXIT)  # every process: no shutdown barrier with peers
    except _app.USER_ERRORS as e:
        logging.flush()
        os._exit(_app.report_user_error(e))  # every process: peers may wait in a collective
    except BaseException as e:
        if jax.process_count() == 1:
            raise
        # A normal exit waits in jax.distributed's shutdown barrier (and orbax's) for peers that
        # may themselves be blocked in a collective with us: a hang. Exit hard instead, so the
        # peers see this process die (coordination-service heartbeats) and terminate too.
        lost = distributed.lost_peer_message(e, _resume_hint(_WORKDIR.value))
        if lost is not None:  # a peer died: say which, not the collective's traceback
            logging.flush()
            sys.stderr.write(f"error: {lost}\n")
        else:
            logging.exception("process %d failed; exiting immediately", jax.process_index())
        logging.flush()
        sys.stderr.flush()
        os._exit(1)
    if jax.process_index() == 0:
        print(json.dumps({k: summary[k] for k in ("step", "train", "dev")}, indent=2, default=float))


def _resume_hint(workdir: str) -> str:
    """Where a restart of every process resumes: the newest complete checkpoint step."""
    ckpt = os.path.join(workdir, "checkpoints")
    steps = sorted(int(d) for d in (os.listdir(ckpt) if os.path.isdir(ckpt) else [])
                   if d.isdigit())
    where = f"from step {steps[-1]}, the newest complete checkpoint in {ckpt}" if steps else \
        "from the start (no complete checkpoint yet)"
    return f"Restart every process with the same command: training resumes {where}"


def run() -> None:
    """``python -m dense_cf.main`` and the installed ``dense-cf`` script."""
    try:
        sys.argv[1:] = _app.resolve_config_arg(sys.argv[1:])
    except UserError as e:
        sys.exit(_app.report_user_error(e))
    if any(a in _app.HELP_ARGS for a in sys.argv[1:]):
        # absl's --help lists the flags of the module it takes for __main__; under the console
        # script that is none, so the training flags are listed here for both.
        module = sys.modules[__name__]
        text = flags.FLAGS.module_help(module) or flags.FLAGS.module_help(module.__name__)
        sys.stdout.write(f"{__doc__.strip()}\n\nflags:\n{text}\n\nTry --helpfull for absl's own "
                         "flags; --config.<field>=value sets any config field (dense_cf/configs/base.py lists them).\n")
        sys.exit(0)
    app.run(main)


if __name__ == "__main__":
    run()
