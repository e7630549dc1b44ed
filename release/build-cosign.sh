#!/usr/bin/env bash
# Builds cosign (github.com/sigstore/cosign/v2/cmd/cosign, pinned in cosign/go.mod and
# go.sum) from the Go module proxy into a cache outside the repo, keyed by version: what
# `make release` signs with and the tests verify with. No internet beyond the proxy at
# build time, none at all when signing (key-based, no transparency log: docs/release.md).
# Re-running is a no-op when cached. Usage: build-cosign.sh   (prints the binary's path)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(grep -oE '^require github.com/sigstore/cosign/v2 v[^ ]+' "$here/cosign/go.mod" | awk '{print $NF}')
[ -n "$version" ] || { echo "build-cosign: no cosign pin in $here/cosign/go.mod" >&2; exit 1; }
cache=${SPS_COSIGN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sps-operator/cosign}
out="$cache/cosign-$version"
if [ ! -x "$out/cosign" ]; then
  mkdir -p "$out"
  exec 9>"$out/.lock"
  flock 9  # one build at a time; the others then find it
  if [ ! -x "$out/cosign" ]; then
    command -v go > /dev/null || { echo "build-cosign: needs Go 1.26 (as the control plane)" >&2; exit 1; }
    echo "building cosign $version into $out" >&2
    vpkg=sigs.k8s.io/release-utils/version
    (cd "$here/cosign" && GOFLAGS=-mod=readonly CGO_ENABLED=0 nice -n "${SPS_BUILD_NICE:-10}" \
      go build -trimpath -ldflags "-s -w -X $vpkg.gitVersion=$version" \
      -o "$out/cosign.tmp" github.com/sigstore/cosign/v2/cmd/cosign)
    mv "$out/cosign.tmp" "$out/cosign"
  fi
fi
echo "$out/cosign"
