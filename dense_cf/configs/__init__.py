"""dense_cf.configs."""
