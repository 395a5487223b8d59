"""dense_cf.parallel."""
