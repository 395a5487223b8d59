"""Experiment configs: one file per experiment, loaded by path with --config=configs/NAME.py.

Also importable (``from configs import picl_nq``) from the repository root, for tests."""
