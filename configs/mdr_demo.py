"""MDR on the synthetic two-hop world with all-MiniLM-L6-v2, sized for 2 CPU cores (docs/multihop.md).

``--config=configs/mdr_demo.py`` (MDR + EADPR) or ``configs/mdr_demo.py:mdr`` (MDR + DPR). The
world (3,000 questions, 6,000 passages) is generated into data_dir on first use; training ends
with the two-hop evaluation. The settings live in ``dense_cf.configs.presets.mdr_demo_config``,
which ``python -m dense_cf.studies.multihop`` uses too.
"""

from dense_cf.configs.presets import mdr_demo_config


def get_config(method: str = "mdr-eadpr"):
    return mdr_demo_config(method)
