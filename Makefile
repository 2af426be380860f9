# placeto_jax: every target installs into .venv/ first (nothing but Python needed).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test test-slow lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: install  ## simulate a built-in graph under several placers and print a table
	$(VENV)/bin/placeto-jax demo

test: install  ## the default suite (slow tests excluded)
	$(PY) -m pytest -q -n 2

test-slow: install  ## only the slow tests
	$(PY) -m pytest -q -n 2 -m slow

lint: install
	$(VENV)/bin/ruff check src tests experiments
	$(VENV)/bin/ruff format --check src tests experiments

bench: install  ## simulator throughput vs the Python reference; writes results/bench/simulator.json
	$(PY) experiments/bench_simulator.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
