"""EADPR pseudo-evidence (EADPR §3.1, SPEC §2 ``evidence``): leave-one-out candidates and QA scorers.

The command that writes the annotations is ``python -m dense_cf.data.evidence``.
"""
