# Quick start:  make demo   (train the `pi` cell on synthetic data, local SQLite MLflow store)
#               make test   (install everything the tests need, then run them)
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.pipi-installed
PYTEST_ARGS ?=
export OMP_WAIT_POLICY ?= PASSIVE

.PHONY: install demo test test-fast test-envs system-deps ui bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	# torch/torchvision must be a matching pair: `===` skips a local +cpu torch wheel that
	# cannot load the registry's torchvision (README, "Install").
	$(BIN)/pip install --quiet 'torch===2.13.0' 'torchvision==0.28.0'
	$(BIN)/pip install --quiet -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH MLFLOW_DISABLE_TELEMETRY=true mlflow run . -e train --env-manager local \
		-P cell=pi -P profile=demo -P weights=none

system-deps:
	bash scripts/system-deps.sh

# make test: both tiers, as CI runs it, on $(TEST_WORKERS) pytest-xdist workers (each integration
# module on one worker, the shared smoke study on one: tests/conftest.py); make test-fast: the
# unit tier only (no server, no subprocess, at most one optimizer step per model), meant for
# before every commit.
TEST_WORKERS ?= 2
test: $(STAMP) system-deps
	@start=$$(date +%s); \
	PATH=$(CURDIR)/$(BIN):$$PATH MLFLOW_DISABLE_TELEMETRY=true $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=25 -m "not envbuild" tests/unit tests/integration $(PYTEST_ARGS); \
	rc=$$?; echo "make test: $$(( $$(date +%s) - start )) s (the budget: under 1200 s on 2 cores)"; exit $$rc

# make test-envs: the tests that let MLflow build environments as a user's mlflow does
# (`mlflow models serve --env-manager virtualenv`, `mlflow run --env-manager virtualenv`): each
# installs torch into a fresh virtualenv (about 5.5 GB), so they are a tier of their own;
# .ci/run runs it after `make test` (docs/benchmarks.md has their cost).
test-envs: $(STAMP) system-deps
	@start=$$(date +%s); \
	PATH=$(CURDIR)/$(BIN):$$PATH MLFLOW_DISABLE_TELEMETRY=true $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=5 -rP -m envbuild tests/integration $(PYTEST_ARGS); \
	rc=$$?; echo "make test-envs: $$(( $$(date +%s) - start )) s"; exit $$rc

test-fast: $(STAMP)
	@start=$$(date +%s); \
	PATH=$(CURDIR)/$(BIN):$$PATH MLFLOW_DISABLE_TELEMETRY=true $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup tests/unit $(PYTEST_ARGS); \
	rc=$$?; echo "make test-fast: $$(( $$(date +%s) - start )) s (the budget: under 120 s on 2 cores, issue 39)"; exit $$rc

ui: $(STAMP)
	@echo "runs of the Default experiment (docs/mlflow-ui.md): http://127.0.0.1:5000/#/experiments/0/runs?workflowType=machine_learning&viewStateShareKey=pipi"
	$(BIN)/mlflow ui --backend-store-uri sqlite:///mlflow.db --port 5000

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pipi mlruns mlflow.db
