#!/usr/bin/env bash
# Builds the operator image of another checkout of this repository (a past release's tree,
# e.g. `git archive <commit>` unpacked) the way the bed built it at that commit: its own
# Dockerfile FROM the bed's Debian base, one `buildah bud`. The image is tagged
# ghcr.io/sps-dev/sps-operator:<its appVersion>-<commit> (a past release may carry the
# version the current tree still has) and exported once to
# ${SPS_IMAGES_CACHE:-~/.cache/sps-operator/images}/operator-at-<commit>.tar, which
# build.sh's prune leaves alone; nothing is rebuilt when it is there.
# Usage: build-operator-at.sh TREE COMMIT   (prints "REF ARCHIVE")
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "${1:?usage: build-operator-at.sh TREE COMMIT}" && pwd)
commit=${2:?usage: build-operator-at.sh TREE COMMIT}
[ -f "$repo/Dockerfile" ] || { echo "$repo has no Dockerfile" >&2; exit 2; }
# shellcheck source=testbed/images/lib.sh
source "$here/lib.sh"

app_version=$(awk '/^appVersion:/ {gsub(/"/, "", $2); print $2}' "$repo/charts/sps-operator/Chart.yaml")
ref="ghcr.io/sps-dev/sps-operator:$app_version-${commit:0:12}"
tar="$cache/operator-at-${commit:0:12}.tar"
if [ ! -s "$tar" ]; then
  ensure_base
  echo "buildah: $ref from $repo/Dockerfile" >&2
  # pip inside the build reaches PyPI through the host's CA bundle (the old Dockerfile
  # resolves its dependencies there, as it did then).
  "${nice[@]}" buildah bud --quiet --isolation=chroot --network=host --layers=false \
    -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
    --build-arg PYTHON_IMAGE="$base_ref" --build-arg VERSION="$app_version" \
    --build-arg REVISION="${commit:0:12}" -t "$ref" -f "$repo/Dockerfile" "$repo" >&2
  export_image "$ref" "$tar"
fi
echo "$ref $tar"
