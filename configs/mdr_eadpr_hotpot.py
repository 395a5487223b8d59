"""MDR + EADPR on HotpotQA (EADPR §4.3 Table 4 "MDR+EADPR"; docs/multihop.md).

``configs/mdr_hotpot.py`` with EADPR's loss on each hop (λ = τ1 = τ2 = 1.0, EADPR App. C): the
counterfactual of a supporting passage drops its supporting sentence(s), which HotpotQA marks.
"""

from dense_cf.configs.presets import mdr_hotpot_config


def get_config():
    return mdr_hotpot_config("mdr-eadpr")
