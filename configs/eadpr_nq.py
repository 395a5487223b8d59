"""EADPR on NQ: λ = 1.0, τ1 = τ2 = 1.0 (SPEC §3; EADPR eq. 3-8).

Counterfactuals from gold sentences (default) or from QA-model pseudo-evidence:
``--config.data.counterfactual=evidence --config.data.evidence_file=PATH``.
"""

from dense_cf.config import base_config


def get_config():
    c = base_config()
    c.method = "eadpr"
    c.loss.lam, c.loss.tau1, c.loss.tau2 = 1.0, 1.0, 1.0
    c.data.counterfactual = "sentence"
    return c
