"""Orbax checkpoints of the train state plus the data-iterator state (resume = same batches).

Saves are asynchronous; ``restore`` puts arrays straight into the mesh using the shardings of
the abstract target, so no host ever holds the full state when it is sharded.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp
from absl import logging


class Checkpointer:
    """Thin wrapper of ``ocp.CheckpointManager`` with items ``state`` and ``data``."""

    def __init__(self, directory: str, *, max_to_keep: int = 3, save_interval_steps: int = 1000,
                 async_save: bool = True):
        self.directory = os.path.abspath(directory)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, save_interval_steps=save_interval_steps,
            enable_async_checkpointing=async_save, create=True)
        self.manager = ocp.CheckpointManager(self.directory, options=options,
                                             item_names=("state", "data"))

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: Any, data_state: dict[str, Any], *, force: bool = False) -> bool:
        saved = self.manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state)), force=force)
        if saved:
            logging.info("checkpoint: saving step %d to %s (async)", step, self.directory)
        return saved

    def restore(self, abstract_state: Any, step: int | None = None) -> tuple[Any, dict[str, Any], int]:
        """Restores (state, data_state, step); ``abstract_state`` carries target shardings."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        out = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state), data=ocp.args.JsonRestore()))
        logging.info("checkpoint: restored step %d from %s", step, self.directory)
        return out["state"], out["data"], step

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()


def abstract_like(tree: Any) -> Any:
    """ShapeDtypeStructs (with shardings) of a tree of jax.Arrays, for ``restore``."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)
