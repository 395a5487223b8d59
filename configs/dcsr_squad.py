"""DCSR on SQuAD (docs/method.md §4): the dataset with most questions per passage (2.66, DCSR
Table 1), where the paper's gain is largest. DPR's files are ``biencoder-squad1-{train,dev}``."""

from dense_cf.configs.presets import dcsr_config


def get_config():
    return dcsr_config("squad1")
