#!/usr/bin/env bash
# Builds Kueue's manager (sigs.k8s.io/kueue/cmd/kueue, pinned in kueue/go.mod) and renders
# its config/default into kueue.yaml (build-addon.sh). The test bed runs the manager as a
# Deployment in kueue-system from an image made of this binary (testbed/images/build.sh),
# installed from kueue.yaml (sps_testbed.kueue). Re-running is a no-op when cached.
# Usage: build-kueue.sh [CACHE_DIR]   (prints the directory: manager, kueue.yaml, version)
# KUBECTL: the kubectl that renders config/ (default: kubectl on PATH).
set -euo pipefail
# shellcheck source=testbed/recipes/build-addon.sh
. "$(dirname "$0")/build-addon.sh"
build_addon kueue sigs.k8s.io/kueue sigs.k8s.io/kueue/cmd/kueue \
  "${1:-${SPS_KUEUE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sps-operator/kueue}}"
