#!/usr/bin/env bash
# Builds containerd 2.x (github.com/containerd/containerd/v2, pinned in containerd/go.mod):
# the daemon, its runc shim (containerd-shim-runc-v2) and ctr, from the Go module proxy
# into a cache outside the repo, keyed by version. The test bed's nodes run it instead of
# Debian's containerd 1.6 (runc and the CNI plugins stay Debian's). Static (CGO off): the
# btrfs, devmapper and zfs snapshotters, which need C libraries, are left out; the bed
# uses overlayfs. Re-running is a no-op when cached.
# Usage: build-containerd.sh [CACHE_DIR]   (prints the bin directory on stdout)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pin() { grep -oE "^(require )?[[:space:]]*$1 v[^ ]+" "$2" | head -n1 | awk '{print $NF}'; }
VERSION=$(pin github.com/containerd/containerd/v2 "$here/containerd/go.mod")
cache=${1:-${SPS_CONTAINERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sps-operator/containerd}}
bin="$cache/containerd-$VERSION"
mkdir -p "$bin"
export GOFLAGS=-mod=mod CGO_ENABLED=0
nice=(nice -n "${SPS_BUILD_NICE:-10}")
need=()
for b in containerd containerd-shim-runc-v2 ctr; do
  [ -x "$bin/$b" ] || need+=("github.com/containerd/containerd/v2/cmd/$b")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "building ${need[*]} ($VERSION) into $bin" >&2
  vpkg=github.com/containerd/containerd/v2/version
  (cd "$here/containerd" && "${nice[@]}" go build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
    -ldflags "-s -w -X $vpkg.Version=$VERSION -X $vpkg.Package=github.com/containerd/containerd/v2" \
    -o "$bin/" "${need[@]}")
fi
echo "$bin"
