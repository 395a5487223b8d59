"""Studies: commands that train several runs and compare them (docs/ARCHITECTURE.md, "Studies").

Each study module defines its runs and comparisons; :mod:`dense_cf.studies.harness` owns what
they share (run naming per seed, reuse of finished runs, paired comparison, summaries over
seeds, the common flags). The micro-benchmarks stay in :mod:`dense_cf.bench`.
"""
