"""``python -m dense_cf.export_hf``: an alias of :mod:`dense_cf.cli.export_hf`, whose ``main`` it
runs (imported, not re-run as a module)."""

from dense_cf import app
from dense_cf.cli import export_hf

if __name__ == "__main__":
    app.run(export_hf.main, export_hf.FLAGS, export_hf.__doc__)
