"""What the console shows: library noise filtered in one place (dense_cf/console.py), the
training entry point's --help listing its flags under the installed script too."""

import logging as py_logging
import os
import subprocess
import sys

import pytest
from absl import logging

from dense_cf import console

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _record(name: str, level: int, pathname: str, msg: str) -> py_logging.LogRecord:
    return py_logging.LogRecord(name, level, pathname, 1, msg, None, None)


def test_filter_drops_library_info_and_keeps_warnings_and_our_lines():
    f = console._DropLibraryInfo()
    orbax = os.path.join("site-packages", "orbax", "checkpoint", "checkpoint_manager.py")
    assert not f.filter(_record("absl", py_logging.INFO, orbax, "CheckpointManager init"))
    assert f.filter(_record("absl", py_logging.WARNING, orbax, "something a user must see"))
    assert not f.filter(_record("jax._src.xla_bridge", py_logging.INFO, "xla_bridge.py",
                                "Unable to initialize backend 'tpu'"))
    assert not f.filter(_record("faiss.loader", py_logging.INFO, "loader.py", "Loading faiss"))
    assert not f.filter(_record("bm25s", py_logging.INFO, "__init__.py", "Building index from IDs"))
    ours = os.path.join("dense_cf", "eval", "aar.py")
    assert f.filter(_record("absl", py_logging.INFO, ours, "AAR dpr (sentence): 0.97"))


def test_quiet_library_logs_is_idempotent_and_installed_on_absl_handler():
    console.quiet_library_logs()
    console.quiet_library_logs()
    handler = logging.get_absl_handler()
    assert sum(isinstance(f, console._DropLibraryInfo) for f in handler.filters) == 1
    assert py_logging.getLogger("jax._src.xla_bridge").level >= py_logging.WARNING


_IMPORT_TF = """
import os, sys
os.write(2, b"before\\n")
from dense_cf.console import import_tensorflow
tf = import_tensorflow()
os.write(2, b"after\\n")
print(tf.constant(2).numpy())
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_tensorflow_loads_without_its_native_info_lines(verbose):
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL",
                                                            console.VERBOSE_ENV)}
    if verbose:
        env[console.VERBOSE_ENV] = "1"
    r = subprocess.run([sys.executable, "-c", _IMPORT_TF], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "2"
    assert r.stderr.startswith("before\n") and r.stderr.rstrip().endswith("after")
    noisy = [ln for ln in r.stderr.splitlines() if any(n in ln for n in console.NATIVE_NOISE)]
    if verbose:  # DENSE_CF_VERBOSE_LIBS=1 keeps everything TensorFlow prints
        assert noisy, r.stderr
    else:
        assert noisy == [], r.stderr


def test_dense_cf_script_help_lists_the_training_flags():
    script = os.path.join(os.path.dirname(sys.executable), "dense-cf")
    cmd = [script] if os.path.exists(script) else [sys.executable, "-m", "dense_cf.main"]
    for c in (cmd + ["--help"], [sys.executable, "-m", "dense_cf.main", "--help"]):
        r = subprocess.run(c, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        for flag in ("--config", "--workdir", "--distributed", "--coordinator_address"):
            assert flag in r.stdout, (c, r.stdout)
