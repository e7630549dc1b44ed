#!/usr/bin/env bash
# Builds the CNCF Distribution registry (github.com/distribution/distribution/v3, pinned in
# registry/go.mod; registry/main.go links only the filesystem driver) from the Go module
# proxy into a cache outside the repo, keyed by version and a hash of the main and go.sum.
# The test bed serves every image its nodes pull from it (sps_testbed.registry).
# Re-running is a no-op when cached.
# Usage: build-registry.sh [CACHE_DIR]   (prints the directory: registry, version)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pin() { grep -oE "^(require )?[[:space:]]*$1 v[^ ]+" "$2" | head -n1 | awk '{print $NF}'; }
VERSION=$(pin github.com/distribution/distribution/v3 "$here/registry/go.mod")
HASH=$(cat "$here/registry/main.go" "$here/registry/go.sum" | sha256sum | cut -c1-12)
cache=${1:-${SPS_REGISTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sps-operator/registry}}
out="$cache/distribution-$VERSION-$HASH"
mkdir -p "$out"
export GOFLAGS=-mod=mod CGO_ENABLED=0
nice=(nice -n "${SPS_BUILD_NICE:-10}")
if [ ! -x "$out/registry" ]; then
  echo "building distribution registry $VERSION into $out" >&2
  vpkg=github.com/distribution/distribution/v3/version
  (cd "$here/registry" && "${nice[@]}" go build -trimpath \
    -ldflags "-s -w -X $vpkg.version=$VERSION" -o "$out/registry.tmp" .)
  mv "$out/registry.tmp" "$out/registry"
fi
echo "$VERSION" > "$out/version"
echo "$out"
