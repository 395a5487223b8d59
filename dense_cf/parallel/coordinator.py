"""The coordination service in a process of its own, so that losing process 0 is like losing
any other process (docs/reliability.md, "A lost host").

``jax.distributed.initialize`` runs jax's coordination service inside process 0. When that
process dies, every other process's coordination client loses the service at once and aborts
from a C++ thread (jaxlib 0.10: ``LOG(FATAL)``, SIGABRT), so no Python runs and the survivors
cannot say which process was lost. With the service in this small side process ("sidecar"),
started by process 0 before it initialises, process 0 is an ordinary client: when it dies, the
others' next collective fails ("Connection reset by peer") and :func:`dense_cf.main` prints its
one line, as for any other process.

The side process is the binary ``dense_cf.cli.coordinator``; it runs :func:`serve`.

Lifetime: the sidecar reads its stdin, a pipe whose write end only process 0 holds.
- Process 0 exits normally: after jax's shutdown barrier it writes ``stop``; the sidecar exits.
- Process 0 dies (kill -9, ``os._exit``, preemption): the pipe reaches EOF; the sidecar keeps
  the service up ``linger_s`` more seconds, so the survivors' failing collectives (not a lost
  service) tell them first, then exits. A restart's new sidecar waits for the port meanwhile.

It ignores SIGINT and SIGTERM: a scheduler's SIGTERM reaches every process of a job step, and
the service must outlive process 0's save of the step in flight (train/preemption.py).

Uses jax's private ``_jax.get_distributed_runtime_service`` (the call ``jax.distributed``
itself makes; jax 0.10 has no public service-only call). Where it is missing,
:func:`service_available` says so and process 0 keeps the service in-process, as jax does.
"""

from __future__ import annotations

import atexit
import os
import select
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable

try:
    from jax._src.lib import _jax
except ImportError:  # a jaxlib without it: the service stays in process 0 (service_available)
    _jax = None

READY = "ready"
STOP = "stop"
# Seconds the service stays up after process 0 is gone: the survivors' collectives fail within
# milliseconds on gloo; this only has to outlast their error handling (asking the service which
# process is gone takes up to 2 s, distributed._dead_processes).
LINGER_S = 10.0
# How long process 0 waits for the port, e.g. while a killed run's sidecar still lingers.
START_TIMEOUT_S = LINGER_S + 50.0


def service_available() -> bool:
    """Whether this jaxlib has the private service-only call the sidecar needs."""
    return hasattr(_jax, "get_distributed_runtime_service")


def bind_address(coordinator_address: str) -> str:
    """The sidecar's bind address: every interface, the coordinator's port (jax's default)."""
    return "[::]:" + coordinator_address.rsplit(":", 1)[1]


def unused_local_address() -> str:
    """A free localhost port for process 0's own (unused) in-process service: jax always starts
    one in process 0, so it is bound where no client looks."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def serve(bind: str, num_processes: int, heartbeat_timeout_s: int, shutdown_timeout_s: int,
          linger_s: float) -> str:
    """Runs the service until ``stop`` on stdin (returns ``"stop"``) or EOF plus ``linger_s``
    seconds (returns ``"eof"``); the side process's body (``dense_cf.cli.coordinator``)."""
    service = _jax.get_distributed_runtime_service(
        bind, num_processes, heartbeat_timeout=int(heartbeat_timeout_s),
        shutdown_timeout=int(shutdown_timeout_s))
    sys.stdout.write(f"{READY} {bind} pid={os.getpid()}\n")
    sys.stdout.flush()
    line = sys.stdin.readline()
    why = STOP if line.strip() == STOP else "eof"
    if why == "eof":
        time.sleep(linger_s)
    service.shutdown()
    return why


class Sidecar:
    """Process 0's handle on the side process (:func:`start`)."""

    def __init__(self, proc: subprocess.Popen, bind: str) -> None:
        self.proc, self.bind = proc, bind

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout_s: float = 10.0) -> None:
        """Asks the service to end (after jax's shutdown barrier) and waits for it."""
        if self.proc.poll() is not None:
            return
        try:
            self.proc.stdin.write(STOP + "\n")
            self.proc.stdin.flush()
            self.proc.stdin.close()
        except (BrokenPipeError, ValueError):
            pass
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def port_in_use(port: int) -> bool:
    """Whether something on this host accepts connections on ``port``. gRPC binds with
    SO_REUSEPORT, so a second service on a port still served (a killed run's lingering sidecar)
    would start, and clients would reach either: never start one there."""
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _read_line(stream: Any, timeout_s: float) -> str | None:
    ready, _, _ = select.select([stream], [], [], timeout_s)
    return stream.readline() if ready else None


def start(coordinator_address: str, num_processes: int, heartbeat_timeout_s: int,
          shutdown_timeout_s: int, linger_s: float = LINGER_S,
          timeout_s: float = START_TIMEOUT_S, python: str = sys.executable,
          clock: Callable[[], float] = time.monotonic) -> Sidecar:
    """Starts the sidecar on ``coordinator_address``'s port and waits until it serves. While
    the port is served (a killed run's sidecar lingering) it waits, for ``timeout_s`` seconds in
    all; RuntimeError names the port, or gives the sidecar's last words."""
    bind = bind_address(coordinator_address)
    cmd = [python, "-m", "dense_cf.cli.coordinator", f"--bind={bind}",
           f"--num_processes={num_processes}", f"--heartbeat_timeout_s={heartbeat_timeout_s}",
           f"--shutdown_timeout_s={shutdown_timeout_s}", f"--linger_s={linger_s}"]
    port = int(bind.rsplit(":", 1)[1])
    deadline = clock() + timeout_s
    while port_in_use(port):
        if clock() >= deadline:
            raise RuntimeError(f"the coordination service cannot start on {bind}: port {port} "
                               f"is still served after {timeout_s:.0f} s (a previous run's "
                               f"coordination service, or another program)")
        time.sleep(0.5)
    while True:
        # Own session: a terminal's Ctrl-C or a group signal must not end the service before
        # process 0 has saved; stdin is the lifeline (module docstring).
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        line = _read_line(proc.stdout, max(1.0, deadline - clock()))
        if line and line.startswith(READY):
            threading.Thread(target=_drain, args=(proc.stderr,), daemon=True).start()
            return Sidecar(proc, bind)
        proc.kill()
        _, err = proc.communicate()
        last = ((err or "").strip().splitlines() or ["(no output)"])[-1]
        if clock() >= deadline:
            raise RuntimeError(f"the coordination service did not start on {bind} within "
                               f"{timeout_s:.0f} s: {last}")
        time.sleep(0.5)


def _drain(stream: Any) -> None:
    """Reads the sidecar's log so that a full pipe never blocks it."""
    for _ in iter(stream.readline, ""):
        pass


def stop_at_exit(sidecar: Sidecar, shutdown: Callable[[], None]) -> None:
    """At a normal exit: jax's shutdown barrier first (every client done), then the service.
    Registered after jax's own exit hook, so it runs before it; ``shutdown`` is idempotent."""
    def stop() -> None:
        try:
            shutdown()
        finally:
            sidecar.stop()
    atexit.register(stop)
