"""Command-line binaries (absl): ``python -m dense_cf.cli.<name>``."""
