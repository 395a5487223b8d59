"""Multi-host start-up: which ``jax.distributed.initialize`` call this process makes, and why.

Modes (``--distributed=``):

* ``none``     single process; ``jax.distributed`` is not initialised.
* ``explicit`` ``coordinator_address``/``num_processes``/``process_id`` given by the user (any
  cluster, and the 2-process CPU test). All three are required.
* ``slurm``    computed here from ``SLURM_*`` variables (below), not by jax's own Slurm detection:
  jax reads only ``SLURM_STEP_NODELIST`` and always pins one device per task
  (``local_device_ids=[SLURM_LOCALID]``), which is wrong for the one-task-per-node layout.
* ``tpu``      Cloud TPU VM / GKE TPU pods: ``jax.distributed.initialize()`` with no arguments, so
  jax's TPU cluster detection (GCE metadata server, ``TPU_WORKER_HOSTNAMES``) supplies
  everything; it is the authoritative source of the worker topology.
* ``auto``     ``explicit`` if a coordinator address is given, else ``slurm`` inside a SLURM step
  with more than one task, else ``tpu`` when TPU chips are attached, else ``none``.

SLURM layout: ``num_processes = SLURM_NTASKS``, ``process_id = SLURM_PROCID``, the coordinator is
the first host of ``SLURM_STEP_NODELIST`` (or ``SLURM_JOB_NODELIST``) on port
``DENSE_CF_COORDINATOR_PORT`` / ``JAX_COORDINATOR_PORT`` or, by default, the same job-id-derived
port jax uses (every task computes the same value without talking). With several tasks per node
each task drives one GPU: ``local_device_ids=[SLURM_LOCALID]``, unless SLURM already bound a
single GPU to the task (``CUDA_VISIBLE_DEVICES`` lists one device, e.g. ``--gpus-per-task=1``).
With one task per node the process drives every local GPU.

The planning functions are pure (environment passed in as a dict) so they are unit-tested with
fake environments; :func:`initialize` is the only side effect.

A lost peer (a host killed, preempted or cut off): on the CPU (gloo) the survivors' next
collective fails at once with "Connection closed/reset by peer"; on GPUs (NCCL) a collective can
wait for ever, and the bound is the coordination service's heartbeat: a process that sends none
for ``heartbeat_timeout_s`` (``--heartbeat_timeout_s``, default :data:`HEARTBEAT_TIMEOUT_S`) is
declared dead and every other process is terminated. :func:`lost_peer_message` turns the first
kind into one line naming the lost process (docs/reliability.md, "A lost host"). Process 0 is no
exception: in explicit and SLURM modes the coordination service runs in a side process of its
own (:mod:`dense_cf.parallel.coordinator`), so losing process 0 fails a collective too.

CPU multi-process collectives use gloo (``jax_cpu_collectives_implementation``; the jax 0.10
default, set explicitly here so an older default cannot silently break cross-process psums).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import threading
from typing import Any, Callable, Mapping, Sequence

import jax
from absl import logging
from jax._src import distributed as jax_distributed
from jax._src import hardware_utils

from dense_cf.parallel import coordinator

MODES = ("auto", "none", "tpu", "slurm", "explicit")
# Seconds without a heartbeat after which the coordination service declares a process dead and
# stops the others (jax's default is 100): the bound on how long a survivor can hang in a
# collective with a lost peer where the collective itself never fails (NCCL).
HEARTBEAT_TIMEOUT_S = 60
PORT_ENV_VARS = ("DENSE_CF_COORDINATOR_PORT", "JAX_COORDINATOR_PORT")
# Where the coordination service runs (--coordinator_service): a side process started by
# process 0 (parallel/coordinator.py: losing process 0 is then like losing any other), or
# inside process 0 as jax does it.
COORDINATOR_SERVICES = ("sidecar", "in_process")
JAX_SHUTDOWN_TIMEOUT_S = 300  # jax.distributed.initialize's default


@dataclasses.dataclass(frozen=True)
class InitPlan:
    """The resolved start-up: ``kwargs`` for ``jax.distributed.initialize`` (None = don't call)."""

    mode: str
    kwargs: dict[str, Any] | None
    reason: str

    @property
    def distributed(self) -> bool:
        return self.kwargs is not None


# ------------------------------------------------------------------------ SLURM hostlists

def _split_top_level(s: str) -> list[str]:
    """Splits on commas outside brackets: ``a[1,2],b`` -> ``["a[1,2]", "b"]``."""
    out, depth, cur = [], 0, []
    for ch in s:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in SLURM hostlist {s!r}")
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ValueError(f"unbalanced '[' in SLURM hostlist {s!r}")
    out.append("".join(cur))
    return [x for x in (t.strip() for t in out) if x]


def _expand_range_set(body: str, hostlist: str) -> list[str]:
    """``01-03,07`` -> ``["01", "02", "03", "07"]`` (zero padding kept, as SLURM does)."""
    vals = []
    for part in body.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ValueError(f"bad range {part!r} in SLURM hostlist {hostlist!r}")
        lo, hi = m.group(1), m.group(2)
        if hi is None:
            vals.append(lo)
            continue
        if int(hi) < int(lo):
            raise ValueError(f"descending range {part!r} in SLURM hostlist {hostlist!r}")
        width = len(lo) if lo.startswith("0") else 0
        vals.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
    return vals


def expand_hostlist(hostlist: str) -> list[str]:
    """Expands a SLURM hostlist (``node[01-03,07],gpu-a[1-2]-ib``) into host names, in order.

    Several bracket groups in one name expand as a product (``r[1-2]n[1-2]`` -> r1n1 r1n2 r2n1
    r2n2), like ``scontrol show hostnames``.
    """
    hosts = []
    for term in _split_top_level(hostlist):
        pieces = re.split(r"(\[[^\]]*\])", term)
        choices = [_expand_range_set(p[1:-1], hostlist) if p.startswith("[") else [p]
                   for p in pieces if p]
        hosts.extend("".join(combo) for combo in itertools.product(*choices))
    if not hosts:
        raise ValueError(f"empty SLURM hostlist {hostlist!r}")
    return hosts


def _tasks_on_first_node(tasks_per_node: str) -> int:
    """First count of a SLURM tasks-per-node spec such as ``4(x2),3`` or ``2``."""
    m = re.match(r"\s*(\d+)", tasks_per_node)
    if not m:
        raise ValueError(f"bad SLURM tasks-per-node value {tasks_per_node!r}")
    return int(m.group(1))


def _int_env(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except KeyError:
        raise ValueError(f"--distributed=slurm: environment variable {name} is not set; run the "
                         f"command through `srun` inside an allocation") from None
    except ValueError:
        raise ValueError(f"--distributed=slurm: {name}={env[name]!r} is not an integer") from None


def coordinator_port(env: Mapping[str, str]) -> int:
    """An explicit port variable, else jax's job-id-derived port in [61440, 65535]."""
    for name in PORT_ENV_VARS:
        if env.get(name):
            return int(env[name])
    job = _int_env(env, "SLURM_JOB_ID")
    return job % 2 ** 12 + (65535 - 2 ** 12 + 1)


def slurm_kwargs(env: Mapping[str, str]) -> dict[str, Any]:
    """``jax.distributed.initialize`` kwargs of this SLURM task (see module docstring)."""
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise ValueError("--distributed=slurm: neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST "
                         "is set; run the command through `srun` inside an allocation")
    first = expand_hostlist(nodelist)[0]
    num = _slurm_ntasks(env)
    pid = _int_env(env, "SLURM_PROCID")
    if not 0 <= pid < num:
        raise ValueError(f"--distributed=slurm: SLURM_PROCID={pid} outside [0, {num})")
    kwargs: dict[str, Any] = {"coordinator_address": f"{first}:{coordinator_port(env)}",
                              "num_processes": num, "process_id": pid, "local_device_ids": None}
    per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or "1"
    if _tasks_on_first_node(per_node) > 1:
        visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        if len(visible) != 1:  # SLURM did not bind one GPU per task: pick ours by local rank
            kwargs["local_device_ids"] = [_int_env(env, "SLURM_LOCALID")]
    return kwargs


# ------------------------------------------------------------------------ planning

def _slurm_ntasks(env: Mapping[str, str]) -> int:
    name = "SLURM_STEP_NUM_TASKS" if env.get("SLURM_STEP_NUM_TASKS") else "SLURM_NTASKS"
    return _int_env(env, name)


def in_slurm_step(env: Mapping[str, str]) -> bool:
    """Inside an ``srun`` step with more than one task (``SLURM_STEP_NODELIST`` is set only in
    steps, as jax's own detection assumes; the ``sbatch`` batch shell itself has no peers)."""
    if not all(env.get(k) for k in ("SLURM_JOB_ID", "SLURM_PROCID", "SLURM_STEP_NODELIST")):
        return False
    try:
        return _slurm_ntasks(env) > 1
    except ValueError:
        return False


def tpu_chips_present() -> bool:
    """True if TPU chips are attached (PCI scan by jax; no backend initialisation)."""
    try:
        chips, _ = hardware_utils.num_available_tpu_chips_and_device_id()
        return chips > 0
    except Exception:  # noqa: BLE001 - private API; absent/changed means "no TPU detected"
        return False


def plan(mode: str = "auto", *, coordinator_address: str | None = None,
         num_processes: int | None = None, process_id: int | None = None,
         local_device_ids: Sequence[int] | None = None, env: Mapping[str, str] | None = None,
         has_tpu: Callable[[], bool] = tpu_chips_present) -> InitPlan:
    """Resolves ``mode`` to the initialisation this process performs (pure given its inputs).

    Explicit arguments override what SLURM/TPU detection would choose.
    """
    if mode not in MODES:
        raise ValueError(f"--distributed={mode!r}; expected one of {', '.join(MODES)}")
    env = os.environ if env is None else env
    overrides = {"coordinator_address": coordinator_address, "num_processes": num_processes,
                 "process_id": process_id,
                 "local_device_ids": list(local_device_ids) if local_device_ids is not None else None}
    given = {k: v for k, v in overrides.items() if v is not None}

    if mode == "auto":
        if coordinator_address:
            mode, why = "explicit", "--coordinator_address given"
        elif in_slurm_step(env):
            mode, why = "slurm", f"SLURM step with {_slurm_ntasks(env)} tasks"
        elif has_tpu():
            mode, why = "tpu", "TPU chips attached"
        else:
            return InitPlan("none", None, "auto: no coordinator, SLURM step or TPU detected")
        why = f"auto: {why}"
    else:
        why = f"--distributed={mode}"

    if mode == "none":
        if given:
            raise ValueError(f"--distributed=none contradicts {sorted(given)}; drop them or use "
                             f"--distributed=explicit")
        return InitPlan("none", None, why)
    if mode == "explicit":
        missing = [k for k in ("coordinator_address", "num_processes", "process_id")
                   if overrides[k] is None]
        if missing:
            raise ValueError(f"--distributed=explicit needs --{', --'.join(missing)}")
        if not re.fullmatch(r"\[?[\w.:-]+\]?:\d+", coordinator_address):
            raise ValueError(f"--coordinator_address={coordinator_address!r}: expected HOST:PORT")
        if not 0 <= process_id < num_processes:
            raise ValueError(f"--process_id={process_id} outside [0, {num_processes})")
        return InitPlan("explicit", {**overrides}, why)
    if mode == "slurm":
        return InitPlan("slurm", {**slurm_kwargs(env), **given}, why)
    # tpu: jax's cluster detection fills whatever was not given explicitly.
    return InitPlan("tpu", given, why)


def initialize(mode: str = "auto", coordinator_address: str | None = None,
               num_processes: int | None = None, process_id: int | None = None,
               local_device_ids: Sequence[int] | None = None, *,
               heartbeat_timeout_s: int = HEARTBEAT_TIMEOUT_S,
               shutdown_timeout_s: int | None = None,
               coordinator_service: str = "sidecar") -> InitPlan:
    """Plans (see :func:`plan`), logs the choice, and calls ``jax.distributed.initialize``
    with the heartbeat timeout (and the shutdown timeout when given; jax's default is 300 s).

    With ``coordinator_service="sidecar"`` (explicit and SLURM modes) process 0 first starts
    the coordination service in a side process (:mod:`dense_cf.parallel.coordinator`) and joins
    it as a client; TPU mode, and a jaxlib without the service-only call, keep jax's
    in-process service. Must run before anything touches devices.
    """
    if coordinator_service not in COORDINATOR_SERVICES:
        raise ValueError(f"--coordinator_service={coordinator_service!r}; expected one of "
                         f"{', '.join(COORDINATOR_SERVICES)}")
    p = plan(mode, coordinator_address=coordinator_address, num_processes=num_processes,
             process_id=process_id, local_device_ids=local_device_ids)
    if not p.distributed:
        logging.info("distributed: single process (%s)", p.reason)
        return p
    if jax.distributed.is_initialized():
        logging.info("distributed: already initialised; %s ignored", p.reason)
        return p
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    shown = {k: v for k, v in p.kwargs.items() if v is not None} or "auto-detected by jax"
    logging.info("distributed: mode=%s (%s), jax.distributed.initialize(%s)", p.mode, p.reason,
                 shown)
    timeouts = {"heartbeat_timeout_seconds": int(heartbeat_timeout_s)}
    if shutdown_timeout_s is not None:
        timeouts["shutdown_timeout_seconds"] = int(shutdown_timeout_s)
    kwargs, sidecar = dict(p.kwargs), None
    if (coordinator_service == "sidecar" and p.mode in ("explicit", "slurm")
            and kwargs.get("process_id") == 0):
        if coordinator.service_available():
            sidecar = coordinator.start(
                kwargs["coordinator_address"], kwargs["num_processes"], int(heartbeat_timeout_s),
                int(shutdown_timeout_s or JAX_SHUTDOWN_TIMEOUT_S))
            # jax still starts a service in process 0: bind it where no client looks.
            kwargs["coordinator_bind_address"] = coordinator.unused_local_address()
            logging.info("distributed: coordination service in side process %d on %s",
                         sidecar.pid, sidecar.bind)
        else:
            logging.warning("distributed: this jaxlib has no service-only call; the "
                            "coordination service runs inside process 0")
    try:
        jax.distributed.initialize(**kwargs, **timeouts)
    except BaseException:
        if sidecar is not None:
            sidecar.stop()
        raise
    if sidecar is not None:
        coordinator.stop_at_exit(sidecar, jax.distributed.shutdown)
    logging.info("distributed: process %d of %d, %d local / %d global devices",
                 jax.process_index(), jax.process_count(), jax.local_device_count(),
                 jax.device_count())
    return p


# ------------------------------------------------------------------------ a lost peer

# What a collective or the coordination service says when a peer process is gone.
_LOST_PEER = re.compile(r"Connection (?:closed|reset) by peer|Broken pipe|Socket closed|"
                        r"heartbeat|task .{0,80}(?:disconnected|died|failed)|"
                        r"UNAVAILABLE|DEADLINE_EXCEEDED|NCCL.{0,40}(?:remote|abort|timeout)",
                        re.IGNORECASE)


def _error_text(e: BaseException) -> str:
    texts, seen = [], 0
    while e is not None and seen < 8:
        texts.append(f"{type(e).__name__}: {e}")
        e, seen = e.__cause__ or e.__context__, seen + 1
    return "\n".join(texts)


def _dead_processes(timeout_s: float = 2.0) -> list[int] | None:
    """The process ids the coordination service no longer counts as live, or None when it
    cannot tell within ``timeout_s`` (asked on a thread: the service may itself be gone)."""
    client, n = jax_distributed.global_state.client, jax.process_count()
    if client is None:
        return None
    box: list[Any] = []

    def ask() -> None:
        try:
            box.append(client.get_live_nodes(list(range(n))))
        except Exception as e:  # noqa: BLE001 - the service is gone too: cannot tell
            box.append(e)

    t = threading.Thread(target=ask, daemon=True)
    t.start()
    t.join(timeout_s)
    if not box or not isinstance(box[0], dict):
        return None
    dead = sorted(set(range(n)) - set(box[0]))
    return dead or None


def lost_peer_message(e: BaseException, resume_hint: str = "") -> str | None:
    """One line for an error that says a peer process is gone (``None`` for any other error):
    which process was lost (asked of the coordination service; with two processes, the other
    one), the collective's own words, and ``resume_hint``."""
    text = _error_text(e)
    m = _LOST_PEER.search(text)
    if jax.process_count() < 2 or m is None:
        return None
    me, n = jax.process_index(), jax.process_count()
    dead = _dead_processes()
    if dead:
        who = f"lost process{'es' if len(dead) > 1 else ''} {', '.join(map(str, dead))} of {n}"
    elif n == 2:
        who = f"lost process {1 - me} of 2"
    else:
        who = f"lost a peer process of {n}"
    line = next((ln for ln in text.splitlines() if m.group(0) in ln), m.group(0)).strip()
    return (f"{who} ({line[:240]}); process {me} stops too, without waiting for it"
            + (f". {resume_hint}" if resume_hint else ""))
