"""Metric sinks: TensorBoard summaries, a JSONL file, and a console progress line.

Only process 0 writes (multi-host runs would otherwise write N copies). TensorBoard scalars are
written as classic ``simple_value`` summaries, not TF2 tensor summaries, so that
``EventAccumulator.Scalars`` and pandas/tbparse readers see them as scalars (TF2's
``tf.summary.scalar`` writes tensors that only the TensorBoard UI converts). Event files are
written with the ``tensorboard`` package's own writer and protos, not TensorFlow's, so a run
without TensorFlow (``data.pipeline=grain``) keeps its curves.

The writer does its file I/O through ``tensorboard.compat.tf``. That name imports TensorFlow when
TensorFlow is installed, which costs ~5 s of CPU per process and bypasses ``inputs.lazy``'s guard
that keeps TensorFlow off the GPUs. ``tensorboard.compat.notf`` is tensorboard's own switch to its
TensorFlow-free stub, so we register it. The stub's gfile writes local paths; workdirs are local
or gcsfuse mounts (launch/tpu_pod.sh).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import time
import types
from typing import Any, Mapping

import jax
import numpy as np
from absl import logging
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from dense_cf.files import DiskFullError, UserError, is_disk_full

# Read when the first writer opens a file (tensorboard.compat.tf is a lazy module): see above.
sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))


def _scalar(v: Any) -> float:
    return float(np.asarray(v))


def flatten_numbers(tree: Mapping[str, Any], prefix: str) -> dict[str, float]:
    """``{"a": {"b": 1.0}}`` -> ``{"prefix/a/b": 1.0}``: the int/float leaves of a nested report
    (lists, strings and booleans are left out), for TensorBoard scalars."""
    out: dict[str, float] = {}
    for k, v in tree.items():
        tag = f"{prefix}/{k}"
        if isinstance(v, Mapping):
            out.update(flatten_numbers(v, tag))
        elif isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
            out[tag] = float(v)
    return out


@contextlib.contextmanager
def _writing(path: str, what: str, nbytes: int = 0):
    """A full disk or an unwritable directory while writing ``what`` to ``path``: one clear
    error (TensorFlow's ``ResourceExhaustedError`` included), not a traceback."""
    try:
        yield
    except Exception as e:
        if is_disk_full(e):
            raise DiskFullError.for_path(path, max(nbytes, 1), what=f"{what} to {path}",
                                         estimate=True) from e
        if (isinstance(e, OSError) and e.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
                or "Read-only file system" in str(e)):
            raise UserError(f"cannot write {what} to {path}: {getattr(e, 'strerror', None) or e}") from e
        raise


class MetricWriter:
    def __init__(self, workdir: str, *, enabled: bool | None = None, tensorboard: bool = True):
        self.enabled = jax.process_index() == 0 if enabled is None else enabled
        self._jsonl = None
        self._tb = None
        if not self.enabled:
            return
        self._jsonl_path, self._tb_dir = os.path.join(workdir, "metrics.jsonl"), os.path.join(workdir, "tb")
        with _writing(self._jsonl_path, "metrics"):
            os.makedirs(workdir, exist_ok=True)
            self._jsonl = open(self._jsonl_path, "a", buffering=1)
        if tensorboard:
            with _writing(self._tb_dir, "TensorBoard summaries"):
                self._tb = EventFileWriter(self._tb_dir)

    def write(self, step: int, metrics: Mapping[str, Any], *, prefix: str = "train") -> dict[str, float]:
        scalars = {f"{prefix}/{k}": _scalar(v) for k, v in metrics.items()}
        if not self.enabled:
            return scalars
        line = json.dumps({"step": int(step), "time": time.time(), **scalars}) + "\n"
        with _writing(self._jsonl_path, f"step {int(step)}'s metrics", len(line)):
            self._jsonl.write(line)
        self.tensorboard_scalars(step, scalars)
        return scalars

    def tensorboard_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        """Writes ``scalars`` (tag -> value) to TensorBoard alone, as ``simple_value`` scalars."""
        if not self.enabled or self._tb is None or not scalars:
            return
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=k, simple_value=float(v))
                                             for k, v in scalars.items()])
        self._add(step, summary, f"step {int(step)}'s TensorBoard summaries")

    def tensorboard_text(self, tag: str, text: str, step: int = 0) -> None:
        """Writes ``text`` (markdown; e.g. the config) to TensorBoard's Text tab."""
        if not self.enabled or self._tb is None:
            return
        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[text.encode()],
                                        tensor_shape=tensor_shape_pb2.TensorShapeProto())
        meta = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text"))
        self._add(step, summary_pb2.Summary(value=[summary_pb2.Summary.Value(
            tag=tag, metadata=meta, tensor=tensor)]), "TensorBoard text")

    def _add(self, step: int, summary: summary_pb2.Summary, what: str) -> None:
        with _writing(self._tb_dir, what):
            self._tb.add_event(event_pb2.Event(wall_time=time.time(), step=int(step),
                                               summary=summary))
            self._tb.flush()

    def console(self, step: int, total: int, scalars: Mapping[str, float], keys: tuple[str, ...],
                label: str = "train", extra: str = "") -> None:
        """Logs ``[label] step s/total (pct%) key=value ...``, then `` | extra`` if given (the
        training loop passes :meth:`dense_cf.progress.Progress.stats`: rate, elapsed, ETA)."""
        if not self.enabled:
            return
        shown = " ".join(f"{k.split('/', 1)[-1]}={scalars[k]:.4g}" for k in keys if k in scalars)
        logging.info("[%s] step %d/%d (%.0f%%) %s%s", label, step, total, 100.0 * step / max(total, 1),
                     shown, f" | {extra}" if extra else "")

    def close(self) -> None:
        if self._jsonl is not None:
            with _writing(self._jsonl_path, "metrics"):
                self._jsonl.close()
        if self._tb is not None:
            with _writing(self._tb_dir, "TensorBoard summaries"):
                self._tb.close()
