"""``python -m dense_cf.export_hf``: see :mod:`dense_cf.cli.export_hf`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("dense_cf.cli.export_hf", run_name="__main__", alter_sys=True)
