"""dense_cf.synthetic."""
