"""The configs the studies train (``dense_cf.studies``), with a study's budget filled in.

Each function is a base config (``presets`` / ``ablation`` / ``base_config``) plus the fields a
study sets; the values are those the studies used before they moved here, so their finished run
directories are reused (``studies.harness.finished_eval_dir`` compares saved configs).
"""

from __future__ import annotations

import ml_collections

from dense_cf.configs.ablation import ablation_config
from dense_cf.configs.base import base_config
from dense_cf.configs.presets import mdr_demo_config

__all__ = ["ablation_row_config", "dcsr_config", "domain_config", "mdr_config"]


def ablation_row_config(row: str, data_dir: str, *, steps: int, batch: int, model: str,
                        lr: float, seed: int, num_passages: int, test_questions: int
                        ) -> ml_collections.ConfigDict:
    """``ablation_config(row, "demo")`` with the ablation study's data, budget and evaluation
    (``studies.ablation``; ``studies.replicate``'s ``synthetic`` runs)."""
    c = ablation_config(row, "demo")
    c.seed = seed
    c.model.name_or_path = model
    c.data.data_dir = data_dir
    c.data.dev_file = ""                        # no dev evaluation: the test set decides
    c.data.synthetic.generate = True
    c.data.synthetic.num_passages = num_passages
    c.data.synthetic.test_questions = test_questions
    c.eval.after_training = True
    c.eval.aar_strategies = ("sentence", "answer")
    c.eval.robustness_counts = ()
    c.train.global_batch = batch
    c.train.num_steps = steps
    c.train.log_every = max(steps // 5, 1)
    c.train.checkpoint_every = max(steps // 2, 1)
    c.train.eval_every = 0
    c.optim.learning_rate = lr
    c.optim.warmup_steps = max(steps // 10, 1)
    return c


def dcsr_config(method: str, data_dir: str, *, steps: int, batch: int, model: str, lr: float
                ) -> ml_collections.ConfigDict:
    """DPR or DCSR on a synthetic world with the same budget (``studies.dcsr``;
    ``studies.replicate``'s ``dcsr`` runs): 1 BM25 hard negative, no loss weights, no AAR."""
    c = base_config()
    c.method = method
    c.model.name_or_path = model
    c.data.data_dir = data_dir
    c.data.train_file, c.data.dev_file = "biencoder-synth-train.json", ""
    c.data.corpus_file, c.data.test_file = "psgs_synth.tsv", "synth-test.qa.csv"
    c.data.gold_file = ""                      # AAR is not part of this comparison
    c.data.max_q_len, c.data.max_p_len = 32, 96
    c.data.num_hard = 1
    c.loss.lam = c.loss.tau1 = c.loss.tau2 = 0.0
    c.train.global_batch = batch
    c.train.num_steps = steps
    c.train.log_every = max(steps // 4, 1)
    c.train.checkpoint_every = steps
    c.train.eval_every = 0
    c.optim.learning_rate = lr
    c.optim.warmup_steps = max(steps // 10, 1)
    c.eval.after_training = True
    c.eval.embedding_dtype = "float32"
    c.eval.k = 100
    c.eval.ks = (1, 5, 20, 100)
    return c


def domain_config(data_dir: str, *, model: str, steps: int, batch: int, lr: float, seed: int
                  ) -> ml_collections.ConfigDict:
    """DPR on one synthetic domain, with configs/demo.py's lengths and optimiser settings
    (``studies.marginalize``, ``studies.data_stats``)."""
    c = base_config()
    c.method = "dpr"
    c.seed = seed
    c.model.name_or_path = model
    c.data.data_dir = data_dir
    c.data.train_file, c.data.dev_file = "biencoder-synth-train.json", "biencoder-synth-dev.json"
    c.data.corpus_file, c.data.test_file = "psgs_synth.tsv", "synth-test.qa.csv"
    c.data.gold_file = "synth-test_gold_info.json"
    c.data.max_q_len, c.data.max_p_len = 32, 96
    c.train.global_batch = batch
    c.train.num_steps = steps
    c.train.log_every = max(1, steps // 5)
    c.train.checkpoint_every = steps
    c.train.eval_every = 0
    c.optim.learning_rate = lr
    c.optim.warmup_steps = max(1, steps // 10)
    c.eval.embedding_dtype = "float32"
    c.eval.batch_size = 64
    return c


def mdr_config(method: str, data_dir: str, *, steps: int, batch: int, num_hard: int,
               beam_size: int, hop2_k: int, lr: float, seed: int, model: str = "minilm"
               ) -> ml_collections.ConfigDict:
    """``presets.mdr_demo_config(method)`` over ``data_dir`` with the multi-hop study's budget
    (``studies.multihop``)."""
    c = mdr_demo_config(method)
    c.seed = seed
    c.model.name_or_path = model
    c.data.data_dir = data_dir
    c.data.synthetic.generate = False          # generated (and checked) by the study
    c.multihop.synthetic_questions = 0
    c.data.num_hard = num_hard
    c.multihop.beam_size, c.multihop.hop2_k, c.multihop.top_chains = beam_size, hop2_k, 20
    c.train.global_batch = batch
    c.train.num_steps = steps
    c.train.log_every = max(steps // 8, 1)
    c.train.checkpoint_every = steps
    c.train.eval_every = steps
    c.train.eval_max_batches = 4
    c.optim.learning_rate = lr
    c.optim.warmup_steps = max(steps // 10, 1)
    return c
