# placeto_jax: every target installs into .venv/ first (nothing but Python needed).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test test-slow lint bench bench-train bench-gpu bench-execute calibrate reproduce-quick reproduce results-doc clean

install: $(STAMP)

$(STAMP): pyproject.toml setup.py src/placeto_jax/sim/native.cc  # the native kernel is built at install
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

RUN_DIR ?= runs/make-run

run: install  ## train the lookahead construct agent on family:nmt/train (4 devices, CPU preset), place family:nmt/test zero-shot next to the untrained and uniform controls
	$(VENV)/bin/placeto-jax train --graphs family:nmt/train --devices 4 --preset construct-lookahead --workdir $(RUN_DIR) --no-heuristics
	$(VENV)/bin/placeto-jax eval --checkpoint $(RUN_DIR) --graphs family:nmt/test --control

test: install  ## the default suite (slow tests excluded)
	$(PY) -m pytest -q -n 2 --dist loadfile --durations=25

test-slow: install  ## only the slow tests
	$(PY) -m pytest -q -n 2 -m slow

lint: install
	$(VENV)/bin/ruff check src tests experiments
	$(VENV)/bin/ruff format --check src tests experiments

bench: install  ## simulator vs the Python reference: real graphs first (results/bench/wide.json), then the synthetic layered ones (results/bench/simulator.json)
	cd experiments && ../$(PY) bench_wide.py --memory
	$(PY) experiments/bench_simulator.py

bench-train: install  ## trainer throughput of both agents; writes results/bench/training.json and training-construct.json
	cd experiments && ../$(PY) bench_training.py
	cd experiments && ../$(PY) bench_training.py --agent construct --nodes 100 300 1000 --batch 64 --out ../results/bench/training-construct.json

bench-gpu: install  ## on the accelerator: the simulator on real graphs, then synthetic ones, and the trainer (CPU: small sizes); writes results/bench/gpu.json
	$(PY) experiments/bench_gpu.py

bench-execute: install  ## 20 placements of a small zoo model run on 4 host CPU devices vs simulated; writes results/bench/execute.json
	$(PY) experiments/bench_execute.py

calibrate: install  ## simulated vs measured single-device training steps on one core of this CPU; writes results/calibration/calibration.json
	XLA_FLAGS="--xla_cpu_multi_thread_eigen=false $$XLA_FLAGS" taskset -c 0 $(PY) experiments/calibrate.py

BENCHMARK_DATA ?= ../shared/benchmarks/msr-fiddle

reproduce-quick: install  ## every paper experiment with CPU-sized budgets -> results/<experiment>/
	$(VENV)/bin/placeto-jax reproduce all --quick --data $(BENCHMARK_DATA)
	$(VENV)/bin/placeto-jax sweep --quick --graphs family:nmt/0 --devices 4 --set lr=3e-3,1e-2,3e-2 --set entropy=0,0.03 --seeds 2

reproduce: install  ## every paper experiment at paper scale (meant for a GPU)
	$(VENV)/bin/placeto-jax reproduce all --full --data $(BENCHMARK_DATA)
	$(VENV)/bin/placeto-jax sweep --preset paper --graphs family:nmt/0 --devices 4 --set lr=3e-4,1e-3,3e-3 --set entropy=0.01,0.03,0.1 --seeds 8

results-doc: install  ## docs/results.md from results/ (every JSON result with the commit it measured); never edit it by hand
	$(PY) experiments/results_doc.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache src/placeto_jax/sim/_native*.so
