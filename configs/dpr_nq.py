"""DPR on NQ (BERT-base, in-batch + 1 BM25 hard negative; docs/method.md §9, §10)."""

from dense_cf.configs.base import base_config
from dense_cf.configs.presets import with_method


def get_config():
    return with_method(base_config(), "dpr")
