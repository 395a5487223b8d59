"""Entry point: ``python -m dense_cf.main --config=configs/picl_nq.py --workdir=DIR [--config.x.y=v]``.

Re-running with the same workdir resumes from the latest checkpoint.
"""

from __future__ import annotations

import json

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and reports.")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None,
    "host:port of process 0 for multi-host runs; unset = single host (or auto-detected TPU/SLURM "
    "with --distributed).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes (multi-host).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process' index (multi-host).")
_DISTRIBUTED = flags.DEFINE_bool("distributed", False,
                                 "Call jax.distributed.initialize() (auto-detects TPU pods/SLURM).")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv) -> None:
    del argv
    import jax
    if _DISTRIBUTED.value or _COORDINATOR.value:
        jax.distributed.initialize(coordinator_address=_COORDINATOR.value,
                                   num_processes=_NUM_PROCESSES.value, process_id=_PROCESS_ID.value)
    # tf.data must not grab accelerators that JAX owns.
    import tensorflow as tf
    tf.config.set_visible_devices([], "GPU")
    from dense_cf.train.loop import train
    logging.info("process %d/%d, devices: %s", jax.process_index(), jax.process_count(), jax.devices())
    summary = train(_CONFIG.value, _WORKDIR.value)
    summary.pop("state", None)
    if jax.process_index() == 0:
        print(json.dumps({k: summary[k] for k in ("step", "train", "dev")}, indent=2, default=float))


def run() -> None:
    app.run(main)


if __name__ == "__main__":
    run()
