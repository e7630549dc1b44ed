#!/usr/bin/env bash
# Builds the pinned control-plane binaries from the Go module proxy into a
# cache outside the repo, keyed by version. Re-running is a no-op when cached.
# Usage: build.sh [CACHE_DIR]   (prints the bin directory on stdout)
# KUBEBUILDER_ASSETS (envtest convention): binaries found there are not built.
# SPS_CONTROLPLANE_ONLY="kube-controller-manager kube-scheduler" builds only those.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pin() { grep -oE "^(require )?[[:space:]]*$1 v[^ ]+" "$2" | head -n1 | awk '{print $NF}'; }
K8S_VERSION=$(pin k8s.io/kubernetes "$here/go.mod")
ETCD_VERSION=$(pin go.etcd.io/etcd/server/v3 "$here/etcd/go.mod")
HELM_VERSION=$(pin helm.sh/helm/v3 "$here/helm/go.mod")
cache=${1:-${SPS_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sps-operator/controlplane}}
bin="$cache/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-helm-$HELM_VERSION"
mkdir -p "$bin"
export GOFLAGS=-mod=mod CGO_ENABLED=0
minor=$(echo "$K8S_VERSION" | cut -d. -f2)
vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=$K8S_VERSION -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean"
ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
only=" ${SPS_CONTROLPLANE_ONLY:-etcd kube-apiserver kube-controller-manager kube-scheduler kubectl helm} "
wanted() {
  [[ "$only" == *" $1 "* ]] || return 1
  [ -z "${KUBEBUILDER_ASSETS:-}" ] || [ ! -x "$KUBEBUILDER_ASSETS/$1" ]
}
need=()
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  wanted "$b" || continue
  [ -x "$bin/$b" ] || need+=("k8s.io/kubernetes/cmd/$b")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "building ${need[*]} ($K8S_VERSION) into $bin" >&2
  (cd "$here" && go build -trimpath -ldflags "$ldflags" -o "$bin/" "${need[@]}")
fi
if wanted etcd && [ ! -x "$bin/etcd" ]; then
  echo "building etcd $ETCD_VERSION into $bin" >&2
  (cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3)
fi
if wanted helm && [ ! -x "$bin/helm" ]; then
  echo "building helm $HELM_VERSION into $bin" >&2
  hv=helm.sh/helm/v3/internal/version
  (cd "$here/helm" && go build -trimpath -ldflags "-s -w -X $hv.version=$HELM_VERSION" -o "$bin/helm" helm.sh/helm/v3/cmd/helm)
fi
echo "$bin"
