"""dense_cf.inputs."""
