# The two commands of the README: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test setup controlplane lint typecheck crds unit clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Installs the package with its test tools into $(VENV).
setup: $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'

# Builds (or reuses from the cache) the pinned control-plane binaries.
controlplane:
	bash tests/controlplane/setup-host.sh
	bash tests/controlplane/build.sh

# The main job on the embedded default: local control plane, simulated GPU nodes.
demo: setup controlplane
	$(BIN)/sps-operator demo

lint: setup
	$(BIN)/ruff check operator tests bench
	$(BIN)/ruff format --check operator tests bench
	$(BIN)/mypy
	$(BIN)/mypy bench

crds: setup
	$(BIN)/sps-operator crd > crds/sps.dev_spsprofiles.yaml

unit: setup
	$(BIN)/pytest -m "not k8s and not e2e"

# Every test: lint and types, unit, simulator and profiler, control plane, end to end.
test: setup controlplane lint
	$(BIN)/pytest

clean:
	rm -rf $(VENV) build dist *.egg-info
