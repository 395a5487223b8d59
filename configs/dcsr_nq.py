"""DCSR on NQ (SPEC §4): contextual sentence vectors at ``<sent>`` markers, in-passage negatives.

The paper follows DPR's set-up (SPEC §9: BERT-base, 8 × 16 questions, lr 2e-5, 40 epochs);
per question: the answer sentence of p+, 1 in-passage negative, 1 sentence of the BM25 negative
passage, plus all in-batch sentences. Table 4 ablations are overrides:
``--config.dcsr.negatives=bm25`` (+1 BM25 random), ``=bm25x2`` (+2 BM25 random from two
passages), ``=in_batch``. Retrieval indexes every sentence and ranks passages by HasAns.
"""

from dense_cf.config import base_config


def dcsr_config(dataset: str = "nq"):
    """The shared DCSR set-up; ``dataset`` picks DPR's biencoder/test files (SPEC §8)."""
    c = base_config()
    c.method = "dcsr"
    c.loss.lam = c.loss.tau1 = c.loss.tau2 = 0.0   # the DPR NLL over sentences
    c.data.num_hard = 1
    c.dcsr.negatives = "in_passage"
    c.data.train_file = f"biencoder-{dataset}-train.json.gz"
    c.data.dev_file = f"biencoder-{dataset}-dev.json.gz"
    c.data.test_file = f"{dataset}-test.qa.csv"
    # AAR needs passage vectors; DCSR has sentence vectors (docs/dcsr.md): off.
    c.data.gold_file = ""
    return c


def get_config():
    return dcsr_config("nq")
