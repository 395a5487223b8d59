"""Orbax checkpoints of the train state plus the data-iterator state (resume = same batches).

Saves are asynchronous; ``restore`` puts arrays straight into the mesh using the shardings of
the abstract target, so no host ever holds the full state when it is sharded. Resuming from an
unreadable newest checkpoint (a truncated file, a crash mid-save) falls back to the newest intact
one; the unreadable step directories are moved aside, not deleted.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

import jax
import orbax.checkpoint as ocp
from absl import logging
from jax.experimental import multihost_utils

from dense_cf.files import DiskFullError, UserError, is_disk_full

TMP_CHECKPOINT_MARK = ".orbax-checkpoint-tmp"  # orbax's name for a step still being written


class CheckpointError(UserError):
    """No checkpoint in the directory can be restored."""


class Checkpointer:
    """Thin wrapper of ``ocp.CheckpointManager`` with items ``state`` and ``data``."""

    def __init__(self, directory: str, *, max_to_keep: int = 3, save_interval_steps: int = 1000,
                 async_save: bool = True):
        self.directory = os.path.abspath(directory)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, save_interval_steps=save_interval_steps,
            enable_async_checkpointing=async_save, create=True,
            cleanup_tmp_directories=True)  # a save cut short (kill, full disk) is never "valid"
        self._pending: tuple[int, int] | None = None  # (step, bytes) of the save in flight
        self.manager = ocp.CheckpointManager(self.directory, options=options,
                                             item_names=("state", "data"))

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: Any, data_state: dict[str, Any], *, force: bool = False) -> bool:
        """Saves (asynchronously when so configured). Out of space, here or when the async
        save finishes: :class:`~dense_cf.files.DiskFullError`, and the partial step is removed."""
        self._pending = (step, sum(int(getattr(x, "nbytes", 0)) for x in jax.tree.leaves(state)))
        saved = self._guard(lambda: self.manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state)), force=force))
        if saved:
            logging.info("checkpoint: saving step %d to %s (async)", step, self.directory)
        return saved

    def _guard(self, fn: Any) -> Any:
        """``fn()``, with a full disk turned into one clear error (the partial save removed)."""
        try:
            return fn()
        except Exception as e:
            if not is_disk_full(e):
                raise
            step, nbytes = self._pending or (None, 0)
            self._remove_partial_saves()
            raise DiskFullError.for_path(self.directory, nbytes,
                                         what=f"checkpoint step {step} to {self.directory}",
                                         estimate=True) from e

    def _remove_partial_saves(self) -> None:
        if jax.process_index() != 0 or not os.path.isdir(self.directory):
            return
        for name in os.listdir(self.directory):
            if TMP_CHECKPOINT_MARK in name:
                shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)

    def restore(self, abstract_state: Any, step: int | None = None) -> tuple[Any, dict[str, Any], int]:
        """Restores (state, data_state, step); ``abstract_state`` carries target shardings.

        With ``step`` None: the newest intact step. An unreadable newer step is logged with both
        step numbers and moved to ``<directory>.corrupt/`` (so a later save of that step works);
        when none is intact, :class:`CheckpointError` names the steps and the first error.
        """
        if step is not None:
            return self._restore(abstract_state, step)
        steps = sorted(self.manager.all_steps(), reverse=True)
        if not steps:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        errors: list[tuple[int, Exception]] = []
        for s in steps:
            try:
                out = self._restore(abstract_state, s)
            except Exception as e:  # orbax/tensorstore raise ValueError, OSError, XlaRuntimeError...
                errors.append((s, e))
                logging.warning("checkpoint: step %d in %s is unreadable (%s: %s)", s, self.directory,
                                type(e).__name__, _first_line(e))
                continue
            if errors:
                bad = [b for b, _ in errors]
                logging.warning("checkpoint: newest step %d unreadable; resumed from step %d instead "
                                "(unreadable steps %s moved to %s)", bad[0], s, bad, self._aside_dir())
                self._move_aside(bad)
            return out
        first = errors[0]
        raise CheckpointError(
            f"no intact checkpoint in {self.directory}: steps {[b for b, _ in errors]} are all unreadable "
            f"(step {first[0]}: {type(first[1]).__name__}: {_first_line(first[1])}); move the directory "
            f"away to train from scratch")

    def _restore(self, abstract_state: Any, step: int) -> tuple[Any, dict[str, Any], int]:
        out = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state), data=ocp.args.JsonRestore()))
        logging.info("checkpoint: restored step %d from %s", step, self.directory)
        return out["state"], out["data"], step

    def restore_params(self, abstract_params: Any, step: int | None = None) -> tuple[Any, int]:
        """Restores only ``state.params`` (``abstract_params``: ShapeDtypeStructs with target
        shardings) of step ``step`` (default the newest): the optimizer state and the data
        state stay on disk, so evaluation reads and places the parameters' bytes alone."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        target = {"params": abstract_params}
        out = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.PyTreeRestore(
            item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
            partial_restore=True)))
        logging.info("checkpoint: restored the params of step %d from %s", step, self.directory)
        return out["state"]["params"], step

    def _aside_dir(self) -> str:
        return self.directory.rstrip("/") + ".corrupt"

    def _move_aside(self, steps: list[int]) -> None:
        if jax.process_index() == 0:
            aside = self._aside_dir()
            os.makedirs(aside, exist_ok=True)
            stamp = time.strftime("%Y%m%d-%H%M%S")
            for s in steps:
                src = os.path.join(self.directory, str(s))
                if os.path.isdir(src):
                    shutil.move(src, os.path.join(aside, f"{s}-{stamp}"))
        if jax.process_count() > 1:  # nobody reloads before process 0 has moved the steps
            multihost_utils.sync_global_devices("dense_cf checkpoint: unreadable steps moved")
        self.manager.reload()

    def wait(self) -> None:
        self._guard(self.manager.wait_until_finished)

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self.manager.close()


def abstract_like(tree: Any) -> Any:
    """ShapeDtypeStructs (with shardings) of a tree of jax.Arrays, for ``restore``."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else ""
