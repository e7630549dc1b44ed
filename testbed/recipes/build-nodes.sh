#!/usr/bin/env bash
# Builds the real nodes' binaries from the Go module proxy into a cache outside the
# repo, keyed by version: kubelet and kube-proxy (the k8s.io/kubernetes pinned in
# go.mod, like the control plane), CoreDNS (coredns/go.mod, a small plugin set), the
# simulated-GPU device plugin and the pod sandbox's pause (nodetools/, keyed by a
# hash of their sources). containerd, runc and the CNI plugins come from Debian
# (setup-host.sh --nodes). Re-running is a no-op when cached.
# Usage: build-nodes.sh [CACHE_DIR]   (prints the bin directory on stdout)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pin() { grep -oE "^(require )?[[:space:]]*$1 v[^ ]+" "$2" | head -n1 | awk '{print $NF}'; }
K8S_VERSION=$(pin k8s.io/kubernetes "$here/go.mod")
COREDNS_VERSION=$(pin github.com/coredns/coredns "$here/coredns/go.mod")
TOOLS_HASH=$(cd "$here/nodetools" && find . -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' \) -print0 \
  | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)
cache=${1:-${SPS_NODES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sps-operator/nodes}}
bin="$cache/k8s-$K8S_VERSION-coredns-$COREDNS_VERSION-tools-$TOOLS_HASH"
mkdir -p "$bin"
export GOFLAGS=-mod=mod CGO_ENABLED=0
# Two cores are shared: stay polite unless told otherwise.
nice=(nice -n "${SPS_BUILD_NICE:-10}")
minor=$(echo "$K8S_VERSION" | cut -d. -f2)
vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=$K8S_VERSION -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean"
need=()
for b in kubelet kube-proxy; do
  [ -x "$bin/$b" ] || need+=("k8s.io/kubernetes/cmd/$b")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "building ${need[*]} ($K8S_VERSION) into $bin" >&2
  (cd "$here" && "${nice[@]}" go build -trimpath -ldflags "$ldflags" -o "$bin/" "${need[@]}")
fi
if [ ! -x "$bin/coredns" ]; then
  echo "building coredns $COREDNS_VERSION into $bin" >&2
  cv=github.com/coredns/coredns/coremain
  (cd "$here/coredns" && "${nice[@]}" go build -trimpath -ldflags "-s -w -X $cv.GitCommit=$COREDNS_VERSION" -o "$bin/coredns" .)
fi
if [ ! -x "$bin/sps-gpu-device-plugin" ] || [ ! -x "$bin/pause" ]; then
  echo "building sps-gpu-device-plugin and pause ($TOOLS_HASH) into $bin" >&2
  (cd "$here/nodetools" && "${nice[@]}" go build -trimpath -ldflags "-s -w" -o "$bin/sps-gpu-device-plugin" ./gpu-device-plugin \
    && "${nice[@]}" go build -trimpath -ldflags "-s -w" -o "$bin/pause" ./pause)
fi
echo "$bin"
