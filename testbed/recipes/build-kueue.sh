#!/usr/bin/env bash
# Builds Kueue's manager (sigs.k8s.io/kueue/cmd/kueue, pinned in kueue/go.mod) from the Go
# module proxy into a cache outside the repo, keyed by version, and renders the same
# module's config/default (CRDs, RBAC, webhooks, the manager's Deployment and ConfigMap)
# with `kubectl kustomize`. The test bed runs the manager as a Deployment in kueue-system
# from an image made of this binary (testbed/images/build.sh), installed from kueue.yaml
# (sps_testbed.kueue). Re-running is a no-op when cached.
# Usage: build-kueue.sh [CACHE_DIR]   (prints the directory: manager, kueue.yaml, version)
# KUBECTL: the kubectl that renders config/ (default: kubectl on PATH).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pin() { grep -oE "^(require )?[[:space:]]*$1 v[^ ]+" "$2" | head -n1 | awk '{print $NF}'; }
KUEUE_VERSION=$(pin sigs.k8s.io/kueue "$here/kueue/go.mod")
cache=${1:-${SPS_KUEUE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sps-operator/kueue}}
out="$cache/kueue-$KUEUE_VERSION"
mkdir -p "$out"
export GOFLAGS=-mod=mod CGO_ENABLED=0
nice=(nice -n "${SPS_BUILD_NICE:-10}")
if [ ! -x "$out/manager" ]; then
  echo "building kueue $KUEUE_VERSION into $out" >&2
  vpkg=sigs.k8s.io/kueue/pkg/version
  (cd "$here/kueue" && "${nice[@]}" go build -trimpath \
    -ldflags "-s -w -X '$vpkg.GitVersion=$KUEUE_VERSION'" -o "$out/manager.tmp" sigs.k8s.io/kueue/cmd/kueue)
  mv "$out/manager.tmp" "$out/manager"
fi
if [ ! -s "$out/kueue.yaml" ]; then
  src=$(cd "$here/kueue" && go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$src/config/default" ] || { echo "no config/default in $src" >&2; exit 1; }
  echo "rendering $src/config/default into $out/kueue.yaml" >&2
  "${KUBECTL:-kubectl}" kustomize "$src/config/default" > "$out/kueue.yaml.tmp"
  mv "$out/kueue.yaml.tmp" "$out/kueue.yaml"
fi
echo "$KUEUE_VERSION" > "$out/version"
echo "$out"
