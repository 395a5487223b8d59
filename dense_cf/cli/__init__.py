"""Command-line entry points (``python -m dense_cf.cli.X``): flags only; nothing imports cli/."""
