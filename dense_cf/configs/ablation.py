"""PiCL's ablation rows (PiCL Table 4; docs/ablation.md), written once for the config file
``configs/picl_ablation.py`` and the benchmark ``dense_cf.studies.ablation``.

Loss terms (docs/method.md §3: L = use_dpr·L_dpr + τ1·L_chn + τ2·L_cpp):

* ``dpr``: plain DPR (method "dpr", λ = τ1 = τ2 = 0), the baseline.
* ``picl``: full PiCL (λ = 0.2, τ1 = τ2 = 1, sentence counterfactuals).
* ``dpr_cpp`` (L_dpr + L_cpp: τ1 = 0), ``dpr_chn`` (L_dpr + L_chn: τ2 = 0), ``cpp_chn``
  (L_cpp + L_chn: use_dpr = False).
* ``dpr_lam``: L_dpr of eq. 7 alone (λ = 0.2, τ1 = τ2 = 0): not a Table 4 row. It holds λ
  fixed against ``dpr_cpp`` and ``dpr_chn``, which differ from ``dpr`` in λ and a τ term at
  once (issue 50, docs/replication.md "PiCL Table 4").

Counterfactual sampling: ``answer``, ``window``, ``sentence`` = full PiCL's losses with
``data.counterfactual`` set (``sentence`` is the ``picl`` row).

λ in the loss-term rows: λ = 0.2, as in full PiCL. The paper builds its three baselines as
"modifications on the objective function in Equation 10" (§5.3), i.e. it drops terms of
eq. 10, and the L_dpr of eq. 10 is the modified L_dpr of eq. 7, which carries λ·e^{sim(q,p*)}.
So a row that keeps L_dpr keeps λ = 0.2 (p* stays a down-weighted negative inside L_dpr, on top
of L_chn in ``dpr_chn``), and ``cpp_chn`` has no L_dpr (λ is left at 0.2 but weights nothing).

τ: 1.0, PiCL's main setting (Table 2; the ``picl`` method's own weights,
``methods.contrastive.PICL_LOSS``, which tests/test_ablation.py pins the ``picl`` row to).
Table 4's DPR and PiCL figures differ from Table 2's, so Table 4 was probably trained in the
paper's limited-compute setting (appendix: 25 epochs, λ = 0.2, τ1 = τ2 = 0.2); the ``tau=0.2``
option sets every non-zero τ to 0.2 for that setting.
"""

from __future__ import annotations

import ml_collections

from dense_cf.configs.base import base_config
from dense_cf.configs.presets import demo_config, dpr_files, with_method

__all__ = ["BASES", "LOSS_ROWS", "ROWS", "SAMPLING_ROWS", "ablation_config", "parse_arg"]

# row -> (method, loss weights). Every row sets all four fields of config.loss: a row is the
# table's explicit setting (λ = 0.2, τ = 1, PiCL's), whatever a method's defaults.
_LAM, _TAU = 0.2, 1.0
LOSS_ROWS: dict[str, tuple[str, dict[str, float | bool]]] = {
    "dpr": ("dpr", {"use_dpr": True, "lam": 0.0, "tau1": 0.0, "tau2": 0.0}),
    "picl": ("picl", {"use_dpr": True, "lam": _LAM, "tau1": _TAU, "tau2": _TAU}),
    "dpr_cpp": ("picl", {"use_dpr": True, "lam": _LAM, "tau1": 0.0, "tau2": _TAU}),
    "dpr_chn": ("picl", {"use_dpr": True, "lam": _LAM, "tau1": _TAU, "tau2": 0.0}),
    "cpp_chn": ("picl", {"use_dpr": False, "lam": _LAM, "tau1": _TAU, "tau2": _TAU}),
    "dpr_lam": ("picl", {"use_dpr": True, "lam": _LAM, "tau1": 0.0, "tau2": 0.0}),
}
# row -> data.counterfactual, with full PiCL's losses.
SAMPLING_ROWS: dict[str, str] = {"answer": "answer", "window": "window", "sentence": "sentence"}
ROWS: tuple[str, ...] = tuple(LOSS_ROWS) + tuple(SAMPLING_ROWS)
BASES: tuple[str, ...] = ("nq", "demo")


def parse_arg(arg: str) -> tuple[str, str, float | None]:
    """``"ROW[,BASE][,tau=X]"`` -> (row, base, tau or None)."""
    parts = [p.strip() for p in str(arg).split(",") if p.strip()]
    row, base, tau = (parts[0] if parts else "picl"), "nq", None
    for p in parts[1:]:
        if p.startswith("tau="):
            tau = float(p[len("tau="):])
        elif p in BASES:
            base = p
        else:
            raise ValueError(f"picl_ablation: unknown option {p!r} in {arg!r}; expected a base "
                             f"{BASES} or tau=X")
    if row not in ROWS:
        raise ValueError(f"picl_ablation: unknown row {row!r}; rows: {', '.join(ROWS)}")
    return row, base, tau


def ablation_config(row: str, base: str = "nq", tau: float | None = None
                    ) -> ml_collections.ConfigDict:
    """The config of one ablation row on ``base``: ``nq`` (DPR's NQ files, BERT-base; docs/method.md §9)
    or ``demo`` (the synthetic benchmark with MiniLM, ``presets.demo_config``, with one BM25
    hard negative per question as on NQ). ``tau`` replaces
    every non-zero τ (the paper's limited-compute runs use 0.2)."""
    if row not in ROWS:
        raise ValueError(f"unknown ablation row {row!r}; rows: {', '.join(ROWS)}")
    method, loss = LOSS_ROWS[row] if row in LOSS_ROWS else LOSS_ROWS["picl"]
    if base == "nq":
        c = with_method(dpr_files(base_config(), "nq"), method)
    elif base == "demo":
        c = demo_config(method)
        # The paper's DPR setting, in which docs/ablation.md was measured: one BM25 hard
        # negative per question (the demo itself trains with in-batch negatives only).
        c.data.num_hard = 1
    else:
        raise ValueError(f"unknown base {base!r}; bases: {', '.join(BASES)}")
    with_method(c, method)
    c.loss.update(loss)
    if tau is not None:
        if tau < 0:
            raise ValueError(f"tau must be >= 0, got {tau}")
        for key in ("tau1", "tau2"):
            if c.loss[key]:
                c.loss[key] = float(tau)
    c.data.counterfactual = SAMPLING_ROWS.get(row, "sentence")
    return c
