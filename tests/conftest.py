"""Test set-up: 8 simulated CPU devices (sharding tests), quiet TF, no network."""

import os

# Must happen before jax is imported anywhere: sharded tests need 8 devices on the CPU.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import tensorflow as tf  # noqa: E402

# tf.data runs beside JAX on the same 2 cores; keep its pools small.
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)
