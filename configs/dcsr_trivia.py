"""DCSR on TriviaQA (docs/method.md §4; DPR's ``biencoder-trivia-{train,dev}`` and the gzipped
``trivia-test.qa.csv.gz``)."""

from dense_cf.configs.presets import dcsr_config


def get_config():
    return dcsr_config("trivia")
