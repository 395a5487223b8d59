"""Data-efficiency runs: DPR trained on a uniform random subset of its training set (docs/method.md §7).

``--config=configs/data_efficiency.py:FRACTION[,BASE]`` with FRACTION in (0, 1] (the paper uses
0.1, 0.25, 0.4, 0.55, 0.7, 0.85, 1.0) and BASE ``nq`` (default: DPR on NQ, docs/method.md §9) or ``demo``
(DPR on the synthetic benchmark with MiniLM, configs/demo.py). The subset is
``dense_cf.mining.stats.subset_mask(N, FRACTION, data.train_fraction_seed)`` of the N valid
training records -- nested across fractions and identical to the subsets reported by
``python -m dense_cf.cli.stats --input TRAIN --seed SEED``. Epoch-based schedules shrink with
the subset (40 epochs of a smaller set = fewer steps), as in the paper; set
``--config.train.num_steps`` to compare at equal compute instead.

Example: ``python -m dense_cf.main --config=configs/data_efficiency.py:0.4
--workdir=runs/nq_dpr_frac0.40``; then encoder marginalisation over the runs:
``python -m dense_cf.cli.marginalize --workdirs runs/nq_dpr_frac* --test nq-test.qa.csv``.
"""

from dense_cf.configs.base import base_config
from dense_cf.configs.presets import demo_config, with_method


def get_config(arg: str = "1.0"):
    parts = [p.strip() for p in str(arg).split(",") if p.strip()]
    fraction = float(parts[0]) if parts else 1.0
    base = parts[1] if len(parts) > 1 else "nq"
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"data_efficiency.py: fraction must be in (0, 1], got {fraction}")
    if base == "nq":
        c = base_config()
        c.optim.learning_rate = 1e-5  # the attribution paper's DPR runs (§5: lr 1e-5, 40 epochs)
    elif base == "demo":
        c = demo_config("dpr")
    else:
        raise ValueError(f"data_efficiency.py: base must be 'nq' or 'demo', got {base!r}")
    with_method(c, "dpr")
    c.data.train_fraction = fraction
    c.data.train_fraction_seed = 0
    return c
