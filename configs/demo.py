"""The embedded default: the synthetic QA benchmark + all-MiniLM-L6-v2 (~10 min on 2 CPU cores).

``--config=configs/demo.py`` (PiCL) or ``configs/demo.py:dpr`` (also ``eadpr``, ``dcsr``). The
benchmark is generated into data_dir on first use. The settings live in
``dense_cf.configs.presets.demo_config``, which the demo binary uses too.
"""

from dense_cf.configs.presets import demo_config


def get_config(method: str = "picl"):
    return demo_config(method)
