"""DCSR on NQ (docs/method.md §4): contextual sentence vectors at ``<sent>`` markers.

The paper follows DPR's set-up (docs/method.md §9: BERT-base, 8 × 16 questions, lr 2e-5, 40
epochs); per question: the answer sentence of p+, 1 in-passage negative, 1 sentence of the BM25
negative passage, plus all in-batch sentences. Table 4 ablations are overrides:
``--config.dcsr.negatives=bm25`` (+1 BM25 random), ``=bm25x2`` (+2 BM25 random from two
passages), ``=in_batch``. Retrieval indexes every sentence and ranks passages by HasAns.
"""

from dense_cf.configs.presets import dcsr_config


def get_config():
    return dcsr_config("nq")
