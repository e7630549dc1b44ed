# Sourced: buildah's storage and configuration of the test bed's image cache
# (${SPS_IMAGES_CACHE:-~/.cache/sps-operator/images}, as testbed/images/build.sh sets them:
# runc with cgroupfs, no default ulimits), taken under the cache's lock (fd 9) so the
# release and the bed share base and dependency layers without building at once.
cache=${SPS_IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sps-operator/images}
mkdir -p "$cache/containers"
if [ -z "${SPS_IMAGES_LOCKED:-}" ]; then  # a script sourced by a holder has the lock
  exec 9>"$cache/.lock"
  flock 9
  export SPS_IMAGES_LOCKED=1
fi
export CONTAINERS_CONF="$cache/containers/containers.conf" CONTAINERS_STORAGE_CONF="$cache/containers/storage.conf"
[ -s "$CONTAINERS_CONF" ] || cat > "$CONTAINERS_CONF" <<CONF
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
CONF
[ -s "$CONTAINERS_STORAGE_CONF" ] || cat > "$CONTAINERS_STORAGE_CONF" <<CONF
[storage]
driver = "overlay"
graphroot = "$cache/containers/storage"
runroot = "${SPS_IMAGES_RUNROOT:-/run/sps-testbed-buildah-$(printf %s "$cache" | sha256sum | cut -c1-8)}"
CONF
