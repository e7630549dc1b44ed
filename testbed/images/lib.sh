# Sourced by build.sh and build-operator-at.sh: the image cache and its lock, buildah's
# own configuration and the helpers (buildah-env.sh, shared with the release), and the
# Debian base every Python image is built FROM (`ensure_base` sets base_key and base_ref).
# shellcheck source=testbed/images/buildah-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/buildah-env.sh"
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
