"""DCSR on TriviaQA (SPEC §4; DPR's ``biencoder-trivia-{train,dev}``, ``trivia-test.qa.csv.gz``: DPR publishes TriviaQA's qa files gzipped)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dcsr_nq import dcsr_config  # noqa: E402


def get_config():
    c = dcsr_config("trivia")
    c.data.test_file = "trivia-test.qa.csv.gz"
    return c
