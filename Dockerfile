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

# ---- stage 1: build the wheel and the wheels of every dependency --------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
RUN pip wheel --wheel-dir /wheels ".[operator]"

# ---- stage 2: runtime, installed from the wheels only ------------------------------
FROM ${PYTHON_IMAGE} AS runtime
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
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib
COPY --from=build /wheels /wheels
RUN pip install --no-index --find-links /wheels "sps-operator[operator]" \
    && rm -rf /wheels \
    && sps-operator --help >/dev/null \
    && sps-profiler --help >/dev/null \
    && kubectl-sps --help >/dev/null
# A numeric UID so Kubernetes can verify runAsNonRoot without a passwd lookup.
RUN groupadd --gid 65532 sps && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin sps
USER 65532:65532
WORKDIR /tmp
# kopf liveness endpoint and Prometheus metrics (see charts/sps-operator/values.yaml).
EXPOSE 8080 9090
ENTRYPOINT ["sps-operator"]
CMD ["run"]
