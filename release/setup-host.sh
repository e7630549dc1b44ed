#!/usr/bin/env bash
# What `make release` needs on a Debian 12 host besides the venv: buildah, skopeo,
# mmdebstrap, and qemu-user-static with its binfmt_misc handler for each foreign
# architecture (the arm64 image's RUN steps run under qemu-aarch64; docs/release.md).
# Idempotent; needs root (apt-get, mounting binfmt_misc, registering a handler).
set -euo pipefail
need=()
for tool in buildah:buildah skopeo:skopeo mmdebstrap:mmdebstrap qemu-aarch64-static:qemu-user-static; do
  command -v "${tool%%:*}" >/dev/null || need+=("${tool#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi
binfmt=/proc/sys/fs/binfmt_misc
[ -e "$binfmt/register" ] || mount -t binfmt_misc binfmt_misc "$binfmt"
# Debian's handler definition; its F flag opens the interpreter now, so it also works
# inside the build's chroot, which has no qemu of its own.
[ -e "$binfmt/qemu-aarch64" ] || cat /usr/lib/binfmt.d/qemu-aarch64.conf > "$binfmt/register"
grep -qx enabled "$binfmt/qemu-aarch64"
echo "release host ready: qemu-aarch64 $(sed -n 's/^interpreter //p' "$binfmt/qemu-aarch64")"
