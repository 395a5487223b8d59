"""PiCL on NQ with DPR-mined hard negatives: PiCL Table 2's "DPR negatives" row (docs/method.md §10:
top-1/5/20/100 = 52.57 / 71.10 / 80.50 / 86.84), λ = 0.2, τ1 = τ2 = 1.0 (docs/method.md §3, §9).

The paper trains on DPR's released ``biencoder-nq-adv-hn-train.json.gz`` (negatives retrieved
by a trained DPR); to mine your own, in two stages (docs/mining.md has the full commands):

1. Train DPR (in-batch + BM25 hard negatives, docs/method.md §9)::

       python -m dense_cf.main --config configs/dpr_nq.py --workdir runs/dpr_nq

2. Mine model negatives for the training questions (one-shot, ANCE-style refresh; the corpus is
   encoded once into runs/dpr_nq/export/ and indexed; the run is resumable)::

       python -m dense_cf.cli.mine_model --workdir runs/dpr_nq \\
           --input data/dpr/biencoder-nq-train.json.gz --corpus data/dpr/psgs_w100.tsv.gz \\
           --output data/dpr/biencoder-nq-dprneg-train.json.gz --k 100 --num_negatives 30

3. Train PiCL on the mined file (this config)::

       python -m dense_cf.main --config configs/picl_nq_dprneg.py --workdir runs/picl_nq_dprneg

Using DPR's released file instead: ``--config.data.train_file=biencoder-nq-adv-hn-train.json.gz``.
As in DPR's adversarial training, each question samples ``num_hard`` of its first
``max_hard_stored`` hard negatives per step (docs/method.md §9).
"""

from dense_cf.configs.base import base_config
from dense_cf.configs.presets import with_method


def get_config():
    c = with_method(base_config(), "picl")
    c.data.counterfactual = "sentence"
    c.data.train_file = "biencoder-nq-dprneg-train.json.gz"
    return c
