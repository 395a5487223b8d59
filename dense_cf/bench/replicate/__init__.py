"""``python -m dense_cf.bench.replicate``: the former name of ``python -m dense_cf.studies.replicate``.

A package rather than ``bench/replicate.py``: with no file left at the old path, git sees
``studies/replicate.py`` as its rename, and edits made on other branches to the old path merge there.
"""
