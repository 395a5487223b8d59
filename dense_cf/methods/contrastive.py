"""DPR, PiCL and EADPR: one contrastive loss over passages, weighted by ``config.loss``.

The three differ only in the loss weights (docs/method.md §3): plain DPR uses λ = τ1 = τ2 = 0,
PiCL and EADPR add the counterfactual terms; their preset weights are written once, in
``dense_cf.configs.presets``. Counterfactual passages (docs/method.md §2) are in the batch only
when some weight uses them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from dense_cf.losses import contrastive_loss
from dense_cf.methods.base import Embeddings, Method

__all__ = ["LossConfig", "contrastive_embeddings_loss", "loss_hparams", "make",
           "needs_counterfactual"]


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """Weights of the contrastive loss (docs/method.md §3); the defaults are plain DPR."""

    lam: float = 0.0
    tau1: float = 0.0
    tau2: float = 0.0
    use_dpr: bool = True

    def kwargs(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def loss_hparams(loss_config: Any) -> dict[str, Any]:
    """``config.loss`` (a ConfigDict or dict) as keyword arguments of ``contrastive_loss``.

    Values become Python scalars so zero weights stay static and their terms are not computed.
    Fields the node lacks take the plain-DPR defaults.
    """
    d = LossConfig()
    get = loss_config.get
    out = LossConfig(lam=float(get("lam", d.lam)), tau1=float(get("tau1", d.tau1)),
                     tau2=float(get("tau2", d.tau2)), use_dpr=bool(get("use_dpr", d.use_dpr)))
    if out.lam < 0 or out.tau1 < 0 or out.tau2 < 0:
        raise ValueError(f"config.loss weights must be >= 0, got {out}")
    return out.kwargs()


def needs_counterfactual(loss_config: Any) -> bool:
    """The batch carries p* only if some loss term uses it (λ, τ1 or τ2 non-zero)."""
    return bool(loss_config.get("lam", 0) or loss_config.get("tau1", 0)
                or loss_config.get("tau2", 0))


def contrastive_embeddings_loss(emb: Embeddings, **hparams) -> tuple[jax.Array, dict]:
    """``contrastive_loss`` of gathered :class:`Embeddings` (docs/method.md §3)."""
    return contrastive_loss(emb.q, emb.pos, emb.neg, emb.neg_valid, emb.cf, emb.cf_valid,
                            **hparams)


def make(name: str) -> Method:
    return Method(name=name, loss=contrastive_embeddings_loss, loss_hparams=loss_hparams,
                  needs_counterfactual=needs_counterfactual)
