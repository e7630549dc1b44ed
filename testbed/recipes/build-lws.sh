#!/usr/bin/env bash
# Builds LeaderWorkerSet's manager (sigs.k8s.io/lws/cmd, pinned in lws/go.mod) from the Go
# module proxy into a cache outside the repo, keyed by version, and renders the same
# module's config/default (CRDs, RBAC, webhooks, the manager's Deployment and ConfigMap)
# with `kubectl kustomize`. The test bed runs the manager as a Deployment in lws-system
# from an image made of this binary (testbed/images/build.sh), installed from lws.yaml
# (sps_testbed.lws), as it does Kueue's (build-kueue.sh). Re-running is a no-op when cached.
# Usage: build-lws.sh [CACHE_DIR]   (prints the directory: manager, lws.yaml, version)
# KUBECTL: the kubectl that renders config/ (default: kubectl on PATH).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pin() { grep -oE "^(require )?[[:space:]]*$1 v[^ ]+" "$2" | head -n1 | awk '{print $NF}'; }
LWS_VERSION=$(pin sigs.k8s.io/lws "$here/lws/go.mod")
cache=${1:-${SPS_LWS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sps-operator/lws}}
out="$cache/lws-$LWS_VERSION"
mkdir -p "$out"
export GOFLAGS=-mod=mod CGO_ENABLED=0
nice=(nice -n "${SPS_BUILD_NICE:-10}")
if [ ! -x "$out/manager" ]; then
  echo "building lws $LWS_VERSION into $out" >&2
  vpkg=sigs.k8s.io/lws/pkg/version
  (cd "$here/lws" && "${nice[@]}" go build -trimpath \
    -ldflags "-s -w -X '$vpkg.GitVersion=$LWS_VERSION'" -o "$out/manager.tmp" sigs.k8s.io/lws/cmd)
  mv "$out/manager.tmp" "$out/manager"
fi
if [ ! -s "$out/lws.yaml" ]; then
  src=$(cd "$here/lws" && go mod download -json "sigs.k8s.io/lws@$LWS_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$src/config/default" ] || { echo "no config/default in $src" >&2; exit 1; }
  echo "rendering $src/config/default into $out/lws.yaml" >&2
  "${KUBECTL:-kubectl}" kustomize "$src/config/default" > "$out/lws.yaml.tmp"
  mv "$out/lws.yaml.tmp" "$out/lws.yaml"
fi
echo "$LWS_VERSION" > "$out/version"
echo "$out"
