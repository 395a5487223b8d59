"""Device mesh, logical-axis rules and the shardings of params and batches.

The mesh has two axes: ``data`` (batch parallelism; in-batch negatives are gathered across it)
and ``model`` (parameter sharding: fsdp/tensor style, via the logical rules of
``models/bert.py``). Axes are built ``Auto`` on purpose: the model is written with logical
constraints for GSPMD, not with the Explicit-sharding type system ``jax.make_mesh`` defaults to.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import numpy as np
from flax import linen as nn
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from dense_cf.parallel import jit_cache

MESH_AXES = ("data", "model")


def make_mesh(data: int = -1, model: int = 1, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A ("data", "model") mesh; ``data=-1`` takes every device left after ``model``."""
    devices = list(devices if devices is not None else jax.devices())
    if data == -1:
        if len(devices) % model:
            raise ValueError(f"{len(devices)} devices are not divisible by model={model}")
        data = len(devices) // model
    if data * model > len(devices):
        raise ValueError(f"mesh data={data} x model={model} needs {data * model} devices, "
                         f"have {len(devices)}")
    if data * model < len(devices):
        if jax.process_count() > 1:
            raise ValueError(f"a multi-host mesh must use every device: data={data} x "
                             f"model={model} != {len(devices)}")
        devices = devices[:data * model]  # e.g. 4 of 8 local accelerators
    mesh = jax.make_mesh((data, model), MESH_AXES, axis_types=(AxisType.Auto, AxisType.Auto),
                         devices=devices)
    if jax.process_count() > 1:
        check_hosts_own_data_shards(mesh)
    return mesh


def check_hosts_own_data_shards(mesh: Mesh) -> None:
    """Each ``data`` index must live on ONE host: the input pipeline gives every host its own
    ``global_batch / hosts`` rows, so a ``model`` group spanning hosts would need rows twice."""
    for i, row in enumerate(np.asarray(mesh.devices).reshape(mesh.shape["data"], -1)):
        hosts = sorted({d.process_index for d in row})
        if len(hosts) > 1:
            raise ValueError(
                f"mesh.model={mesh.shape['model']} spans hosts {hosts} (data index {i}); use a "
                f"model axis that fits in one host's {jax.local_device_count()} devices")


def tree_shardings(boxed_tree: Any, mesh: Mesh, rules) -> Any:
    """NamedShardings for a (possibly abstract) tree carrying ``nn.LogicallyPartitioned`` boxes."""
    specs = nn.get_partition_spec(boxed_tree)
    return nn.logical_to_mesh_sharding(specs, mesh, rules)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Batch dimension split over ``data``, replicated over ``model``."""
    return NamedSharding(mesh, P("data"))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def global_batch(local: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """Assembles each host's slice of the global batch into global jax.Arrays (multi-host safe)."""
    sh = batch_sharding(mesh)
    return {k: jax.make_array_from_process_local_data(sh, v) for k, v in local.items()}


def cpu_call_tokens(config_value: Any) -> int:
    """The inference call cap in effect: ``config_value`` (``eval.cpu_call_tokens``: token slots
    per device in one encoder or reader call) on a CPU backend, 0 (no cap) on accelerators.
    XLA:CPU runs ~1,000-token inference calls 1.3-2x faster per token than 64- or 128-row
    batches, whose activations outgrow the caches (docs/scale.md "Inference calls on the
    CPU"); accelerators want large calls."""
    return max(0, int(config_value or 0)) if jax.default_backend() == "cpu" else 0


def call_rows(batch_size: int, length: int, multiple: int, call_tokens: int) -> int:
    """Rows of one inference call of rows padded to ``length``: ``batch_size``, or with a cap
    ``call_tokens`` > 0 (:func:`cpu_call_tokens`) at most ``call_tokens * multiple // length``
    rounded down to a multiple of ``multiple`` (the data shards), never fewer than ``multiple``."""
    if not call_tokens:
        return batch_size
    return max(multiple, min(batch_size, call_tokens * multiple // length // multiple * multiple))


def init_sharded(init: Any, rng: jax.Array, shardings: Any, host: bool | None = None) -> Any:
    """``init(rng)`` (a one-off random initialisation) placed in ``shardings``.

    ``host`` (default: when the default backend is not the CPU) runs it on the host CPU and
    copies each leaf's shards to its devices: XLA:GPU spends 55-92 s (H100) and ~80 s (H200)
    compiling the random init of two BERT-base towers, the host CPU ~12 s. Every process
    computes the same full values from the same key, so this also places them on multi-host
    meshes (each host copies only its own shards)."""
    try:
        cpu = jax.devices("cpu")[0]
    except RuntimeError:  # JAX_PLATFORMS without cpu
        cpu = None
    if host is None:
        host = jax.default_backend() != "cpu"
    if not host or cpu is None:
        fn = jit_cache.cached("init_sharded", (init, jit_cache.shardings_key(shardings)),
                              lambda: jax.jit(init, out_shardings=shardings))
        return fn(rng)
    # A 1x1 mesh on the CPU: the logical-axis constraints inside ``init`` then resolve there,
    # not against the accelerator mesh of the caller's context.
    with jax.set_mesh(make_mesh(1, 1, devices=[cpu])):
        fn = jit_cache.cached("init_host", (init,), lambda: jax.jit(init))
        values = jax.device_get(fn(jax.device_put(rng, cpu)))

    def place(x: np.ndarray, sharding: NamedSharding) -> jax.Array:
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree.map(place, values, shardings)
