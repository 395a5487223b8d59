"""``python -m dense_cf.bench.data_stats``: the former name of ``python -m dense_cf.studies.data_stats``.

A package rather than ``bench/data_stats.py``: with no file left at the old path, git sees
``studies/data_stats.py`` as its rename, and edits made on other branches to the old path merge there.
"""
