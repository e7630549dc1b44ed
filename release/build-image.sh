#!/usr/bin/env bash
# The operator image for every architecture of the release, as ONE OCI image index in an
# oci-archive (docs/release.md):
#   base     mmdebstrap: Debian bookworm minbase + python3, pip, ca-certificates, per
#            architecture (the same base the test bed builds for amd64, shared with it)
#   image    the project's Dockerfile, `buildah bud --platform linux/<arch>` FROM that base;
#            a foreign architecture's RUN steps run under qemu-user-static through
#            binfmt_misc (release/setup-host.sh registers it)
#   index    `buildah manifest` of the per-architecture images, pushed with --all
# Buildah's storage is the test bed's image cache (${SPS_IMAGES_CACHE:-~/.cache/sps-operator/
# images}), under its lock, so the amd64 base and dependency layers are built once for both.
# Usage: build-image.sh OUT.oci.tar VERSION REVISION [ARCH...]   (default: amd64 arm64)
# Prints "<arch> <image id>" per architecture on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
out=${1:?usage: build-image.sh OUT.oci.tar VERSION REVISION [ARCH...]}
version=${2:?version}
revision=${3:?revision}
shift 3
arches=("$@")
[ ${#arches[@]} -gt 0 ] || arches=(amd64 arm64)
# shellcheck source=testbed/images/buildah-env.sh
. "$repo/testbed/images/buildah-env.sh"  # cache, lock, buildah's configuration, helpers
host_arch=$(dpkg --print-architecture)

. "$repo/testbed/images/base.sh"  # base_pkgs, base_opts, base_recipe
list="localhost/sps-release/sps-operator-index:$version"
buildah manifest rm "$list" >/dev/null 2>&1 || true
buildah manifest create "$list" >/dev/null
for arch in "${arches[@]}"; do
  if [ "$arch" != "$host_arch" ] && [ ! -e "/proc/sys/fs/binfmt_misc/qemu-$(case $arch in arm64) echo aarch64;; *) echo "$arch";; esac)" ]; then
    echo "no binfmt_misc handler for $arch: run 'bash release/setup-host.sh' (qemu-user-static)" >&2
    exit 3
  fi
  # The host's key is the test bed's (testbed/images/build.sh), so they share the base.
  if [ "$arch" = "$host_arch" ]; then key=$(hash_str "$base_recipe")
  else key=$(hash_str "$base_recipe $arch"); fi
  base_ref="localhost/sps-testbed/base:$key"
  [ "$arch" = "$host_arch" ] || base_ref="localhost/sps-release/base-$arch:$key"
  if ! have "$base_ref"; then
    tar="$cache/base-$key.tar"
    if [ ! -s "$tar" ]; then
      echo "mmdebstrap: Debian bookworm base, $arch ($key)" >&2
      "${nice[@]}" mmdebstrap --quiet "${base_opts[@]}" --architectures="$arch" --format=tar \
        --include="$base_pkgs" bookworm "$tar.tmp" >&2
      mv "$tar.tmp" "$tar"
    fi
    c=$(buildah from --arch "$arch" scratch)
    buildah add "$c" "$tar" / >/dev/null
    # Debian marks its Python externally managed; the image installs the wheels system-wide.
    buildah config --os linux --arch "$arch" --env PIP_BREAK_SYSTEM_PACKAGES=1 --cmd python3 "$c"
    buildah commit -q --rm "$c" "$base_ref" >/dev/null
  fi
  image_ref="localhost/sps-release/sps-operator:$version-$arch"
  deps_ref="localhost/sps-release/operator-deps-$arch:$(hash_str "$key $(hash_files Dockerfile requirements)")"
  echo "buildah: sps-operator $version linux/$arch from Dockerfile" >&2
  # pip inside the build reaches PyPI through the host's CA bundle. The dependencies'
  # stage is tagged, so that the test bed's prune of untagged images keeps it.
  bud=("${nice[@]}" buildah bud --quiet --isolation=chroot --network=host --layers
    --platform "linux/$arch"
    -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro
    --build-arg PYTHON_IMAGE="$base_ref" -f "$repo/Dockerfile")
  have "$deps_ref" || "${bud[@]}" --target deps -t "$deps_ref" "$repo" >&2
  "${bud[@]}" --build-arg VERSION="$version" --build-arg REVISION="$revision" \
    -t "$image_ref" "$repo" >&2
  got=$(buildah inspect --type image --format '{{.OCIv1.Architecture}}' "$image_ref")
  if [ "$got" != "$arch" ]; then
    echo "$image_ref is for $got, not $arch" >&2
    exit 1
  fi
  buildah manifest add "$list" "containers-storage:$image_ref" >/dev/null
  echo "$arch $(buildah inspect --type image --format '{{.FromImageID}}' "$image_ref")"
done
rm -f "$out" "$out.tmp"
buildah manifest push --quiet --all --format oci "$list" "oci-archive:$out.tmp:$version" >&2
mv "$out.tmp" "$out"
