"""DCSR on SQuAD (SPEC §4): the dataset with most questions per passage (2.66, DCSR Table 1),
where the paper's gain is largest. DPR's files are ``biencoder-squad1-{train,dev}``."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dcsr_nq import dcsr_config  # noqa: E402


def get_config():
    c = dcsr_config("squad1")
    c.data.test_file = "squad1-test.qa.csv"
    return c
