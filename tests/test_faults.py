"""Fault tolerance (issue 17 §5): a corrupt newest checkpoint, and the workdir lock."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dense_cf import app as _app
from dense_cf import files
from dense_cf.cli import eval_aar, eval_retrieval, eval_robustness
from dense_cf.train.checkpoint import Checkpointer, CheckpointError, abstract_like


# ------------------------------------------------------------------------------ checkpoints
def _state(shift: float):
    p = {"w": jnp.arange(4096.0).reshape(64, 64) + shift, "b": jnp.full((64,), shift)}
    return {"params": p, "opt": optax.adam(1e-3).init(p)}


def _truncate_largest_data_file(step_dir: str) -> str:
    paths = [os.path.join(r, f) for r, _, fs in os.walk(os.path.join(step_dir, "state")) for f in fs]
    victim = max(paths, key=os.path.getsize)
    with open(victim, "r+b") as f:
        f.truncate(os.path.getsize(victim) // 3)
    return victim


@pytest.fixture
def two_steps(tmp_path):
    d = str(tmp_path / "checkpoints")
    c = Checkpointer(d, async_save=False, save_interval_steps=1)
    c.save(1, _state(1.0), {"pos": 1})
    c.save(2, _state(2.0), {"pos": 2})
    c.close()
    return d


def test_corrupt_newest_checkpoint_falls_back_to_the_intact_one(two_steps, caplog):
    _truncate_largest_data_file(os.path.join(two_steps, "2"))
    c = Checkpointer(two_steps, async_save=False, save_interval_steps=1)
    with caplog.at_level("WARNING"):
        state, data, step = c.restore(abstract_like(_state(0.0)))
    assert step == 1 and data == {"pos": 1}
    np.testing.assert_array_equal(np.asarray(state["params"]["w"]), np.asarray(_state(1.0)["params"]["w"]))
    msgs = " ".join(r.getMessage() for r in caplog.records)
    assert "newest step 2 unreadable; resumed from step 1" in msgs
    # Nothing deleted: the unreadable step is set aside, and training can save step 2 again.
    aside = os.listdir(two_steps + ".corrupt")
    assert len(aside) == 1 and aside[0].startswith("2-")
    assert c.latest_step() == 1
    assert c.save(2, _state(5.0), {"pos": 2}, force=True)
    c.wait()
    state, data, step = c.restore(abstract_like(_state(0.0)))
    assert step == 2 and float(state["params"]["b"][0]) == 5.0
    c.close()


def test_no_intact_checkpoint_is_one_clear_error(two_steps):
    for s in ("1", "2"):
        _truncate_largest_data_file(os.path.join(two_steps, s))
    c = Checkpointer(two_steps, async_save=False, save_interval_steps=1)
    with pytest.raises(CheckpointError, match=r"no intact checkpoint in .*steps \[2, 1\] are all unreadable"):
        c.restore(abstract_like(_state(0.0)))
    assert sorted(os.listdir(two_steps)) == ["1", "2"]  # untouched when nothing could be restored
    c.close()


def test_user_errors_print_one_line_and_exit_1(capsys, monkeypatch):
    monkeypatch.delenv(_app.TRACEBACK_ENV, raising=False)
    assert _app.report_user_error(CheckpointError("no intact checkpoint in /x")) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no intact checkpoint in /x\n") and "Traceback" not in err
    monkeypatch.setenv(_app.TRACEBACK_ENV, "1")
    with pytest.raises(CheckpointError):
        _app.report_user_error(CheckpointError("again"))


# ------------------------------------------------------------------------------ workdir lock
def _holder(workdir: str) -> subprocess.Popen:
    """A process that takes the lock, says so, and sleeps."""
    code = textwrap.dedent(f"""
        import sys, time
        from dense_cf import files
        with files.workdir_lock({workdir!r}, "training picl"):
            print("locked", flush=True)
            time.sleep(120)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def test_second_writer_refuses_naming_pid_and_host_then_stale_lock_is_taken_over(tmp_path):
    wd = str(tmp_path / "run")
    p = _holder(wd)
    try:
        t0 = time.perf_counter()
        with pytest.raises(files.WorkdirLockedError) as e:
            with files.workdir_lock(wd, "eval_aar"):
                pass
        msg = str(e.value)
        assert f"pid {p.pid} on {socket.gethostname()} (training picl" in msg and wd in msg
        assert time.perf_counter() - t0 < 5  # at once, not after a wait
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    # The holder died without releasing: its lock is stale and is taken over with a warning.
    warnings = []
    with files.workdir_lock(wd, "training dpr", warn=warnings.append) as me:
        assert me["pid"] == os.getpid()
        assert json.load(open(os.path.join(wd, files.LOCK_NAME)))["purpose"] == "training dpr"
        with files.workdir_lock(wd, "eval_retrieval"):  # the same process may nest
            pass
        assert os.path.exists(os.path.join(wd, files.LOCK_NAME))
    assert len(warnings) == 1 and f"stale lock of pid {p.pid}" in warnings[0]
    assert not os.path.exists(os.path.join(wd, files.LOCK_NAME))  # released


def test_lock_from_another_host_is_never_taken_over(tmp_path):
    wd = tmp_path / "run"
    wd.mkdir()
    (wd / files.LOCK_NAME).write_text(json.dumps(
        {"pid": 1, "host": "some-other-node", "purpose": "training picl", "started": 0}))
    with pytest.raises(files.WorkdirLockedError, match=r"pid 1 on some-other-node .*if that run is gone, delete"):
        with files.workdir_lock(str(wd), "eval_aar"):
            pass


def test_trainer_refuses_a_locked_workdir_at_once(tmp_path):
    """The real binaries: a held workdir makes ``dense_cf.main`` exit 1 with one line, and the
    evaluation binaries refuse."""
    wd = str(tmp_path / "run")
    p = _holder(wd)
    try:
        env = dict(os.environ, JAX_PLATFORMS="cpu")
        env.pop(_app.TRACEBACK_ENV, None)
        r = subprocess.run([sys.executable, "-m", "dense_cf.main", "--config=configs/demo.py",
                            f"--workdir={wd}"], capture_output=True, text=True, env=env, timeout=300,
                           cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        for cli in (eval_aar, eval_retrieval, eval_robustness):  # evaluators refuse too
            with pytest.raises(files.WorkdirLockedError, match=f"pid {p.pid}"):
                cli.run_cli([f"--workdir={wd}"])
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert r.returncode == 1, r.stderr[-2000:]
    assert f"error: {wd} is in use by pid {p.pid}" in r.stderr
    assert "Traceback" not in r.stderr
    assert not os.path.exists(os.path.join(wd, "checkpoints"))  # refused before any work


# ------------------------------------------------------------------------------ full disk
def test_atomic_write_out_of_space_keeps_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "report.md"
    target.write_text("previous report\n")
    with pytest.raises(files.DiskFullError, match=r"no space left writing .*report\.md: it needs more than"):
        with files.atomic_open(target) as f:
            f.write("partial")
            f.flush()
            raise OSError(errno.ENOSPC, "No space left on device")
    assert target.read_text() == "previous report\n"
    assert os.listdir(tmp_path) == ["report.md"]
    assert files.is_disk_full(ValueError("RESOURCE_EXHAUSTED: ... No space left on device [os_error_code='28']"))
    assert not files.is_disk_full(OSError(errno.ENOENT, "missing"))


_FULL_DISK_SCRIPT = r'''
import os, sys
import jax, optax
from dense_cf import files
from dense_cf.train.checkpoint import Checkpointer, abstract_like

d, phase = sys.argv[1], sys.argv[2]
w = jax.random.normal(jax.random.key(0), (2048, 1024))  # 8 MB of incompressible floats
state = {"params": {"w": w}, "opt": optax.adam(1e-3).init({"w": w})}
c = Checkpointer(os.path.join(d, "checkpoints"), async_save=True, save_interval_steps=1)
if phase == "full":
    for attempt in ("save", "report"):
        try:
            if attempt == "save":
                c.save(1, state, {"pos": 1})
                c.wait()
            else:
                with files.atomic_open(os.path.join(d, "report.md")) as f:
                    f.write("x" * (16 << 20))
            print(attempt, "OK")
        except files.DiskFullError as e:
            print(attempt, "DISKFULL", e)
    print("LEFT", sorted(os.listdir(os.path.join(d, "checkpoints"))), sorted(os.listdir(d)))
    # A FAISS index save (8 MB of vectors) and a BM25 index build (a ~7 MB passage store).
    import numpy as np
    from dense_cf.index.bm25 import BM25Index
    from dense_cf.index.faiss_index import IndexSpec, build_index
    index = build_index(np.asarray(w, np.float32), spec=IndexSpec(kind="flat"))
    rows = [(f"p{i}", f"passage {i} " + "word%d " % i * 40, f"Title {i}") for i in range(20000)]
    for attempt in ("faiss", "bm25"):
        try:
            if attempt == "faiss":
                index.save(os.path.join(d, "index"))
            else:
                BM25Index.build(rows, os.path.join(d, "bm25"), k1=0.9, b=0.4)
            print(attempt, "OK")
        except files.DiskFullError as e:
            print(attempt, "DISKFULL", e)
    left = {n: sorted(os.listdir(os.path.join(d, n))) for n in sorted(os.listdir(d))
            if os.path.isdir(os.path.join(d, n)) and n != "checkpoints"}
    print("LEFT2", left)
else:
    assert c.latest_step() is None
    c.save(1, state, {"pos": 1})
    c.wait()
    restored, data, step = c.restore(abstract_like(state))
    print("RESUMED", step, data, bool((restored["params"]["w"] == w).all()))
c.close()
'''


def test_full_disk_checkpoint_and_report_then_resume_after_space_is_freed(tmp_path):
    """A 6 MB tmpfs (mounted in a user namespace): the checkpoint and a report each fail with
    one DiskFullError, leave nothing half-written, and after the tmpfs grows the same save works."""
    if not shutil.which("unshare") or subprocess.run(
            ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {tmp_path}"],
            capture_output=True).returncode:
        pytest.skip("no user namespaces here to mount a small tmpfs")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = tmp_path / "full.py"
    script.write_text(_FULL_DISK_SCRIPT)
    py = sys.executable
    shell = (f"mount -t tmpfs -o size=6m tmpfs {mnt} && {py} {script} {mnt} full && "
             f"mount -o remount,size=64m {mnt} && {py} {script} {mnt} resume")
    r = subprocess.run(["unshare", "-rm", "sh", "-c", shell], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, JAX_PLATFORMS="cpu"))
    out = r.stdout
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"save DISKFULL no space left writing checkpoint step 1 to {mnt}/checkpoints: it needs about 24.0 MB" in out
    assert "report DISKFULL no space left writing" in out and "report.md: it needs more than" in out
    assert "LEFT [] ['checkpoints']" in out  # no partial step, no temp report
    assert "RESUMED 1 {'pos': 1} True" in out
    # The index save and the BM25 build: one DiskFullError each; no shard or store left that a
    # later run could take for complete (no index.json / meta.json, no temp directory).
    assert f"faiss DISKFULL no space left writing {mnt}/index/shard-00000.faiss" in out
    assert f"bm25 DISKFULL no space left writing {mnt}/bm25: it needs more than" in out
    assert "LEFT2 {'index': []}" in out


# ------------------------------------------------------------------ read-only workdir (issue 34 §5)
_READ_ONLY_SCRIPT = r'''
import os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
from helpers import tiny_tower_config, write_tower_data
from dense_cf import app as _app
from dense_cf.cli import (eval_aar, eval_e2e, eval_localisation, eval_multihop, eval_pivot,
                          eval_retrieval, eval_robustness)
from dense_cf.experiment import train_and_evaluate

ro, data = sys.argv[1], sys.argv[2]
run = os.path.join(ro, "run")
write_tower_data(data)
print("BINARY train", flush=True)
try:
    train_and_evaluate(tiny_tower_config(data), os.path.join(ro, "new"))
except _app.USER_ERRORS as e:
    _app.report_user_error(e)
for name, mod, argv in [("eval_retrieval", eval_retrieval, [f"--workdir={run}"]),
                        ("eval_aar", eval_aar, [f"--workdir={run}"]),
                        ("eval_robustness", eval_robustness, [f"--workdir={run}"]),
                        ("eval_multihop", eval_multihop, [f"--workdir={run}"]),
                        ("eval_e2e", eval_e2e, [f"--reader={run}", f"--retriever={run}"])]:
    print("BINARY", name, flush=True)
    print("STATUS", _app.call(mod.main, mod.FLAGS, argv), flush=True)
'''


def test_read_only_workdir_is_one_error_line_for_training_and_evaluation(tmp_path):
    """A workdir on a read-only file system: training and each evaluation binary that writes
    into the run directory print one ``error:`` line naming the path and what was being written
    (the workdir lock, their first write), exit 1, no ``OSError`` traceback."""
    if not shutil.which("unshare") or subprocess.run(
            ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {tmp_path}"],
            capture_output=True).returncode:
        pytest.skip("no user namespaces here to mount a read-only file system")
    ro = tmp_path / "ro"
    ro.mkdir()
    (tmp_path / "data").mkdir()
    script = tmp_path / "ro.py"
    script.write_text(_READ_ONLY_SCRIPT)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop(_app.TRACEBACK_ENV, None)
    shell = (f"mount -t tmpfs -o size=1m tmpfs {ro} && mkdir {ro}/run && mount -o remount,ro {ro} && "
             f"{sys.executable} {script} {ro} {tmp_path / 'data'}")
    r = subprocess.run(["unshare", "-rm", "sh", "-c", shell], capture_output=True, text=True, timeout=300,
                       env=env, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    out = r.stdout.split("BINARY ")[1:]
    assert [o.split()[0] for o in out] == ["train", "eval_retrieval", "eval_aar", "eval_robustness",
                                           "eval_multihop", "eval_e2e"], r.stdout + r.stderr[-3000:]
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == len(out), r.stderr[-3000:]
    assert errors[0] == (f"error: cannot write {ro}/new (the workdir for training picl): read-only file "
                         "system; make it writable or pass another directory")
    for name, err in zip([o.split()[0] for o in out[1:]], errors[1:]):
        assert err.startswith(f"error: cannot write {ro}/run/{files.LOCK_NAME} (the workdir lock for "
                              f"{name}): read-only file system"), err
    assert all("STATUS 1" in o for o in out[1:]), r.stdout


def test_read_only_file_system_elsewhere_is_one_line(capsys, monkeypatch):
    """Binaries that write reports without the workdir lock (eval_localisation, eval_pivot): an
    OSError EROFS is one line naming the path."""
    monkeypatch.delenv(_app.TRACEBACK_ENV, raising=False)

    def main(argv):
        raise OSError(errno.EROFS, "Read-only file system", "/runs/x/eval/step-6")

    assert _app.call(main, eval_aar.FLAGS, []) == 1
    assert capsys.readouterr().err.startswith(
        "error: /runs/x/eval/step-6: cannot write: read-only file system\n")


def test_a_preempted_study_or_demo_is_one_line_and_status_75(capsys, monkeypatch):
    """A binary other than dense_cf.main (a study, the demo) whose training is stopped by
    SIGTERM: ``Preempted`` reaches ``dense_cf.app``, which prints one ``preempted:`` line and
    gives 75 (EX_TEMPFAIL), so a scheduler reruns it; before, a traceback and status 1."""
    from dense_cf.train.preemption import PREEMPTED_EXIT, Preempted
    monkeypatch.delenv(_app.TRACEBACK_ENV, raising=False)

    def main(argv):
        raise Preempted(51, "runs/rep/dpr_seed1/checkpoints", "SIGTERM")

    assert _app.call(main, eval_aar.FLAGS, []) == PREEMPTED_EXIT == 75
    err = capsys.readouterr().err
    assert err == ("preempted: stopped by SIGTERM after saving step 51 in "
                   "runs/rep/dpr_seed1/checkpoints; run the same command again to resume "
                   "(exit status 75)\n"), err


# ------------------------------------------------------------------ a damaged checkpoint, quietly
_DAMAGE_SCRIPT = r'''
import os, shutil, sys
import jax.numpy as jnp, numpy as np, optax
from dense_cf.train.checkpoint import Checkpointer, abstract_like

def state(shift):
    p = {"w": jnp.arange(65536.0).reshape(256, 256) + shift, "b": jnp.full((64,), shift)}
    return {"params": p, "opt": optax.adam(1e-3).init(p)}

d = sys.argv[1]
src = os.path.join(d, "src")
c = Checkpointer(src, async_save=False, save_interval_steps=1)
c.save(1, state(1.0), {"pos": 1})
c.save(2, state(2.0), {"pos": 2})
c.close()
names = sorted(os.path.relpath(os.path.join(r, f), os.path.join(src, "2"))
               for r, _, fs in os.walk(os.path.join(src, "2")) for f in fs)
for i, rel in enumerate(names):
    for how in ("truncate", "scramble"):
        work = os.path.join(d, f"{i}-{how}")
        shutil.copytree(src, work)
        p = os.path.join(work, "2", rel)
        size = os.path.getsize(p)
        with open(p, "r+b") as f:
            if how == "truncate":
                f.truncate(size // 2)
            else:
                f.seek(size // 3)
                f.write(bytes(range(256)) * (max(8, size // 3) // 256 + 1))
        c = Checkpointer(work, async_save=False, save_interval_steps=1)
        try:
            st, data, step = c.restore(abstract_like(state(0.0)))
            exact = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in
                        zip(jax.tree.leaves(st), jax.tree.leaves(state(float(step)))))
            print("CASE", rel, how, "step", step, data["pos"], exact, flush=True)
        except Exception as e:
            print("CASE", rel, how, "ERROR", type(e).__name__, str(e)[:200], flush=True)
        c.close()
print("END", flush=True)
'''


def test_damaging_each_checkpoint_file_restores_quietly(tmp_path):
    """Each file of the newest step, cut in half or overwritten in its middle: the restore gives
    that step intact or falls back to the older one, exactly, and nothing orbax started behind
    it (tensorstore callbacks into a closed event loop, orphaned coroutines) prints a traceback."""
    script = tmp_path / "damage.py"
    script.write_text(_DAMAGE_SCRIPT.replace("import jax.numpy", "import jax\nimport jax.numpy"))
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0 and "END" in r.stdout, r.stderr[-3000:]
    cases = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("CASE")]
    assert len(cases) >= 20, r.stdout  # ~12 files x 2 damages
    for case in cases:
        assert case[3] == "step" and case[4] == case[5] and case[6] == "True", case
    assert sum(c[4] == "1" for c in cases) >= 8  # the data files' damage is caught: fallback
    at = r.stderr.find("Traceback")
    assert at < 0 and "Event loop is closed" not in r.stderr, r.stderr[max(0, at - 300):at + 3000]
    assert "Exception ignored" not in r.stderr, r.stderr[-3000:]


# ------------------------------------------------------------------ directory modes (issue 34 §4)
def test_built_directories_honour_the_umask_like_files(tmp_path):
    """Under umask 022 every directory a build creates is 0755 and every file 0644 (mkdtemp
    alone gives 0700): the passage store, a BM25 index, an export_hf directory (also when
    replaced with --overwrite), and ``files.make_dir``. No module calls ``tempfile.mkdtemp``
    but ``files``."""
    from helpers import tiny_run

    from dense_cf.index.bm25 import BM25Index
    from dense_cf.index.passage_store import open_store
    from dense_cf.retrieval import model_export
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("id\ttext\ttitle\n" + "".join(f"{i}\tpassage {i} word{i}\tT{i}\n" for i in range(1, 30)))
    old = os.umask(0o022)
    try:
        open_store(str(corpus), str(tmp_path / "out" / "store"))
        BM25Index.build([(str(i), f"passage {i}", f"T{i}") for i in range(30)], str(tmp_path / "out" / "bm25"),
                        k1=0.9, b=0.4)
        run = tiny_run()
        model_export.write_export(run, str(tmp_path / "out" / "hf"))
        model_export.write_export(run, str(tmp_path / "out" / "hf"), overwrite=True)
        made = files.make_dir("x-", str(tmp_path / "out"))
    finally:
        os.umask(old)
    modes = {}
    for root, dirs, names in os.walk(tmp_path / "out"):
        for n in dirs + names:
            p = os.path.join(root, n)
            modes[os.path.relpath(p, tmp_path / "out")] = (os.path.isdir(p), os.stat(p).st_mode & 0o777)
    assert {k for k in modes if "/" not in k} == {"store", "bm25", "hf", os.path.basename(made)}
    bad = {k: oct(m) for k, (d, m) in modes.items() if m != (0o755 if d else 0o644)}
    assert not bad, bad
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    users = subprocess.run(["grep", "-rln", "tempfile.mkdtemp", os.path.join(root, "dense_cf")],
                           capture_output=True, text=True).stdout.split()
    assert [os.path.relpath(u, root) for u in users] == ["dense_cf/files.py"]


def test_tasks_orbax_left_behind_are_not_reported_twice(tmp_path, caplog):
    """asyncio's "Task exception was never retrieved" for a read orbax started beside the one
    that failed (restore already warned about that step) is dropped; any other task's is kept."""
    Checkpointer(str(tmp_path / "c"), async_save=False)      # installs the filters
    errors = {}
    for where in ("/site-packages/orbax/checkpoint/fake.py", "/site-packages/other/fake.py"):
        try:
            exec(compile("raise ValueError('DATA_LOSS')", where, "exec"))
        except ValueError:
            errors[where] = sys.exc_info()
    log = logging.getLogger("asyncio")
    with caplog.at_level(logging.ERROR):
        for where, info in errors.items():
            log.error("Task exception was never retrieved: %s", where, exc_info=info)
    assert [r.getMessage() for r in caplog.records] == [
        "Task exception was never retrieved: /site-packages/other/fake.py"]
