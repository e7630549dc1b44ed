#!/usr/bin/env bash
# The krew archives of `kubectl sps` (plugins/krew/sps.yaml) into DIST, one per platform:
#   kubectl-sps_v<version>_<os>_<arch>.tar.gz   kubectl-sps (a pex: the plugin's wheel and
#       its dependencies from requirements/plugin.txt, hashes checked, with the compiled
#       ones (pydantic-core) for that platform and CPython 3.11 to 3.13) and LICENSE
#   sps.yaml   the krew manifest, each archive's URL and sha256 filled in
# The wheel must be in DIST already (`make release` builds it first). pex (pinned below)
# runs from a venv in the cache and downloads the foreign platforms' wheels from PyPI.
# Usage: build-plugin.sh DIST VERSION [OS_ARCH...]   (default: every platform of the manifest)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
dist=${1:?usage: build-plugin.sh DIST VERSION [OS_ARCH...]}
version=${2:?version}
shift 2
platforms=("$@") manifest=0
# The manifest only when every platform it names is built.
[ ${#platforms[@]} -gt 0 ] || { platforms=(linux_amd64 linux_arm64 darwin_amd64 darwin_arm64); manifest=1; }
PEX=2.105.2
py=${PYTHON:-$repo/.venv/bin/python}
rel() { PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$py" -m sps_release "$@"; }
pex_env=${XDG_CACHE_HOME:-$HOME/.cache}/sps-operator/pex-$PEX
if [ ! -x "$pex_env/bin/pex" ]; then
  rm -rf "$pex_env"
  "$py" -m venv "$pex_env"
  "$pex_env/bin/pip" install -q "pex==$PEX" || { rm -rf "$pex_env"; exit 1; }
fi
wheel=$(ls "$dist"/sps_operator-"$version"-py3-none-any.whl)
tag=v$version
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The lock and the plugin's own wheel: pip checks every hash (--require-hashes mode).
{ cat "$repo/requirements/plugin.txt"
  echo "$wheel --hash=sha256:$(sha256sum "$wheel" | cut -d' ' -f1)"; } > "$tmp/requirements.txt"
for platform in "${platforms[@]}"; do
  system=${platform%_*} arch=${platform#*_}
  case "$system/$arch" in
    linux/amd64) tags=(manylinux2014_x86_64) ;;
    linux/arm64) tags=(manylinux2014_aarch64) ;;
    darwin/amd64) tags=(macosx_10_12_x86_64) ;;
    darwin/arm64) tags=(macosx_11_0_arm64) ;;
    *) echo "build-plugin: no such platform: $platform" >&2; exit 2 ;;
  esac
  targets=()
  for minor in 11 12 13; do targets+=(--platform "${tags[0]}-cp-3$minor-cp3$minor"); done
  mkdir -p "$tmp/$platform"
  # The machine's own wheel directory stays out: the archive holds PyPI's files only.
  env -u PIP_FIND_LINKS "$pex_env/bin/pex" --requirement "$tmp/requirements.txt" \
    "${targets[@]}" --entry-point sps_operator.plugin.cli:main \
    --python-shebang "/usr/bin/env python3" --output-file "$tmp/$platform/kubectl-sps"
  cp "$repo/LICENSE" "$tmp/$platform/LICENSE"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@${SOURCE_DATE_EPOCH:-0}" \
    -C "$tmp/$platform" -czf "$dist/kubectl-sps_${tag}_${system}_${arch}.tar.gz" kubectl-sps LICENSE
done
[ "$manifest" = 0 ] || rel krew-manifest "$dist" --tag "$tag" --out "$dist/sps.yaml"
