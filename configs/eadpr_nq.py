"""EADPR on NQ: λ = 1.0, τ1 = τ2 = 1.0 (docs/method.md §3; EADPR eq. 3-8).

Counterfactual source, chosen by the config argument:

* ``--config=configs/eadpr_nq.py`` (or ``:gold``): p* drops the sentences with an answer
  match (``sentence`` strategy, docs/method.md §2);
* ``--config=configs/eadpr_nq.py:pseudo``: p* drops the QA-model pseudo-evidence sentence
  (``evidence`` strategy, EADPR §3.1). Make the annotations first (docs/evidence.md)::

      python -m dense_cf.cli.evidence --input data/dpr/biencoder-nq-train.json.gz \\
          --output data/dpr/biencoder-nq-train.evidence.jsonl --scorer t5:allenai/unifiedqa-t5-base

  ``data.evidence_file`` defaults to ``<data_dir>/biencoder-nq-train.evidence.jsonl`` (it
  follows ``--config.data.data_dir``); override it with ``--config.data.evidence_file=PATH``.
  The file annotates the train split only: the dev split gets no counterfactuals from it (its
  records name the train file), so dev L_chn/L_cpp are 0 in the pseudo setting.
"""

from dense_cf.configs.base import base_config
from dense_cf.configs.presets import with_method

EVIDENCE_FILE = "biencoder-nq-train.evidence.jsonl"


def get_config(arg: str | None = None):
    mode = arg or "gold"
    if mode not in ("gold", "pseudo"):
        raise ValueError(f"configs/eadpr_nq.py takes 'gold' or 'pseudo', got {arg!r}")
    c = with_method(base_config(), "eadpr")
    if mode == "gold":
        c.data.counterfactual = "sentence"
    else:
        c.data.counterfactual = "evidence"
        # A reference, so that --config.data.data_dir=... moves the default file with it.
        c.data.evidence_file = c.data.get_ref("data_dir") + "/" + EVIDENCE_FILE
    return c
