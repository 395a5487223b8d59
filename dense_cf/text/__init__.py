"""dense_cf.text."""
