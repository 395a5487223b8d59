"""MDR + DPR on HotpotQA (EADPR §4.3 Table 4 "MDR+DPR"; docs/multihop.md).

BERT-base shared encoder, batch 120, question / passage / hop-2 lengths 70 / 300 / 350, lr 2e-5,
2 distractor paragraphs as hard negatives, 50 epochs; evaluation: 20 beams, top 20 chains over
the full-wiki abstracts. Get the files with ``python -m dense_cf.cli.prepare_hotpot
--data_dir data/hotpot --corpus`` (docs/datasets.md). The settings live in
``dense_cf.configs.presets.mdr_hotpot_config``.
"""

from dense_cf.configs.presets import mdr_hotpot_config


def get_config():
    return mdr_hotpot_config("mdr")
