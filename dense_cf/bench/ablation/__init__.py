"""``python -m dense_cf.bench.ablation``: the former name of ``python -m dense_cf.studies.ablation``.

A package rather than ``bench/ablation.py``: with no file left at the old path, git sees
``studies/ablation.py`` as its rename, and edits made on other branches to the old path merge there.
"""
