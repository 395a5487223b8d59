"""The coordination service's side process (dense_cf/parallel/coordinator.py): it serves on the
coordinator's port, ends on ``stop``, outlives a dead process 0 by ``linger_s`` only, and a
second one waits for a port still held, then says which port. The two-process behaviour (losing
process 0 gives our one line) is tests/test_multihost.py's coordinator test."""

import time

import pytest
from helpers import free_port

from dense_cf.parallel import coordinator, distributed

pytestmark = pytest.mark.skipif(not coordinator.service_available(),
                                reason="this jaxlib has no service-only call")


def _wait_exit(proc, timeout_s: float) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            return time.monotonic() - t0
        time.sleep(0.1)
    return None


def test_sidecar_serves_on_the_coordinator_port_and_ends_on_stop():
    port = free_port()
    car = coordinator.start(f"127.0.0.1:{port}", 2, heartbeat_timeout_s=10, shutdown_timeout_s=10)
    try:
        assert car.bind == f"[::]:{port}" and car.proc.poll() is None
        assert coordinator.port_in_use(port)
    finally:
        car.stop()
    assert car.proc.returncode == 0, car.proc.stderr
    assert not coordinator.port_in_use(port)


def test_a_dead_process_0_leaves_the_service_up_for_linger_s_then_it_ends():
    """EOF on the lifeline (process 0 killed) is not ``stop``: the service stays ``linger_s``
    so that the survivors' collectives fail first, then goes."""
    port = free_port()
    car = coordinator.start(f"127.0.0.1:{port}", 2, heartbeat_timeout_s=10, shutdown_timeout_s=10,
                            linger_s=2.0)
    car.proc.stdin.close()  # what the kernel does when process 0 dies
    t0 = time.monotonic()
    time.sleep(1.0)
    assert car.proc.poll() is None and coordinator.port_in_use(port)
    took = _wait_exit(car.proc, 30)
    assert took is not None, "the sidecar outlived its linger time"
    assert time.monotonic() - t0 >= 2.0 and car.proc.returncode == 0


def test_a_served_port_is_waited_for_then_named():
    """gRPC binds with SO_REUSEPORT: a second service on a served port would start, and clients
    would reach either. A second start waits instead: it names the port when the first stays,
    and starts once a dead run's lingering service has gone."""
    port = free_port()
    addr = f"127.0.0.1:{port}"
    first = coordinator.start(addr, 2, heartbeat_timeout_s=10, shutdown_timeout_s=10, linger_s=2.0)
    try:
        with pytest.raises(RuntimeError, match=rf"cannot start on \[::\]:{port}: port {port} is "
                                               r"still served after 3 s"):
            coordinator.start(addr, 2, heartbeat_timeout_s=10, shutdown_timeout_s=10, timeout_s=3)
        first.proc.stdin.close()  # process 0 of the first run killed: its service lingers 2 s
        second = coordinator.start(addr, 2, heartbeat_timeout_s=10, shutdown_timeout_s=10)
        assert first.proc.poll() == 0  # gone before the second one served
    finally:
        first.stop()
    assert second.proc.poll() is None and coordinator.port_in_use(port)
    second.stop()
    assert second.proc.returncode == 0


def test_an_unknown_coordinator_service_is_refused():
    with pytest.raises(ValueError, match="--coordinator_service='elsewhere'; expected one of "
                                         "sidecar, in_process"):
        distributed.initialize("none", coordinator_service="elsewhere")
