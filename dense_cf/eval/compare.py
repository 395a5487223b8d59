"""``python -m dense_cf.eval.compare RUN_A RUN_B``: the design card's name of the compare binary.

The binary is ``dense_cf/cli/compare.py`` and the comparison ``dense_cf/analysis/compare.py``
(a layer above ``eval``); this module only forwards to the binary when run.
"""

if __name__ == "__main__":
    from dense_cf import app
    from dense_cf.cli import compare
    app.run(compare.main, compare.FLAGS, compare.USAGE)
