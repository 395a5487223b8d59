"""``python -m dense_cf.bench.dcsr``: the former name of ``python -m dense_cf.studies.dcsr``.

A package rather than ``bench/dcsr.py``: with no file left at the old path, git sees
``studies/dcsr.py`` as its rename, and edits made on other branches to the old path merge there.
"""
