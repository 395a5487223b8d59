"""End to end at scale (docs/scale.md "End to end at scale"): a 1M-passage synthetic corpus
through training → passage store → export → index → retrieval evaluation, with a tiny random
BERT so that the pipeline, not the model, is measured. ``python -m dense_cf.bench.scale`` runs
the stages one process each and writes the data first (``--num_passages``, 1,000,000 by default).

``configs/scale_1m.py:jax`` searches with ``eval.index=jax`` instead of faiss Flat.
"""

from dense_cf.configs.presets import demo_config


def get_config(index: str = "flat"):
    c = demo_config("dpr")
    c.model.name_or_path = "tiny"
    c.model.tiny_hidden, c.model.tiny_layers, c.model.tiny_heads = 64, 1, 2
    c.data.data_dir = "runs/scale_1m/data"   # bench.scale sets its own --out/data
    c.data.synthetic.generate = False        # bench.scale's data stage writes it
    c.data.gold_file = ""                    # no AAR: the stage is retrieval at scale
    c.eval.after_training = False            # bench.scale runs each evaluation stage itself
    c.eval.robustness_counts = ()
    c.eval.index = index
    c.eval.embedding_dtype = "float16"       # as for psgs_w100: half the disk and page cache
    c.eval.batch_size = 512
    c.eval.shard_size = 100_000
    c.eval.k = 100
    c.train.num_steps = 50
    c.train.checkpoint_every = 50
    c.train.eval_every = 0
    return c
