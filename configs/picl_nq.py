"""PiCL on NQ: DPR + counterfactual pivots, λ = 0.2, τ1 = τ2 = 1.0 (SPEC §3, §9; PiCL main runs).

Ablations are overrides, e.g. ``--config.loss.tau2=0`` (no L_cpp) or
``--config.data.counterfactual=window``; limited-compute runs use τ = 0.2.
"""

from dense_cf.config import base_config


def get_config():
    c = base_config()
    c.method = "picl"
    c.loss.lam, c.loss.tau1, c.loss.tau2 = 0.2, 1.0, 1.0
    c.data.counterfactual = "sentence"
    return c
