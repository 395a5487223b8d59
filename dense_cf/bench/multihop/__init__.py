"""``python -m dense_cf.bench.multihop``: the former name of ``python -m dense_cf.studies.multihop``.

A package rather than ``bench/multihop.py``: with no file left at the old path, git sees
``studies/multihop.py`` as its rename, and edits made on other branches to the old path merge there.
"""
