# Sourced by build.sh and build-operator-at.sh: the image cache and its lock, buildah's
# own configuration, the helpers, and the Debian base every Python image is built FROM
# (`ensure_base` sets base_key and base_ref).
cache=${SPS_IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sps-operator/images}
mkdir -p "$cache/containers"
exec 9>"$cache/.lock"
flock 9
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
have() { buildah inspect --type image "$1" >/dev/null 2>&1; }
export_image() {  # ref archive
  [ -s "$2" ] && return 0
  buildah push -q "$1" "oci-archive:$2.tmp:$1" && mv "$2.tmp" "$2"
}

ensure_base() {
  # shellcheck source=testbed/images/base.sh
  . "$(dirname "${BASH_SOURCE[0]}")/base.sh"
  base_key=$(hash_str "$base_recipe")
  base_ref="localhost/sps-testbed/base:$base_key"
  if ! have "$base_ref"; then
    tar="$cache/base-$base_key.tar"
    if [ ! -s "$tar" ]; then
      echo "mmdebstrap: Debian bookworm base ($base_key)" >&2
      "${nice[@]}" mmdebstrap --quiet "${base_opts[@]}" --format=tar --include="$base_pkgs" bookworm "$tar.tmp" >&2
      mv "$tar.tmp" "$tar"
    fi
    c=$(buildah from scratch)
    buildah add "$c" "$tar" / >/dev/null
    # Debian marks its Python externally managed; the image installs the wheels system-wide.
    buildah config --env PIP_BREAK_SYSTEM_PACKAGES=1 --cmd python3 "$c"
    buildah commit -q --rm "$c" "$base_ref" >/dev/null
  fi
}
