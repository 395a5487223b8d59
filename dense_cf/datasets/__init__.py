"""dense_cf.datasets."""
