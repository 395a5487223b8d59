"""The embedded default: the synthetic QA benchmark + all-MiniLM-L6-v2 (~10 min on 2 CPU cores).

``get_config("picl")`` (default) or ``get_config("dpr")`` — select with
``--config=configs/demo.py:dpr``. The benchmark is generated into data_dir on first use.
"""

from dense_cf.config import base_config


def get_config(method: str = "picl"):
    c = base_config()
    c.method = method
    c.model.name_or_path = "minilm"
    c.data.data_dir = "runs/synthetic"
    c.data.train_file = "biencoder-synth-train.json"
    c.data.dev_file = "biencoder-synth-dev.json"
    c.data.corpus_file = "psgs_synth.tsv"
    c.data.test_file = "synth-test.qa.csv"
    c.data.gold_file = "synth-test_gold_info.json"
    c.eval.after_training = True
    c.eval.embedding_dtype = "float32"
    c.eval.robustness_counts = (0, 1, 2, 5)     # 300 questions x 5 variants: ~1,500 passages to encode
    c.data.synthetic.generate = True
    c.data.synthetic.test_questions = 300        # AAR over 100 triplets is too noisy to compare
    c.data.max_q_len = 32
    c.data.max_p_len = 96
    c.train.global_batch = 16
    c.train.num_steps = 60
    c.train.log_every = 10
    c.train.checkpoint_every = 30
    c.train.eval_every = 60
    c.train.eval_max_batches = 8
    c.optim.learning_rate = 5e-5
    c.optim.warmup_steps = 6
    if method == "picl":
        c.loss.lam, c.loss.tau1, c.loss.tau2 = 0.2, 1.0, 1.0
    elif method == "eadpr":
        c.loss.lam, c.loss.tau1, c.loss.tau2 = 1.0, 1.0, 1.0
    elif method == "dcsr":  # sentence vectors + HasAns ranking (SPEC §4, docs/dcsr.md)
        c.data.gold_file = ""             # AAR/robustness are passage-level: not for DCSR
        c.eval.robustness_counts = ()
    elif method != "dpr":
        raise ValueError(f"unknown demo method {method!r}; use dpr, picl, eadpr or dcsr")
    return c
