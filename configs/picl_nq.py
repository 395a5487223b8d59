"""PiCL on NQ: DPR + counterfactual pivots, λ = 0.2, τ1 = τ2 = 1.0 (docs/method.md §3, §9).

Ablations are overrides, e.g. ``--config.loss.tau2=0`` (no L_cpp) or
``--config.data.counterfactual=window``; limited-compute runs use τ = 0.2.
"""

from dense_cf.configs.base import base_config
from dense_cf.configs.presets import with_method


def get_config():
    c = with_method(base_config(), "picl")
    c.data.counterfactual = "sentence"
    return c
