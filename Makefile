# The two commands of the README: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-tools setup controlplane testbed realnode lint lint-checks typecheck crds unit clean \
	release dist release-host publish release-check lock cosign

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Installs the package with its test tools into $(VENV), and beside it the simulator
# (sim/, distribution sps-sim) and the test bed (testbed/, distribution sps-testbed).
# Once per change of a distribution's metadata (the installs are editable: code changes need
# no reinstall), so `make demo` and `make test` do not pay pip's 10-15 s every time.
setup: $(VENV)/.installed

$(VENV)/.installed: $(BIN)/python pyproject.toml sim/pyproject.toml testbed/pyproject.toml
	$(BIN)/pip install -q -e '.[dev]' -e ./sim -e ./testbed
	touch $@

# Builds (or reuses from the cache) the pinned control-plane binaries.
controlplane:
	bash testbed/recipes/setup-host.sh
	bash testbed/recipes/build.sh

# The real-node test bed's host packages, the inotify limits its kubelets need (raised to
# kind's recommendation when root, else it says what to run), node binaries (kubelet,
# kube-proxy, CoreDNS, device plugin), Kueue (its manager and config/) and images
# (operator from the Dockerfile, SGLang stand-in, Kueue), all cached.
testbed: setup controlplane
	bash testbed/recipes/setup-host.sh --nodes
	$(BIN)/sps-testbed preflight --raise-limits --beds 0 --nodes 0
	$(BIN)/sps-testbed build

# Only the tests on real nodes (tests/realnode).
realnode: testbed
	$(BIN)/pytest tests/realnode

# The main job on the embedded default: the real-node test bed (the pinned control plane,
# kubelets with containerd and runc, simulated GPUs), the chart installed with helm from
# the image the Dockerfile builds, a profile, a GPU move. (And `make test`'s tools: see
# test-tools.)
demo: setup controlplane testbed test-tools
	$(BIN)/sps-testbed demo

lint: setup
	$(MAKE) --no-print-directory lint-checks

# lint without the setup (what `make test` runs beside the bed's tests).
lint-checks:
	$(BIN)/ruff check operator sim tests bench testbed release
	$(BIN)/ruff format --check operator sim tests bench testbed release
	$(BIN)/mypy
	$(BIN)/mypy bench
	$(BIN)/mypy testbed/sps_testbed
	$(BIN)/mypy sim/sps_sim
	MYPYPATH=release $(BIN)/mypy -p sps_release

crds: setup
	$(BIN)/sps-operator crd > crds/sps.dev_spsprofiles.yaml
	$(BIN)/sps-operator crd --helm > charts/sps-operator/templates/crd-spsprofiles.yaml
	$(BIN)/sps-operator crd --docs > docs/api.md

unit: setup
	$(BIN)/pytest -m "not k8s and not e2e"

# Every test: lint and types, unit, simulator and profiler, control plane, real nodes,
# end to end. Two lanes at once (tests/run-all.sh): the tests on the real-node bed, and
# beside them lint and the rest (their log: .test-logs/other.log, printed at the end).
test: setup controlplane testbed test-tools
	SPS_TEST_BIN=$(BIN) bash tests/run-all.sh

# What only the tests use, built (or found in the cache) before the lanes start:
# kube-router's policy controller for the network-policy bed, promcheck for the chart's
# alert rules, Debian's Prometheus for the alert tests, the pinned cosign for the signing
# test, 0.1.0's operator image for the upgrade test, and the files of the plugin's pex lock
# for linux/amd64 (the krew archive test builds offline from them). Built on first use
# instead, under the lanes' load, kube-router took 20 min on a fresh machine and the bed
# waiting for it timed out, and cosign and 0.1.0's image cost `make test` two minutes.
# `make demo` builds them too: on a fresh machine the first command sets up what the
# second needs (in the first build's budget), so `make test` spends its 15 min testing.
test-tools: setup testbed
	bash testbed/recipes/build-kube-router.sh > /dev/null
	$(BIN)/python tests/ship/promcheck.py > /dev/null
	$(BIN)/python tests/promserver.py > /dev/null
	bash release/build-cosign.sh > /dev/null
	$(BIN)/sps-testbed build --past-releases > /dev/null
	bash release/build-plugin.sh --fetch linux_amd64

# The release (docs/release.md): wheel, sdist, the image as an amd64+arm64 OCI index, the
# chart pinned to it, SBOMs and SHA256SUMS into dist/, from a clean tree (ALLOW_DIRTY=1
# to build from uncommitted changes). Nothing is pushed: `make publish` does that.
release: setup release-host
	bash release/release.sh
dist: release

# Pins the image's Python dependencies with hashes into requirements/ (from pyproject.toml;
# the Dockerfile installs them with --require-hashes). After a change of the dependencies.
lock:
	PYTHON=$(BIN)/python bash release/lock.sh

# The pinned cosign (release/cosign/go.mod), built from the Go module proxy into the cache.
cosign:
	bash release/build-cosign.sh

# buildah, skopeo, mmdebstrap, qemu-user-static and its binfmt_misc handler (root).
release-host:
	bash release/setup-host.sh

# Pushes dist/ (the image index and the chart) to REGISTRY=host[:port], trusting CA=path:
# <REGISTRY>/sps-dev/sps-operator:<version> and oci://<REGISTRY>/charts/sps-operator
# (IMAGE_REPO, CHART_REPO override them; docs/release.md), signed with cosign and the key
# COSIGN_KEY (password COSIGN_PASSWORD), SBOMs and provenance attested.
publish:
	REGISTRY=$(REGISTRY) CA=$(CA) bash release/publish.sh

# What `make test` leaves out for its budget: `make release` measured, and the images
# checked (every ELF file of each architecture's image is of that CPU; `sps-operator
# --version` runs in the arm64 image under qemu).
release-check: release
	$(BIN)/python bench/release_check.py --no-build

clean:
	rm -rf $(VENV) build dist *.egg-info
