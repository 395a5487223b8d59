"""DPR, PiCL and EADPR: one contrastive loss over passages, weighted by ``config.loss``.

The three differ only in the loss weights (docs/method.md §3): plain DPR uses λ = τ1 = τ2 = 0,
PiCL and EADPR add the counterfactual terms. Each registry entry carries its own weights
(``Method.loss_defaults``, written once here); a weight the config leaves unset (None) takes
them, and a config whose weights contradict the method (DPR with a counterfactual term, PiCL or
EADPR without one) is refused at start-up (docs/method.md, "A method owns its weights").
Counterfactual passages (docs/method.md §2) are in the batch only when some weight uses them.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping

import jax

from dense_cf.losses import contrastive_loss
from dense_cf.methods.base import Embeddings, Method

__all__ = ["DPR_LOSS", "EADPR_LOSS", "LossConfig", "PICL_LOSS", "contrastive_embeddings_loss",
           "loss_hparams", "loss_problems", "make", "needs_counterfactual"]

# docs/method.md §3. PiCL's main runs: λ = 0.2, τ1 = τ2 = 1.0 (its limited-compute runs use
# τ = 0.2); EADPR: λ = τ1 = τ2 = 1.0. Plain DPR: all zero.
DPR_LOSS = {"lam": 0.0, "tau1": 0.0, "tau2": 0.0}
PICL_LOSS = {"lam": 0.2, "tau1": 1.0, "tau2": 1.0}
EADPR_LOSS = {"lam": 1.0, "tau1": 1.0, "tau2": 1.0}
_CF_TERMS = ("lam", "tau1", "tau2")


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """Weights of the contrastive loss (docs/method.md §3); the defaults are plain DPR."""

    lam: float = 0.0
    tau1: float = 0.0
    tau2: float = 0.0
    use_dpr: bool = True

    def kwargs(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _weight(loss_config: Any, key: str, defaults: Mapping[str, Any], fallback: Any) -> Any:
    value = loss_config.get(key)
    return defaults.get(key, fallback) if value is None else value


def loss_hparams(loss_config: Any, defaults: Mapping[str, Any] = DPR_LOSS) -> dict[str, Any]:
    """``config.loss`` (a ConfigDict or dict) as keyword arguments of ``contrastive_loss``.

    Values become Python scalars so zero weights stay static and their terms are not computed.
    Fields the node lacks or leaves None take ``defaults`` (the method's weights).
    """
    d = LossConfig()
    out = LossConfig(**{f.name: type(getattr(d, f.name))(
        _weight(loss_config, f.name, defaults, getattr(d, f.name)))
        for f in dataclasses.fields(LossConfig)})
    if out.lam < 0 or out.tau1 < 0 or out.tau2 < 0:
        raise ValueError(f"config.loss weights must be >= 0, got {out}")
    return out.kwargs()


def needs_counterfactual(loss_config: Any, defaults: Mapping[str, Any] = DPR_LOSS) -> bool:
    """The batch carries p* only if some loss term uses it (λ, τ1 or τ2 non-zero)."""
    return any(_weight(loss_config, k, defaults, 0.0) for k in _CF_TERMS)


def loss_problems(name: str, defaults: Mapping[str, Any], loss_config: Any) -> list[str]:
    """Weights that contradict the method: a counterfactual term on a method without one (DPR
    would train as PiCL under DPR's name), none on a method defined by them, or no term at all."""
    uses = needs_counterfactual(loss_config, defaults)
    own = needs_counterfactual({}, defaults)
    given = ", ".join(f"{k}={_weight(loss_config, k, defaults, 0.0)}" for k in _CF_TERMS)
    mine = ", ".join(f"{k}={defaults.get(k, 0.0)}" for k in _CF_TERMS)
    if uses and not own:
        return [f"config.method={name!r} has no counterfactual term but config.loss sets {given}: "
                f"name the method these weights define (picl, eadpr) or leave config.loss unset"]
    if own and not uses:
        return [f"config.method={name!r} is defined by its counterfactual terms ({mine}) but "
                f"config.loss sets {given}, which trains plain DPR: leave config.loss unset for "
                f"{name}'s weights, or use config.method='dpr'"]
    if not _weight(loss_config, "use_dpr", defaults, True) and not uses:
        return ["config.loss has no term: use_dpr=False and lam = tau1 = tau2 = 0"]
    return []


def contrastive_embeddings_loss(emb: Embeddings, **hparams) -> tuple[jax.Array, dict]:
    """``contrastive_loss`` of gathered :class:`Embeddings` (docs/method.md §3)."""
    return contrastive_loss(emb.q, emb.pos, emb.neg, emb.neg_valid, emb.cf, emb.cf_valid,
                            **hparams)


def make(name: str, defaults: Mapping[str, Any], **fields) -> Method:
    """A contrastive method called ``name`` whose ``config.loss`` weights default to ``defaults``
    (``fields``: other :class:`Method` fields, e.g. MDR's embed and inputs)."""
    defaults = dict(defaults)
    fields.setdefault("loss", contrastive_embeddings_loss)
    problems = fields.pop("config_problems", lambda config: [])
    return Method(name=name, loss_hparams=functools.partial(loss_hparams, defaults=defaults),
                  needs_counterfactual=functools.partial(needs_counterfactual, defaults=defaults),
                  loss_defaults=defaults,
                  config_problems=lambda config: (loss_problems(name, defaults, config.loss)
                                                  + problems(config)),
                  **fields)
