"""Start-up planning of multi-host runs from fake environments (no jax.distributed calls)."""

import pytest

from dense_cf.parallel import distributed as dist


@pytest.mark.parametrize("hostlist, hosts", [
    ("node01", ["node01"]),
    ("node01,host2", ["node01", "host2"]),
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("gpu[8-11],cpu-a[1,3]", ["gpu8", "gpu9", "gpu10", "gpu11", "cpu-a1", "cpu-a3"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("a1.cluster.org,b[2-3].cluster.org", ["a1.cluster.org", "b2.cluster.org", "b3.cluster.org"]),
])
def test_expand_hostlist(hostlist, hosts):
    assert dist.expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("bad", ["node[01-03", "node01-03]", "node[a-b]", "node[5-2]", ""])
def test_expand_hostlist_rejects_malformed(bad):
    with pytest.raises(ValueError, match="hostlist"):
        dist.expand_hostlist(bad)


def _slurm(**over):
    env = {"SLURM_JOB_ID": "123456", "SLURM_STEP_ID": "0", "SLURM_PROCID": "5",
           "SLURM_LOCALID": "1", "SLURM_NTASKS": "8", "SLURM_STEP_NODELIST": "gpu[07-08]",
           "SLURM_JOB_NODELIST": "gpu[07-08],gpu10", "SLURM_STEP_TASKS_PER_NODE": "4(x2)"}
    env.update(over)
    return {k: v for k, v in env.items() if v is not None}


def test_slurm_one_task_per_gpu():
    kw = dist.slurm_kwargs(_slurm())
    # jax's own port rule (job id mod 4096 in the top 4096 ports): every task agrees unprompted.
    assert kw == {"coordinator_address": f"gpu07:{123456 % 4096 + 61440}", "num_processes": 8,
                  "process_id": 5, "local_device_ids": [1]}


def test_slurm_gpu_already_bound_to_the_task():
    # --gpus-per-task=1: the task sees exactly its GPU (as device 0), so no local_device_ids.
    kw = dist.slurm_kwargs(_slurm(CUDA_VISIBLE_DEVICES="3"))
    assert kw["local_device_ids"] is None


def test_slurm_one_task_per_node_drives_all_gpus():
    kw = dist.slurm_kwargs(_slurm(SLURM_NTASKS="2", SLURM_PROCID="1",
                                  SLURM_STEP_TASKS_PER_NODE="1(x2)"))
    assert kw["num_processes"] == 2 and kw["process_id"] == 1 and kw["local_device_ids"] is None


def test_slurm_port_and_nodelist_fallbacks():
    env = _slurm(SLURM_STEP_NODELIST=None, DENSE_CF_COORDINATOR_PORT="29500",
                 SLURM_STEP_TASKS_PER_NODE=None, SLURM_TASKS_PER_NODE="1(x3)")
    kw = dist.slurm_kwargs(env)
    assert kw["coordinator_address"] == "gpu07:29500"   # first host of the JOB nodelist
    assert dist.coordinator_port({"JAX_COORDINATOR_PORT": "1234"}) == 1234


def test_slurm_errors_name_the_variable():
    with pytest.raises(ValueError, match="SLURM_PROCID"):
        dist.slurm_kwargs(_slurm(SLURM_PROCID=None))
    with pytest.raises(ValueError, match="NODELIST"):
        dist.slurm_kwargs(_slurm(SLURM_STEP_NODELIST=None, SLURM_JOB_NODELIST=None))
    with pytest.raises(ValueError, match=r"SLURM_PROCID=9 outside \[0, 8\)"):
        dist.slurm_kwargs(_slurm(SLURM_PROCID="9"))


def _no_tpu():
    return False


def test_auto_mode_choices():
    # Nothing detected: single process, jax.distributed untouched.
    p = dist.plan("auto", env={}, has_tpu=_no_tpu)
    assert p.mode == "none" and not p.distributed
    # A coordinator address means explicit.
    p = dist.plan("auto", coordinator_address="10.0.0.1:1234", num_processes=2, process_id=1,
                  env=_slurm(), has_tpu=_no_tpu)
    assert p.mode == "explicit" and p.kwargs["coordinator_address"] == "10.0.0.1:1234"
    # Inside a multi-task srun step: SLURM.
    p = dist.plan("auto", env=_slurm(), has_tpu=lambda: True)
    assert p.mode == "slurm" and p.kwargs["process_id"] == 5 and "auto" in p.reason
    # The sbatch batch shell (no step nodelist) or a 1-task step: not distributed.
    assert dist.plan("auto", env=_slurm(SLURM_STEP_NODELIST=None), has_tpu=_no_tpu).mode == "none"
    assert dist.plan("auto", env=_slurm(SLURM_NTASKS="1"), has_tpu=_no_tpu).mode == "none"
    # TPU chips attached: jax's TPU cluster detection fills every argument.
    p = dist.plan("auto", env={}, has_tpu=lambda: True)
    assert p.mode == "tpu" and p.kwargs == {}


def test_explicit_mode_validation():
    p = dist.plan("explicit", coordinator_address="host-0.internal:8476", num_processes=4,
                  process_id=3, local_device_ids=[0, 1], env={})
    assert p.kwargs == {"coordinator_address": "host-0.internal:8476", "num_processes": 4,
                        "process_id": 3, "local_device_ids": [0, 1]}
    with pytest.raises(ValueError, match="--num_processes, --process_id"):
        dist.plan("explicit", coordinator_address="h:1", env={})
    with pytest.raises(ValueError, match="HOST:PORT"):
        dist.plan("explicit", coordinator_address="h", num_processes=2, process_id=0, env={})
    with pytest.raises(ValueError, match="outside"):
        dist.plan("explicit", coordinator_address="h:1", num_processes=2, process_id=2, env={})


def test_overrides_win_over_detection_and_none_rejects_them():
    p = dist.plan("slurm", coordinator_address="login1:4000", env=_slurm())
    assert p.kwargs["coordinator_address"] == "login1:4000" and p.kwargs["num_processes"] == 8
    p = dist.plan("tpu", process_id=0, env={})
    assert p.kwargs == {"process_id": 0}
    with pytest.raises(ValueError, match="contradicts"):
        dist.plan("none", num_processes=2, env={})
    with pytest.raises(ValueError, match="expected one of"):
        dist.plan("mpi", env={})


def test_initialize_none_does_not_touch_jax_distributed():
    import jax
    p = dist.initialize("none")
    assert p.mode == "none" and not jax.distributed.is_initialized()


def test_mesh_rows_must_stay_on_one_host():
    """Every data index on one host: otherwise hosts would need each other's batch rows."""
    from types import SimpleNamespace as NS

    import numpy as np

    from dense_cf.parallel.mesh import check_hosts_own_data_shards

    def mesh(procs):  # procs: [data][model] process index of each device
        devs = np.array([[NS(process_index=p) for p in row] for row in procs], dtype=object)
        return NS(devices=devs, shape={"data": devs.shape[0], "model": devs.shape[1]})

    check_hosts_own_data_shards(mesh([[0, 0], [1, 1]]))        # model inside a host: fine
    with pytest.raises(ValueError, match=r"spans hosts \[0, 1\] \(data index 0\)"):
        check_hosts_own_data_shards(mesh([[0, 1], [0, 1]]))
