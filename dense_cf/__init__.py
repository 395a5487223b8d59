"""dense_cf: answer-aware dense passage retrieval in JAX/Flax."""

__version__ = "0.1.0"
