"""Shared test helpers (imported by test modules; pytest puts tests/ on sys.path)."""

from dense_cf.config import base_config


def tiny_synthetic_config(data_dir, **overrides):
    """A tiny random-BERT PiCL config over a synthetic benchmark written to ``data_dir``.

    ``overrides`` use dotted keys, e.g. ``**{"train.num_steps": 3}``.
    """
    c = base_config()
    c.method = "picl"
    c.model.name_or_path = "tiny"
    c.model.tiny_layers = 1
    c.data.data_dir = str(data_dir)
    c.data.train_file, c.data.dev_file = "biencoder-synth-train.json", "biencoder-synth-dev.json"
    c.data.corpus_file, c.data.test_file = "psgs_synth.tsv", "synth-test.qa.csv"
    c.data.gold_file = "synth-test_gold_info.json"
    c.data.max_q_len, c.data.max_p_len = 24, 64
    c.loss.lam, c.loss.tau1, c.loss.tau2 = 0.2, 1.0, 1.0
    c.train.global_batch = 8
    c.train.log_every = 1
    c.train.eval_every = 0
    c.optim.warmup_steps = 1
    c.mesh.data = 2
    c.eval.k = 20
    c.eval.ks = (1, 5, 20)
    c.eval.batch_size = 64
    c.eval.embedding_dtype = "float32"
    c.eval.shard_size = 128
    return apply_overrides(c, overrides)


def apply_overrides(config, overrides):
    """Sets dotted keys (``{"train.num_steps": 3}``) on a ConfigDict, like ``--config.x.y=v``."""
    for key, value in overrides.items():
        node = config
        *path, last = key.split(".")
        for p in path:
            node = node[p]
        node[last] = value
    return config
