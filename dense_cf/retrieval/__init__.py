"""dense_cf.retrieval."""
