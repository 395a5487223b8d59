"""A CPU-sized Fusion-in-Decoder reader (docs/readers.md, "Fusion-in-Decoder"): T5-small, 4
passages of 128 pieces, batch 4, 300 steps, on the demo DPR run's results (after
``python -m dense_cf.demo``; the demo itself uses the extractive reader):

    python -m dense_cf.main --config=configs/fid_demo.py --workdir=runs/demo/fid \\
        --config.model.name_or_path=/models/t5-small
    python -m dense_cf.eval.e2e --retriever runs/demo/dpr --retriever runs/demo/picl \\
        --reader runs/demo/fid --k 1,4

The settings live in ``dense_cf.configs.presets.fid_demo_config``.
"""

from dense_cf.configs.presets import fid_demo_config


def get_config():
    return fid_demo_config()
