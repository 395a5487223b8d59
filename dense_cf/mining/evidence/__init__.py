"""EADPR pseudo-evidence (EADPR §3.1, docs/method.md §2 ``evidence``): leave-one-out candidates, QA scorers
and the annotation job."""
