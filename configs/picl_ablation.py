"""PiCL's ablation (Table 4), one row per config: ``configs/picl_ablation.py:ROW[,BASE][,tau=X]``.

ROW (docs/ablation.md):

* loss terms: ``dpr`` (baseline, λ = τ1 = τ2 = 0), ``picl`` (L_dpr + L_chn + L_cpp: λ = 0.2,
  τ1 = τ2 = 1), ``dpr_cpp`` (τ1 = 0), ``dpr_chn`` (τ2 = 0), ``cpp_chn`` (no L_dpr);
* counterfactual sampling: ``answer``, ``window``, ``sentence`` (full PiCL's losses with
  ``data.counterfactual`` set; ``sentence`` = ``picl``).

λ: rows that keep L_dpr keep λ = 0.2, because the paper's baselines drop terms of eq. 10 and
its L_dpr is eq. 7's, with λ·e^{sim(q,p*)} (reasons in ``dense_cf/configs/ablation.py``).

BASE: ``nq`` (default: DPR's NQ files, BERT-base, docs/method.md §9) or ``demo`` (the synthetic
benchmark with MiniLM, ``configs/demo.py``). ``tau=0.2`` sets every non-zero τ to 0.2 (the
paper's limited-compute setting, probably Table 4's).

Example: ``python -m dense_cf.main --config=configs/picl_ablation.py:dpr_chn,demo
--workdir=runs/abl_dpr_chn``. All rows with statistics: ``python -m dense_cf.studies.ablation``.
"""

from dense_cf.configs.ablation import ablation_config, parse_arg


def get_config(arg: str = "picl"):
    return ablation_config(*parse_arg(arg))
