#!/usr/bin/env bash
# Builds kube-router (github.com/cloudnativelabs/kube-router/v2/cmd/kube-router, pinned in
# kube-router/go.mod) from the Go module proxy into a cache outside the repo, keyed by
# version. The test bed runs only its network policy controller (iptables + ipset), opt-in,
# to enforce NetworkPolicy: see docs/dev-cluster.md ("Network policy in the bed") for why this
# one and what the pin's advisories cover. Re-running is a no-op when cached.
# Usage: build-kube-router.sh [CACHE_DIR]   (prints the directory: kube-router, version)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pin() { grep -oE "^(require )?[[:space:]]*$1 v[^ ]+" "$2" | head -n1 | awk '{print $NF}'; }
KR_VERSION=$(pin github.com/cloudnativelabs/kube-router/v2 "$here/kube-router/go.mod")
cache=${1:-${SPS_KUBE_ROUTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sps-operator/kube-router}}
out="$cache/kube-router-$KR_VERSION"
mkdir -p "$out"
export GOFLAGS=-mod=mod CGO_ENABLED=0
nice=(nice -n "${SPS_BUILD_NICE:-10}")
if [ ! -x "$out/kube-router" ]; then
  echo "building kube-router $KR_VERSION into $out" >&2
  vpkg=github.com/cloudnativelabs/kube-router/v2/pkg/version
  (cd "$here/kube-router" && "${nice[@]}" go build -trimpath \
    -ldflags "-s -w -X '$vpkg.Version=$KR_VERSION'" -o "$out/kube-router.tmp" \
    github.com/cloudnativelabs/kube-router/v2/cmd/kube-router)
  mv "$out/kube-router.tmp" "$out/kube-router"
fi
echo "$KR_VERSION" > "$out/version"
echo "$out"
