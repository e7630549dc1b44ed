#!/usr/bin/env bash
# `make release` (docs/release.md): every artifact of the version in pyproject.toml into
# dist/, nothing pushed (`make publish` pushes from dist/).
#   sps_operator-<v>.tar.gz, sps_operator-<v>-py3-none-any.whl   sdist, and the wheel from it
#   sps-operator-<v>.oci.tar        the image: OCI index of linux/amd64 + linux/arm64
#   sps-operator-<v>.tgz            the chart, image.digest pinned to that index
#   sps-operator-<v>-linux-<arch>.spdx.json   SBOM per architecture (Debian + Python)
#   sps-operator-<v>.index-digest   the index's digest (sha256:...)
#   sps-operator-<v>.provenance.json  SLSA v1 provenance predicate (`make publish` attests it)
#   kubectl-sps_v<v>_<os>_<arch>.tar.gz, sps.yaml   the krew archives (pex) and manifest
#   SHA256SUMS                      over every file above
# Environment: ALLOW_DIRTY=1 builds from uncommitted changes (not a release);
# RELEASE_TAG=v<v> (CI) must match the version; RELEASE_ARCHES (default "amd64 arm64");
# DIST (default dist); PYTHON (default .venv/bin/python); HELM (default: the pinned build
# of testbed/recipes, built when missing).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"
py=${PYTHON:-$repo/.venv/bin/python}
rel() { PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$py" -m sps_release "$@"; }
dist=${DIST:-$repo/dist}
read -r -a arches <<< "${RELEASE_ARCHES:-amd64 arm64}"
dirty=()
[ "${ALLOW_DIRTY:-0}" = 1 ] && dirty=(--allow-dirty)
started=$SECONDS
step() { echo "==== $* ($((SECONDS - started)) s)" >&2; }

version=$(rel check "${dirty[@]}" ${RELEASE_TAG:+--tag "$RELEASE_TAG"})
revision=$(git rev-parse --short HEAD)
# Timestamps from the commit, not the clock: wheel and sdist entries, the SBOM's date.
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
export SOURCE_DATE_EPOCH
helm=$(rel helm)

rm -rf "$dist"
mkdir -p "$dist"
step "python: sdist and wheel $version"
rel python-dists "${dirty[@]}" "$dist" >&2

step "kubectl sps: krew archives (pex) and manifest"
bash "$here/build-plugin.sh" "$dist" "$version" >&2

step "image: ${arches[*]}"
oci="$dist/sps-operator-$version.oci.tar"
# Under the image cache's lock for the build and for reading the images back.
. "$repo/testbed/images/buildah-env.sh"
bash "$here/build-image.sh" "$oci" "$version" "$revision" "${arches[@]}" >&2
index="$(mktemp -d)/index.json"
trap 'rm -rf "$(dirname "$index")"' EXIT
skopeo inspect --raw "oci-archive:$oci:$version" > "$index"
digest="sha256:$(sha256sum < "$index" | cut -d' ' -f1)"
echo "$digest" > "$dist/sps-operator-$version.index-digest"

step "SBOM per architecture"
for arch in "${arches[@]}"; do
  c=$(buildah from --pull=never --platform "linux/$arch" "localhost/sps-release/sps-operator:$version-$arch")
  rootfs=$(buildah mount "$c")
  rc=0
  rel sbom "$rootfs" --index "$index" --arch "$arch" --arches "${arches[@]}" \
    --version "$version" --out "$dist/sps-operator-$version-linux-$arch.spdx.json" || rc=$?
  buildah umount "$c" >/dev/null
  buildah rm "$c" >/dev/null
  [ "$rc" -eq 0 ] || exit "$rc"
done

step "chart, image pinned to $digest"
rel chart "$dist" --digest "$digest" --helm "$helm" >&2

step "provenance"
rel provenance "$dist" --version "$version" --arches "${arches[@]}" \
  --out "$dist/sps-operator-$version.provenance.json"

rel checksums "$dist"
step "done: $dist"
(cd "$dist" && ls -l) >&2
