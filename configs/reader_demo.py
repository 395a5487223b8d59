"""The demo's small extractive reader (docs/readers.md, "Demo"): MiniLM's first 3 layers.

``python -m dense_cf.demo`` trains it on its DPR run's results; by hand, after the demo:

    python -m dense_cf.main --config=configs/reader_demo.py --workdir=runs/demo/reader

The settings live in ``dense_cf.configs.presets.reader_demo_config``.
"""

from dense_cf.configs.presets import reader_demo_config


def get_config():
    return reader_demo_config()
