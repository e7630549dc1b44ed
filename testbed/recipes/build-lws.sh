#!/usr/bin/env bash
# Builds LeaderWorkerSet's manager (sigs.k8s.io/lws/cmd, pinned in lws/go.mod) and renders
# its config/default into lws.yaml (build-addon.sh). The test bed runs the manager as a
# Deployment in lws-system from an image made of this binary (testbed/images/build.sh),
# installed from lws.yaml (sps_testbed.lws). Re-running is a no-op when cached.
# Usage: build-lws.sh [CACHE_DIR]   (prints the directory: manager, lws.yaml, version)
# KUBECTL: the kubectl that renders config/ (default: kubectl on PATH).
set -euo pipefail
# shellcheck source=testbed/recipes/build-addon.sh
. "$(dirname "$0")/build-addon.sh"
build_addon lws sigs.k8s.io/lws sigs.k8s.io/lws/cmd \
  "${1:-${SPS_LWS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sps-operator/lws}}"
