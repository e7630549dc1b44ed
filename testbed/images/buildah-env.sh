# Sourced by every script that builds images (testbed/images/lib.sh for the bed's,
# release/release.sh and release/build-image.sh for the release's), so that they share
# one image cache (${SPS_IMAGES_CACHE:-~/.cache/sps-operator/images}) and with it the
# base and dependency layers: buildah's storage and configuration there, taken under the
# cache's lock (fd 9) so that two builds never run at once, and the helpers they use.
# Needs `repo` (the checkout) for hash_files.
cache=${SPS_IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sps-operator/images}
mkdir -p "$cache/containers"
if [ -z "${SPS_IMAGES_LOCKED:-}" ]; then  # a script run by a holder has the lock (fd 9)
  exec 9>"$cache/.lock"
  flock 9
  export SPS_IMAGES_LOCKED=1
fi
# buildah's own configuration, not the host's: runc with cgroupfs (crun cannot run on
# hybrid cgroups), no default ulimits (the hard RLIMIT_NOFILE may be below podman's).
export CONTAINERS_CONF="$cache/containers/containers.conf" CONTAINERS_STORAGE_CONF="$cache/containers/storage.conf"
cat > "$CONTAINERS_CONF" <<CONF
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
CONF
cat > "$CONTAINERS_STORAGE_CONF" <<CONF
[storage]
driver = "overlay"
graphroot = "$cache/containers/storage"
runroot = "${SPS_IMAGES_RUNROOT:-/run/sps-testbed-buildah-$(printf %s "$cache" | sha256sum | cut -c1-8)}"
CONF
nice=(nice -n "${SPS_BUILD_NICE:-10}")
hash_files() { (cd "$repo" && find "$@" -type f ! -path '*/__pycache__/*' ! -path '*.egg-info/*' -print0 \
  | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16); }
hash_str() { printf '%s' "$*" | sha256sum | cut -c1-16; }
# A file's sha256 (its first 16 hex digits), remembered under the cache by its path, size,
# modification time and inode: every bed's start hashed the 50-90 MB binaries (CoreDNS,
# Kueue's and LeaderWorkerSet's managers) again, ~1.5 CPU-s a bed and ~25 a `make test`.
file_hash() {
  local memo
  memo="$cache/file-hashes/$(printf '%s %s' "$1" "$(stat -c '%s %.9Y %i' "$1")" | sha256sum | cut -c1-32)"
  if [ ! -s "$memo" ]; then
    mkdir -p "$cache/file-hashes"
    sha256sum < "$1" | cut -c1-16 > "$memo.$$" && mv -f "$memo.$$" "$memo"
  fi
  cat "$memo"
}
have() { buildah inspect --type image "$1" >/dev/null 2>&1; }
