"""Orbax checkpoints of the train state plus the data-iterator state (resume = same batches).

Saves are asynchronous; ``restore`` puts arrays straight into the mesh using the shardings of
the abstract target, so no host ever holds the full state when it is sharded. Resuming from an
unreadable newest checkpoint (a truncated file, a crash mid-save) falls back to the newest intact
one; the unreadable step directories are moved aside, not deleted.

Every finished step is sealed: process 0 hashes its files into ``<step>/SHA256SUMS``
(``files.write_sums``), with the training inputs' hashes in ``<step>/inputs.json`` when the
trainer gives them. A restore checks the step against it first, so a step whose bytes changed
after it was written (a flipped bit, an overwrite that keeps the size) is unreadable like a
truncated one. A step without ``SHA256SUMS`` (older runs, or a kill between the save and its
seal) is restored unverified, with a warning.

A save that fails (a full disk, an I/O error) removes its ``*.orbax-checkpoint-tmp`` directory
before the error is raised; so does :meth:`Checkpointer.abandon` when training stops on another
error while a save is in flight.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import logging as py_logging
import os
import shutil
import sys
import time
from typing import Any

import jax
import orbax.checkpoint as ocp
from absl import logging
from jax.experimental import multihost_utils

from dense_cf import files
from dense_cf.files import DiskFullError, UserError, is_disk_full

TMP_CHECKPOINT_MARK = ".orbax-checkpoint-tmp"  # orbax's name for a step still being written
INPUTS_NAME = "inputs.json"  # beside a step's items: sha256 of the files it was trained from


class CheckpointError(UserError):
    """No checkpoint in the directory can be restored."""


def handled_error(e: BaseException | None) -> bool:
    """Whether ``e`` is one this module turns into one clear error: a full disk, or a directory
    that cannot be written (read-only file system, permission denied)."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, OSError) and e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return True
        if "Read-only file system" in str(e):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


_RESTORING = [0]  # > 0 while Checkpointer.restore tries steps (its warnings say what failed)


_ORBAX_DIR = f"{os.sep}orbax{os.sep}"  # in a source path: code of the orbax package


class _DropHandledOrbaxTracebacks(py_logging.Filter):
    """Orbax logs every failure of its background threads with a traceback
    (``logging.exception``) before the error reaches the caller; for the errors the caller turns
    into one line (a full disk, an unwritable directory) those tracebacks are dropped, and so are
    orbax's errors about an unreadable step while :meth:`Checkpointer.restore` tries the steps
    (it warns once per unreadable step, naming it)."""

    def filter(self, record: py_logging.LogRecord) -> bool:
        if record.name == "asyncio" and _raised_in_orbax(record.exc_info):
            # "Task exception was never retrieved": a read of a damaged step that orbax
            # started beside the one that failed first, collected later; restore has already
            # warned about that step (seen under load in tests/test_faults.py).
            return False
        if _ORBAX_DIR not in record.pathname or record.levelno < py_logging.ERROR:
            return True
        if _RESTORING[0]:
            return False
        e = record.exc_info[1] if record.exc_info else None
        return not (e is not None and (is_disk_full(e) or handled_error(e)))


def _raised_in_orbax(exc_info: Any) -> bool:
    tb = exc_info[2] if exc_info else None
    while tb is not None:
        if _ORBAX_DIR in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return False


def _leftover_async_noise(u: Any) -> bool:
    """An unraisable error left by a failed orbax read or write: tensorstore completing a read
    into the event loop orbax already closed (``Event loop is closed``), or an orbax coroutine
    that never ran to its end. The failure itself has been raised to the caller already."""
    if isinstance(u.exc_value, RuntimeError) and str(u.exc_value) == "Event loop is closed":
        return True
    code = getattr(u.object, "cr_code", None) if inspect.iscoroutine(u.object) else None
    return code is not None and _ORBAX_DIR in code.co_filename


def _quiet_orbax_failures() -> None:
    # orbax logs via absl; asyncio reports the tasks orbax left behind on its own logger.
    for target in (logging.get_absl_handler(), logging.get_absl_logger(),
                   py_logging.getLogger("asyncio")):
        if not any(isinstance(f, _DropHandledOrbaxTracebacks) for f in target.filters):
            target.addFilter(_DropHandledOrbaxTracebacks())
    previous = sys.unraisablehook
    if getattr(previous, "_dense_cf", False):
        return

    def hook(u: Any) -> None:
        if not _leftover_async_noise(u):
            previous(u)

    hook._dense_cf = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


class Checkpointer:
    """Thin wrapper of ``ocp.CheckpointManager`` with items ``state`` and ``data``."""

    def __init__(self, directory: str, *, max_to_keep: int = 3, save_interval_steps: int = 1000,
                 async_save: bool = True, remove_partial: bool = False):
        """``remove_partial``: remove the ``*.orbax-checkpoint-tmp`` steps a killed run left
        (the trainer, which holds the workdir lock; never a reader beside a running trainer)."""
        self.directory = os.path.abspath(directory)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, save_interval_steps=save_interval_steps,
            enable_async_checkpointing=async_save, create=True,
            cleanup_tmp_directories=True)  # a save cut short (kill, full disk) is never "valid"
        self._async = async_save
        self._pending: tuple[int, int] | None = None  # (step, bytes) of the save in flight
        self.inputs: dict[str, Any] | None = None  # recorded in each sealed step (inputs.json)
        if remove_partial:  # a save cut short by a kill: orbax leaves it on some paths
            self._remove_partial_saves()
        _quiet_orbax_failures()
        self.manager = ocp.CheckpointManager(self.directory, options=options,
                                             item_names=("state", "data"))

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: Any, data_state: dict[str, Any], *, force: bool = False) -> bool:
        """Saves (asynchronously when so configured). Out of space, here or when the async
        save finishes: :class:`~dense_cf.files.DiskFullError`, and the partial step is removed.
        The previous save is waited for first, so an error names the step that failed."""
        self.wait()
        self._pending = (step, sum(int(getattr(x, "nbytes", 0)) for x in jax.tree.leaves(state)))
        saved = self._guard(lambda: self.manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state)), force=force))
        if saved:
            logging.info("checkpoint: saving step %d to %s (async)", step, self.directory)
        if not self._async:  # written already: seal it now
            self.wait()
        return saved

    def _guard(self, fn: Any) -> Any:
        """``fn()``; when it fails the partial save is removed first, and a full disk becomes
        one clear error."""
        try:
            return fn()
        except Exception as e:
            step, nbytes = self._pending or (None, 0)
            self._remove_partial_saves()
            if not is_disk_full(e):
                raise
            raise DiskFullError.for_path(self.directory, nbytes,
                                         what=f"checkpoint step {step} to {self.directory}",
                                         estimate=True) from e

    def step_dir(self, step: int) -> str:
        return os.path.join(self.directory, str(step))

    def _seal(self, step: int) -> None:
        """Process 0 writes ``<step>/SHA256SUMS`` over the finished step's files (and
        ``inputs.json`` first, when the trainer recorded its inputs)."""
        d = self.step_dir(step)
        sums = os.path.join(d, files.SUMS_NAME)
        if jax.process_index() != 0 or not os.path.isdir(d) or os.path.exists(sums):
            return
        try:
            if self.inputs is not None:
                files.write_json(os.path.join(d, INPUTS_NAME), self.inputs)
            paths = [os.path.join(r, n) for r, _, ns in os.walk(d) for n in ns
                     if n != files.SUMS_NAME and not files.is_tmp_name(n)]
            files.write_sums(sums, paths)
        except Exception as e:
            files.remove_if_exists(sums)
            if is_disk_full(e):
                raise DiskFullError.for_path(sums, 4096, what=f"the checksums of checkpoint step "
                                             f"{step} in {self.directory}", estimate=True) from e
            raise

    def verify_step(self, step: int) -> bool:
        """Raises :class:`~dense_cf.files.IntegrityError` naming the first file of ``step``
        whose bytes differ from its ``SHA256SUMS``; False when the step has none (unverified)."""
        sums = os.path.join(self.step_dir(step), files.SUMS_NAME)
        if not os.path.exists(sums):
            return False
        files.verify_sums(sums, f"checkpoint step {step} in {self.directory} is damaged")
        return True

    def _checked(self, step: int) -> None:
        if not self.verify_step(step):
            logging.warning("checkpoint: step %d in %s has no %s (written before checksums, or "
                            "killed right after its save): restored unverified", step,
                            self.directory, files.SUMS_NAME)

    def record_inputs(self, paths: dict[str, str]) -> dict[str, Any]:
        """Sets :attr:`inputs` (sealed into every later step) to the sha256, size and mtime of
        each input file (``{config key: path}``, e.g. the training and dev files). A file whose
        size and mtime match the newest sealed step's record keeps that hash (no re-read); one
        whose content differs from it is warned about, naming it: the run resumes on other data."""
        step = self.latest_step()
        old = files.read_json(os.path.join(self.step_dir(step), INPUTS_NAME)) if step else None
        old = old if isinstance(old, dict) else {}
        record = {}
        for key, path in sorted(paths.items()):
            st, prev = os.stat(path), old.get(key) or {}
            same = (prev.get("path") == os.path.abspath(path) and prev.get("bytes") == st.st_size
                    and prev.get("mtime_ns") == st.st_mtime_ns)
            sha = prev["sha256"] if same else files.file_sha256(path)
            record[key] = {"path": os.path.abspath(path), "bytes": st.st_size,
                           "mtime_ns": st.st_mtime_ns, "sha256": sha}
            if prev.get("sha256") and prev["sha256"] != sha:
                logging.warning("checkpoint: %s (config.data.%s) changed since step %d in %s was "
                                "saved (sha256 %s… then, %s… now): training resumes on the new "
                                "file", path, key, step, self.directory, prev["sha256"][:12],
                                sha[:12])
        self.inputs = record
        return record

    @contextlib.contextmanager
    def abandon_on_error(self):
        """Around the training loop: an error there (not a second signal, which stops at once)
        abandons (:meth:`abandon`) the save in flight before it propagates (one process)."""
        try:
            yield self
        except Exception:
            # On several hosts a save in flight is collective: waiting for it after a peer was
            # lost could hang past the heartbeat bound; its leftover goes at the next start.
            if jax.process_count() == 1:
                self.abandon()
            raise

    def abandon(self) -> None:
        """After training failed on another error: waits for a save in flight (its own error is
        dropped: the first error is the one reported) and removes what it left half-written."""
        with contextlib.suppress(Exception):
            self.manager.wait_until_finished()
        self._pending = None
        self._remove_partial_saves()
        with contextlib.suppress(Exception):
            self.manager.close()

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
            _RESTORING[0] += 1
            try:
                out = self._restore(abstract_state, s)
            except Exception as e:  # orbax/tensorstore raise ValueError, OSError, XlaRuntimeError...
                errors.append((s, e))
                logging.warning("checkpoint: step %d in %s is unreadable (%s: %s)", s, self.directory,
                                type(e).__name__, _first_line(e))
                continue
            finally:
                _RESTORING[0] -= 1
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
        self._checked(step)
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
        self._checked(step)  # evaluating a damaged step is refused, not replaced by another
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
        if self._pending is not None:
            self._seal(self._pending[0])
        self._pending = None

    def check(self) -> None:
        """Raises now if a background save has failed (it does not wait for one in flight)."""
        if self._pending is not None and not self.manager.is_saving_in_progress():
            self.wait()

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
