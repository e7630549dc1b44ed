# syntax=docker/dockerfile:1
# One image runs the operator (`sps-operator run`), the profiler inside profiling Jobs
# (`sps-profiler`) and the kubectl plugin (`kubectl-sps`). The simulator (sim/, `sps-sim`)
# is not in it: testbed/images/sglang builds an SGLang stand-in image on top of it.
#
#   docker build -t ghcr.io/sps-dev/sps-operator:0.1.0 .
#
# The base is pinned by exact tag; pin it by digest too in your registry mirror
# (`python:3.11.13-slim-bookworm@sha256:...`) to make the build fully reproducible.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# ---- stage 1: the wheels of every dependency, from the lock alone ------------------
# requirements/image.txt pins every dependency with the SHA-256 of its files (`make lock`,
# from pyproject.toml), so two builds of one commit install the same files and a changed
# file on the index fails the build. No source yet: a change under operator/ leaves this
# stage cached (docker, `buildah bud --layers`), so only the thin layers below build again.
FROM ${PYTHON_IMAGE} AS deps
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements/image.txt requirements/build.txt ./
RUN pip wheel --require-hashes --no-deps --wheel-dir /wheels -r image.txt \
    && pip install --require-hashes --no-deps -r build.txt
# --ignore-installed: build.txt's packages are in this stage already, not in the runtime's.
# Compiled here for the paths they run from (-s/-p: tracebacks show their source), by hash
# (unchecked: the image's files never change; a COPY need not keep their mtimes).
RUN pip install --no-index --no-deps --ignore-installed --no-compile --root /staging /wheels/*.whl \
    && python3 -m compileall -q --invalidation-mode unchecked-hash -s /staging -p / /staging

# ---- stage 2: the operator's own wheel ------------------------------------------------
FROM deps AS build
COPY pyproject.toml README.md ./
COPY operator/ operator/
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /dist .

# ---- stage 3: runtime, installed from the wheels only --------------------------------
# Ordered from what changes least to what changes most: the dependencies, the user, the
# operator, then the labels (the revision changes with every commit).
FROM ${PYTHON_IMAGE} AS runtime
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# Exactly the wheels of the lock, checked there; `pip check` below finds one missing.
# Installed in the deps stage under /staging (the paths they get in this base) and
# copied once: copying the wheels here would leave them (~60 MB) in a layer of their own
# under the installed files, pulled and unpacked with the image. (buildah 1.28, the test
# bed's builder, cannot bind-mount from a stage: `RUN --mount=...,from=deps` sees nothing.)
COPY --from=deps /staging /
# A numeric UID so Kubernetes can verify runAsNonRoot without a passwd lookup.
RUN groupadd --gid 65532 sps && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin sps
# `pip check`: nothing the operator needs is missing from the dependencies' layer.
COPY --from=build /dist /dist
RUN pip install --no-index --no-deps /dist/*.whl \
    && rm -rf /dist \
    && pip check \
    && sps-operator --help >/dev/null \
    && sps-profiler --help >/dev/null \
    && kubectl-sps --help >/dev/null
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="sps-operator" \
      org.opencontainers.image.description="Kubernetes operator that keeps SGLang DSpark SPS cost tables current (operator, profiler, kubectl plugin)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/sps-dev/sps-operator" \
      org.opencontainers.image.url="https://github.com/sps-dev/sps-operator" \
      org.opencontainers.image.documentation="https://github.com/sps-dev/sps-operator#readme" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="sps-dev"
USER 65532:65532
WORKDIR /tmp
# kopf liveness endpoint and Prometheus metrics (see charts/sps-operator/values.yaml).
EXPOSE 8080 9090
ENTRYPOINT ["sps-operator"]
CMD ["run"]
