"""Test set-up: 8 simulated CPU devices (sharding tests), quiet TF, no network."""

import os

# Must happen before jax is imported anywhere: sharded tests need 8 devices on the CPU.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

try:  # TF is only needed by the data tests; the TF-free core's tests run without it (GPU hosts).
    import tensorflow as tf  # noqa: E402
except ImportError:
    tf = None

# Identical programs compiled by several tests (e.g. three train() runs of one config) are
# compiled once: XLA's persistent cache, keyed by the HLO fingerprint.
_CACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".jax_cache")
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)

# tf.data runs beside JAX on the same 2 cores; keep its pools small.
if tf is not None:
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
