"""dense_cf.mining."""
