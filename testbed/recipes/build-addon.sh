# Sourced by build-kueue.sh and build-lws.sh: builds an add-on's manager (a Go command of
# the module pinned in <dir>/go.mod) from the Go module proxy into a cache outside the
# repo, keyed by version, and renders the same module's config/default (CRDs, RBAC,
# webhooks, the manager's Deployment and ConfigMap) with `kubectl kustomize` into
# <dir>.yaml. Re-running is a no-op when cached. Prints the directory (manager,
# <dir>.yaml, version).
# build_addon DIR MODULE PACKAGE CACHE   e.g. build_addon kueue sigs.k8s.io/kueue
#   sigs.k8s.io/kueue/cmd/kueue "$cache"   (the version is set in MODULE/pkg/version)
# KUBECTL: the kubectl that renders config/ (default: kubectl on PATH).
build_addon() {
  local name=$1 module=$2 package=$3 cache=$4 here version out src
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  version=$(grep -oE "^(require )?[[:space:]]*$module v[^ ]+" "$here/$name/go.mod" \
    | head -n1 | awk '{print $NF}')
  out="$cache/$name-$version"
  mkdir -p "$out"
  export GOFLAGS=-mod=mod CGO_ENABLED=0
  if [ ! -x "$out/manager" ]; then
    echo "building $name $version into $out" >&2
    (cd "$here/$name" && nice -n "${SPS_BUILD_NICE:-10}" go build -trimpath \
      -ldflags "-s -w -X '$module/pkg/version.GitVersion=$version'" -o "$out/manager.tmp" "$package")
    mv "$out/manager.tmp" "$out/manager"
  fi
  if [ ! -s "$out/$name.yaml" ]; then
    src=$(cd "$here/$name" && go mod download -json "$module@$version" \
      | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -d "$src/config/default" ] || { echo "no config/default in $src" >&2; exit 1; }
    echo "rendering $src/config/default into $out/$name.yaml" >&2
    "${KUBECTL:-kubectl}" kustomize "$src/config/default" > "$out/$name.yaml.tmp"
    mv "$out/$name.yaml.tmp" "$out/$name.yaml"
  fi
  echo "$version" > "$out/version"
  echo "$out"
}
