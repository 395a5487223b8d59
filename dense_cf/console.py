"""What the console shows: library noise filtered in one place for every binary.

``quiet_library_logs()`` drops messages that mean nothing to a dense_cf user and hide the
progress lines: orbax's INFO records (dozens per checkpoint save or restore), jax's "Unable to
initialize backend 'tpu'" on machines without one, faiss' loader lines, and TensorFlow's C++
INFO lines (the oneDNN notice) when set before TensorFlow loads. Warnings and errors always pass.
``--verbosity=1`` (absl debug) or ``DENSE_CF_VERBOSE_LIBS=1`` keeps everything. This module
imports nothing from dense_cf (bottom of the layering, docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import logging as py_logging
import os
import sys
import tempfile
import types

from absl import logging

__all__ = ["NATIVE_NOISE", "NOISY_LOGGERS", "import_tensorflow", "quiet_library_logs",
           "quiet_tensorflow_native_logs", "tensorflow_for_host"]

VERBOSE_ENV = "DENSE_CF_VERBOSE_LIBS"
# Python loggers whose INFO records are noise here (their warnings still show).
NOISY_LOGGERS = ("jax._src.xla_bridge", "faiss.loader", "faiss", "orbax", "absl.orbax",
                 "tensorflow", "h5py", "matplotlib", "bm25s")
_NOISY_PATHS = (f"{os.sep}orbax{os.sep}",)
# Lines TensorFlow's native code writes straight to file descriptor 2 while it loads, whatever
# TF_CPP_MIN_LOG_LEVEL says (TF 2.21 logs them before absl::InitializeLog). Only these are dropped.
NATIVE_NOISE = ("All log messages before absl::InitializeLog() is called",
                "oneDNN custom operations are on", "cpu_feature_guard.cc",
                "To enable the following instructions:",
                "This TensorFlow binary is optimized to use available CPU instructions")


class _DropLibraryInfo(py_logging.Filter):
    """Drops records below WARNING emitted from inside the noisy libraries (absl routes orbax's
    records through its own logger, so the logger name alone does not catch them)."""

    def filter(self, record: py_logging.LogRecord) -> bool:
        if record.levelno >= py_logging.WARNING:
            return True
        if any(p in record.pathname for p in _NOISY_PATHS):
            return False
        return not (record.name.startswith(NOISY_LOGGERS) or
                    (record.pathname.endswith("xla_bridge.py") and "backend" in record.getMessage()))


def quiet_tensorflow_native_logs() -> None:
    """Hides TensorFlow's C++ INFO lines (oneDNN notice); effective only before TF loads.

    ``setdefault``: a user's own ``TF_CPP_MIN_LOG_LEVEL`` wins.
    """
    if not os.environ.get(VERBOSE_ENV):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def import_tensorflow() -> types.ModuleType:
    """``import tensorflow``, with the :data:`NATIVE_NOISE` lines it prints while loading dropped.

    Everything else written to stderr meanwhile (warnings, errors) is written back unchanged.
    The first import in a process is the one that prints; later calls just return the module.
    """
    if "tensorflow" in sys.modules or os.environ.get(VERBOSE_ENV):
        import tensorflow
        return tensorflow
    quiet_tensorflow_native_logs()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode("utf-8", errors="replace")
            kept = [ln for ln in text.splitlines(keepends=True)
                    if not any(n in ln for n in NATIVE_NOISE)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
    return tensorflow


def tensorflow_for_host() -> types.ModuleType:
    """TensorFlow for host-side input pipelines: imported quietly (:func:`import_tensorflow`)
    and kept off the GPUs, which JAX owns (a tf.data op would otherwise grab their memory).
    Must run before any TensorFlow op: ``inputs.lazy.tf``, the way the pipelines reach
    TensorFlow, calls it on first use."""
    tf = import_tensorflow()
    tf.config.set_visible_devices([], "GPU")
    return tf


def quiet_library_logs() -> None:
    """Installs the filter once on absl's handler (every record that reaches the console passes
    it, whichever logger made it) and raises the noisy loggers to WARNING; idempotent."""
    quiet_tensorflow_native_logs()
    if os.environ.get(VERBOSE_ENV) or logging.get_verbosity() > logging.INFO:
        return
    for target in (logging.get_absl_handler(), logging.get_absl_logger()):
        if not any(isinstance(f, _DropLibraryInfo) for f in target.filters):
            target.addFilter(_DropLibraryInfo())
    for name in NOISY_LOGGERS:
        lg = py_logging.getLogger(name)
        if lg.level < py_logging.WARNING:
            lg.setLevel(py_logging.WARNING)
