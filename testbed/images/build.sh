#!/usr/bin/env bash
# Builds the test bed's container images from the repo's own files, with no registry:
#   base       mmdebstrap (Debian bookworm minbase + python3, pip; base.sh) imported into buildah
#   operator   the project's Dockerfile, FROM that base (ghcr.io/sps-dev/sps-operator:<appVersion>)
#   sglang     testbed/images/sglang/Containerfile FROM the operator image, with the
#              simulator from sim/ (lmsysorg/sglang:<tag>)
#   pause      the pod sandbox (registry.k8s.io/pause:3.10) from nodetools/pause
#   coredns    cluster DNS from the CoreDNS built by build-nodes.sh
#   kueue      Kueue's manager built by build-kueue.sh (registry.k8s.io/kueue/kueue:<version>)
#   lws        LeaderWorkerSet's manager built by build-lws.sh (registry.k8s.io/lws/lws:<version>)
# Each is exported as an OCI archive named by a hash of its inputs, under
# ${SPS_IMAGES_CACHE:-~/.cache/sps-operator/images}; nothing is rebuilt when cached.
# Usage: build.sh NODE_BIN_DIR KUEUE_DIR LWS_DIR   (prints the path of a JSON manifest {ref: archive})
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
nodebin=${1:?usage: build.sh NODE_BIN_DIR KUEUE_DIR LWS_DIR}
kueuedir=${2:?usage: build.sh NODE_BIN_DIR KUEUE_DIR LWS_DIR}
lwsdir=${3:?usage: build.sh NODE_BIN_DIR KUEUE_DIR LWS_DIR}
# shellcheck source=testbed/images/lib.sh
source "$here/lib.sh"

app_version=$(awk '/^appVersion:/ {gsub(/"/, "", $2); print $2}' "$repo/charts/sps-operator/Chart.yaml")
operator_ref="ghcr.io/sps-dev/sps-operator:$app_version"
sglang_ref="docker.io/lmsysorg/sglang:${SPS_SGLANG_TAG:-v0.5.16}"
pause_ref="registry.k8s.io/pause:3.10"
coredns_version=$("$nodebin/coredns" -version 2>/dev/null | awk -F'[-]' '/CoreDNS/ {print $2; exit}')
coredns_ref="registry.k8s.io/coredns/coredns:v${coredns_version:-unknown}"
kueue_ref="registry.k8s.io/kueue/kueue:$(cat "$kueuedir/version")"
lws_ref="registry.k8s.io/lws/lws:$(cat "$lwsdir/version")"

ensure_base

# ---- operator: the project's Dockerfile ------------------------------------------
# With --layers: the Dockerfile installs the dependencies from the lock (requirements/) before it
# copies any source, so after a change under operator/ buildah reuses those layers from
# its storage and builds only the operator's own wheel and layer. The dependencies'
# stage is tagged by what it is built from, so that the prune at the end keeps it.
op_key=$(hash_str "$base_key $(hash_files Dockerfile pyproject.toml requirements README.md operator)")
op_tar="$cache/sps-operator-$op_key.tar"
deps_ref="localhost/sps-testbed/operator-deps:$(hash_str "$base_key $(hash_files Dockerfile requirements)")"
if [ ! -s "$op_tar" ]; then
  echo "buildah: $operator_ref from Dockerfile ($op_key)" >&2
  # pip inside the build reaches PyPI through the host's CA bundle.
  bud=("${nice[@]}" buildah bud --quiet --isolation=chroot --network=host --layers
    -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro
    --build-arg PYTHON_IMAGE="$base_ref" -f "$repo/Dockerfile")
  have "$deps_ref" || "${bud[@]}" --target deps -t "$deps_ref" "$repo" >&2
  "${bud[@]}" --build-arg VERSION="$app_version" \
    --build-arg REVISION="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    -t "$operator_ref" "$repo" >&2
  export_image "$operator_ref" "$op_tar"
fi

# ---- SGLang stand-in -------------------------------------------------------------
sg_key=$(hash_str "$op_key $(hash_files testbed/images/sglang sim/sps_sim)")
sg_tar="$cache/sglang-$sg_key.tar"
if [ ! -s "$sg_tar" ]; then
  have "$operator_ref" || buildah pull -q "oci-archive:$op_tar" >/dev/null
  echo "buildah: $sglang_ref ($sg_key)" >&2
  "${nice[@]}" buildah bud --quiet --isolation=chroot --network=host --layers=false \
    --build-arg OPERATOR_IMAGE="$operator_ref" -t "$sglang_ref" \
    -f "$here/sglang/Containerfile" "$repo/sim" >&2
  export_image "$sglang_ref" "$sg_tar"
fi

# ---- pause, coredns, kueue, lws: one static binary each ---------------------------------
scratch_image() {  # ref binary archive user
  [ -s "$3" ] && return 0
  c=$(buildah from scratch)
  buildah copy "$c" "$2" "/$(basename "$2")" >/dev/null
  buildah config --entrypoint "[\"/$(basename "$2")\"]" --user "$4" "$c"
  buildah commit -q --rm "$c" "$1" >/dev/null
  export_image "$1" "$3"
}
pause_tar="$cache/pause-$(file_hash "$nodebin/pause").tar"
scratch_image "$pause_ref" "$nodebin/pause" "$pause_tar" 65535:65535
coredns_tar="$cache/coredns-$(file_hash "$nodebin/coredns").tar"
scratch_image "$coredns_ref" "$nodebin/coredns" "$coredns_tar" 65532:65532
# Kueue's own image is distroless/static:nonroot with /manager; this is the same binary.
kueue_tar="$cache/kueue-$(file_hash "$kueuedir/manager").tar"
scratch_image "$kueue_ref" "$kueuedir/manager" "$kueue_tar" 65532:65532
# So is LeaderWorkerSet's (distroless/static:nonroot, /manager).
lws_tar="$cache/lws-$(file_hash "$lwsdir/manager").tar"
scratch_image "$lws_ref" "$lwsdir/manager" "$lws_tar" 65532:65532

# Every source change makes a new operator image: keep the newest few of each kind.
prune() { ls -1t "$cache"/$1-*.tar 2>/dev/null | tail -n +$(( ${SPS_IMAGES_KEEP:-4} + 1 )) | xargs -r rm -f; }
prune sps-operator; prune sglang
# The dependency stages of the newest few pyproject.toml/Dockerfile versions stay (other
# checkouts share this cache); then every image without a name goes, except the layers
# of the named ones.
buildah images --noheading --format '{{.CreatedAtRaw}}|{{.Name}}:{{.Tag}}' \
  | grep -F '|localhost/sps-testbed/operator-deps:' | sort -r | cut -d'|' -f2 \
  | tail -n +$(( ${SPS_IMAGES_KEEP:-4} + 1 )) | xargs -r buildah rmi >/dev/null 2>&1 || true
buildah rmi --prune >/dev/null 2>&1 || true

manifest="$cache/manifest-$(hash_str "$op_key $sg_key $pause_tar $coredns_tar $kueue_ref $kueue_tar $lws_ref $lws_tar").json"
cat > "$manifest" <<JSON
{
  "operator": {"ref": "$operator_ref", "archive": "$op_tar"},
  "sglang": {"ref": "$sglang_ref", "archive": "$sg_tar"},
  "pause": {"ref": "$pause_ref", "archive": "$pause_tar"},
  "coredns": {"ref": "$coredns_ref", "archive": "$coredns_tar"},
  "kueue": {"ref": "$kueue_ref", "archive": "$kueue_tar"},
  "lws": {"ref": "$lws_ref", "archive": "$lws_tar"}
}
JSON
echo "$manifest"
