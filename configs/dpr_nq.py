"""DPR on NQ (BERT-base, in-batch + 1 BM25 hard negative; SPEC §9, §10)."""

from dense_cf.config import base_config


def get_config():
    c = base_config()
    c.method = "dpr"
    return c
