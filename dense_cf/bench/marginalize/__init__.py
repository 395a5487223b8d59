"""``python -m dense_cf.bench.marginalize``: the former name of ``python -m dense_cf.studies.marginalize``.

A package rather than ``bench/marginalize.py``: with no file left at the old path, git sees
``studies/marginalize.py`` as its rename, and edits made on other branches to the old path merge there.
"""
