#!/usr/bin/env bash
# The krew archives of `kubectl sps` (plugins/krew/sps.yaml), one per platform:
#   kubectl-sps_v<version>_<os>_<arch>.tar.gz   kubectl-sps (a pex: the plugin's wheel and
#       its dependencies as requirements/plugin.lock.json pins them, with the compiled ones
#       for that platform and CPython 3.11 to 3.13) and LICENSE
#   sps.yaml   the krew manifest, each archive's URL and sha256 filled in
# pex (pinned below) runs from a venv in the cache, its downloads in PEX_ROOT beside it.
#
#   build-plugin.sh DIST VERSION [OS_ARCH...]   the archives into DIST (the wheel must be
#       there already: `make release` builds it first); default every platform of the manifest.
#       No resolving: every file comes from the lock, by hash, from the cache when --fetch
#       put it there (then no network at all: the test builds in a network namespace).
#   build-plugin.sh --fetch [OS_ARCH...]   downloads the lock's files for those platforms
#       into the cache (`make test-tools` does it for linux_amd64).
#   build-plugin.sh --lock   requirements/plugin.lock.json from requirements/plugin.txt, for
#       every platform and CPython (`make lock` runs it; pex resolves from PyPI, minutes).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
PEX=2.105.2
# The pip pex resolves the lock with (pex's own 20.3.4 cannot read macOS universal2 wheels).
PIP=26.2.1
ALL=(linux_amd64 linux_arm64 darwin_amd64 darwin_arm64)
lock=$repo/requirements/plugin.lock.json
py=${PYTHON:-$repo/.venv/bin/python}
rel() { PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$py" -m sps_release "$@"; }
pex_env=${XDG_CACHE_HOME:-$HOME/.cache}/sps-operator/pex-$PEX
export PEX_ROOT=$pex_env/root
# The machine's own wheel directory stays out: the archive holds PyPI's files only.
unset PIP_FIND_LINKS PIP_EXTRA_INDEX_URL
if [ ! -x "$pex_env/bin/pex" ]; then
  rm -rf "$pex_env"
  "$py" -m venv "$pex_env"
  "$pex_env/bin/pip" install -q "pex==$PEX" || { rm -rf "$pex_env"; exit 1; }
fi

# --platform flags: the platform's wheel tag with CPython 3.11, 3.12 and 3.13.
targets() {
  local tag
  case "$1" in
    linux_amd64) tag=manylinux2014_x86_64 ;;
    linux_arm64) tag=manylinux2014_aarch64 ;;
    darwin_amd64) tag=macosx_10_15_x86_64 ;;  # PyYAML 6.0.4 needs macOS 10.15
    darwin_arm64) tag=macosx_11_0_arm64 ;;
  esac
  for minor in 11 12 13; do echo "--platform=$tag-cp-3$minor-cp3$minor"; done
}

# Every platform named must be one of the manifest's.
known() {
  local platform p
  for platform in "$@"; do
    for p in "${ALL[@]}"; do [ "$p" != "$platform" ] || continue 2; done
    echo "build-plugin: no such platform: $platform (one of: ${ALL[*]})" >&2
    exit 2
  done
}

case "${1:-}" in
  --lock)
    flags=()
    for platform in "${ALL[@]}"; do mapfile -t -O "${#flags[@]}" flags < <(targets "$platform"); done
    "$pex_env/bin/pex3" lock create --style strict --indent 1 --pip-version "$PIP" --no-build \
      "${flags[@]}" \
      --requirement "$repo/requirements/plugin.txt" --output "$lock"
    exit 0 ;;
  --fetch)
    shift
    [ $# -gt 0 ] || set -- "${ALL[@]}"
    known "$@"
    for platform in "$@"; do
      mapfile -t flags < <(targets "$platform")
      "$pex_env/bin/pex3" download --lock "$lock" "${flags[@]}" --dest-dir "$(mktemp -d)" > /dev/null
    done
    exit 0 ;;
esac

dist=${1:?usage: build-plugin.sh DIST VERSION [OS_ARCH...] | --fetch [OS_ARCH...] | --lock}
version=${2:?version}
shift 2
platforms=("$@") manifest=0
# The manifest only when every platform it names is built.
[ ${#platforms[@]} -gt 0 ] || { platforms=("${ALL[@]}"); manifest=1; }
known "${platforms[@]}"
wheel=$(ls "$dist"/sps_operator-"$version"-py3-none-any.whl)
tag=v$version
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for platform in "${platforms[@]}"; do
  mapfile -t flags < <(targets "$platform")
  mkdir -p "$tmp/$platform"
  # --project: the wheel's own requirements must be met by the lock, or pex refuses.
  "$pex_env/bin/pex" --lock "$lock" "${flags[@]}" --project "$wheel" \
    --entry-point sps_operator.plugin.cli:main \
    --python-shebang "/usr/bin/env python3" --output-file "$tmp/$platform/kubectl-sps"
  cp "$repo/LICENSE" "$tmp/$platform/LICENSE"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@${SOURCE_DATE_EPOCH:-0}" \
    -C "$tmp/$platform" -czf "$dist/kubectl-sps_${tag}_${platform%_*}_${platform#*_}.tar.gz" \
    kubectl-sps LICENSE
done
[ "$manifest" = 0 ] || rel krew-manifest "$dist" --tag "$tag" --out "$dist/sps.yaml"
