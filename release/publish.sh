#!/usr/bin/env bash
# `make publish REGISTRY=host[:port] [CA=ca.crt]`: pushes what `make release` put in dist/
# (docs/release.md), after checking dist/ against its SHA256SUMS:
#   the image index  -> <REGISTRY>/sps-dev/sps-operator:<version>  (skopeo, digests kept,
#                       then read back: the registry must serve the digest the chart pins)
#   the chart        -> oci://<REGISTRY>/charts/sps-operator, version <version>  (helm push)
# IMAGE_REPO and CHART_REPO override those two places (ghcr.io wants its owner first:
# CHART_REPO=oci://ghcr.io/sps-dev/charts). Credentials, if the registry wants them: REGISTRY_USER and REGISTRY_PASSWORD (CI: the
# forge's token). PLAIN_HTTP=1 only for a registry on loopback without TLS.
# Signing (cosign, key-based, no transparency log; docs/release.md "Signatures"), beside
# each artifact in its repository: the index and each platform's manifest signed, each
# architecture's SBOM attested (spdxjson) on its manifest and on the index, the build
# provenance (slsaprovenance1) on the index, the chart signed.
#   COSIGN_KEY       the private key: a file from `cosign generate-key-pair`, or any key
#                    reference cosign takes (env://VAR, a KMS URI)
#   COSIGN_PASSWORD  its password (cosign reads it from the environment)
#   SIGN=0           publish unsigned (a test registry only; a release is always signed)
# COSIGN (default: the pinned build, release/build-cosign.sh, built when missing).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
registry=${REGISTRY:-}
[ -n "$registry" ] || { echo "sps-publish: set REGISTRY=host[:port], e.g. ghcr.io or the test bed's \$SPS_TESTBED_REGISTRY" >&2; exit 2; }
dist=${DIST:-$repo/dist}
py=${PYTHON:-$repo/.venv/bin/python}
rel() { PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$py" -m sps_release "$@"; }
helm=$(rel helm)
rel verify "$dist"
sign=${SIGN:-1}
if [ "$sign" != 0 ]; then
  [ -n "${COSIGN_KEY:-}" ] || { echo "sps-publish: set COSIGN_KEY (the signing key, docs/release.md) or SIGN=0 for an unsigned test publish" >&2; exit 2; }
  cosign=${COSIGN:-$(bash "$here/build-cosign.sh")}
fi
shopt -s nullglob
charts=("$dist"/sps-operator-*.tgz)
[ ${#charts[@]} -eq 1 ] || { echo "sps-publish: want one chart in $dist, found ${#charts[@]}: run 'make release'" >&2; exit 1; }
version=$(basename "${charts[0]}" .tgz)
version=${version#sps-operator-}
oci="$dist/sps-operator-$version.oci.tar"
digest=$(cat "$dist/sps-operator-$version.index-digest")
image="${IMAGE_REPO:-$registry/sps-dev/sps-operator}:$version"
chart_repo=${CHART_REPO:-oci://$registry/charts}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# skopeo copy takes --dest-* options, skopeo inspect the same without the prefix.
tls=() helm_tls=() cosign_tls=()
if [ "${PLAIN_HTTP:-0}" = 1 ]; then
  tls=(tls-verify=false) helm_tls=(--plain-http) cosign_tls=(--allow-http-registry)
elif [ -n "${CA:-}" ]; then
  mkdir "$tmp/certs" && cp "$CA" "$tmp/certs/ca.crt"
  tls=(cert-dir="$tmp/certs") helm_tls=(--ca-file "$CA") cosign_tls=(--registry-cacert "$CA")
fi
creds=()
export HELM_REGISTRY_CONFIG="$tmp/helm-registry.json"
# cosign reads credentials where docker keeps them: a config of its own, removed at exit.
export DOCKER_CONFIG="$tmp/docker"
if [ -n "${REGISTRY_USER:-}" ]; then
  creds=(creds="$REGISTRY_USER:${REGISTRY_PASSWORD:?REGISTRY_PASSWORD with REGISTRY_USER}")
  printf '%s' "$REGISTRY_PASSWORD" | "$helm" registry login "$registry" "${helm_tls[@]}" \
    --username "$REGISTRY_USER" --password-stdin
  if [ "$sign" != 0 ]; then
    printf '%s' "$REGISTRY_PASSWORD" | "$cosign" login "$registry" \
      --username "$REGISTRY_USER" --password-stdin
  fi
fi
# Key-based and offline: nothing goes to Rekor (the public transparency log) or Fulcio.
cosign_run() { "$cosign" "$@" "${cosign_tls[@]}"; }
sign_opts=(--key "${COSIGN_KEY:-}" --tlog-upload=false --yes)

echo "==== $image ($digest)" >&2
opts=("${tls[@]}" "${creds[@]}")
copy_opts=("${opts[@]/#/--dest-}") inspect_opts=("${opts[@]/#/--}")
skopeo copy --quiet --all --preserve-digests "${copy_opts[@]}" \
  "oci-archive:$oci:$version" "docker://$image"
served=$(skopeo inspect --raw "${inspect_opts[@]}" "docker://$image" | sha256sum | cut -d' ' -f1)
served="sha256:$served"
if [ "$served" != "$digest" ]; then
  echo "sps-publish: $image is served as $served, but the chart pins $digest" >&2
  exit 1
fi
echo "==== $chart_repo/sps-operator $version" >&2
"$helm" push "${charts[0]}" "$chart_repo" "${helm_tls[@]}" 2>&1 | tee "$tmp/helm-push.log" >&2
chart_digest=$(grep -oE '^Digest: sha256:[0-9a-f]{64}' "$tmp/helm-push.log" | cut -d' ' -f2)
[ -n "$chart_digest" ] || { echo "sps-publish: helm push printed no digest" >&2; exit 1; }
if [ "$sign" = 0 ]; then
  echo "published UNSIGNED (SIGN=0) $image@$digest and $chart_repo/sps-operator:$version@$chart_digest"
  exit 0
fi

image_repo=${image%:*}
echo "==== signing $image_repo@$digest, its platforms, and the chart" >&2
cosign_run sign "${sign_opts[@]}" --recursive "$image_repo@$digest"
chart_ref="${chart_repo#oci://}/sps-operator@$chart_digest"
cosign_run sign "${sign_opts[@]}" "$chart_ref"
sboms=("$dist"/sps-operator-"$version"-linux-*.spdx.json)
arches=()
for sbom in "${sboms[@]}"; do
  arch=${sbom##*-linux-}
  arches+=("${arch%.spdx.json}")
done
provenance="$dist/sps-operator-$version.provenance.json"
if [ ${#arches[@]} -eq 0 ] || [ ! -f "$provenance" ]; then
  echo "sps-publish: $dist has no SBOM or no provenance to attest: run 'make release'" >&2
  exit 1
fi
skopeo inspect --raw "${inspect_opts[@]}" "docker://$image_repo@$digest" > "$tmp/index.json"
# One architecture's SBOM on its own manifest (what a node runs) and on the index (what
# the chart pins, so a policy checking the pod's image finds it).
rel platforms "$tmp/index.json" --arches "${arches[@]}" > "$tmp/platforms"
while read -r arch manifest <&3; do
  sbom="$dist/sps-operator-$version-linux-$arch.spdx.json"
  for subject in "$image_repo@$manifest" "$image_repo@$digest"; do
    cosign_run attest "${sign_opts[@]}" --type spdxjson --predicate "$sbom" "$subject"
  done
done 3< "$tmp/platforms"
cosign_run attest "${sign_opts[@]}" --type slsaprovenance1 --predicate "$provenance" \
  "$image_repo@$digest"
echo "published $image@$digest and $chart_repo/sps-operator:$version@$chart_digest, signed (${#arches[@]} SBOMs attested)"
