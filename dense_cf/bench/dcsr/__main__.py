"""Runs :mod:`dense_cf.studies.dcsr`: its ``main`` and ``FLAGS`` imported, not re-run."""

from dense_cf import app
from dense_cf.studies import dcsr as study

if __name__ == "__main__":
    app.run(study.main, study.FLAGS, study.__doc__)
