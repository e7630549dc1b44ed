#!/usr/bin/env bash
# `make publish REGISTRY=host[:port] [CA=ca.crt]`: pushes what `make release` put in dist/
# (docs/release.md), after checking dist/ against its SHA256SUMS:
#   the image index  -> <REGISTRY>/sps-dev/sps-operator:<version>  (skopeo, digests kept,
#                       then read back: the registry must serve the digest the chart pins)
#   the chart        -> oci://<REGISTRY>/charts/sps-operator, version <version>  (helm push)
# IMAGE_REPO and CHART_REPO override those two places (ghcr.io wants its owner first:
# CHART_REPO=oci://ghcr.io/sps-dev/charts). Credentials, if the registry wants them: REGISTRY_USER and REGISTRY_PASSWORD (CI: the
# forge's token). PLAIN_HTTP=1 only for a registry on loopback without TLS.
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
tls=() helm_tls=()
if [ "${PLAIN_HTTP:-0}" = 1 ]; then
  tls=(tls-verify=false) helm_tls=(--plain-http)
elif [ -n "${CA:-}" ]; then
  mkdir "$tmp/certs" && cp "$CA" "$tmp/certs/ca.crt"
  tls=(cert-dir="$tmp/certs") helm_tls=(--ca-file "$CA")
fi
creds=()
export HELM_REGISTRY_CONFIG="$tmp/helm-registry.json"
if [ -n "${REGISTRY_USER:-}" ]; then
  creds=(creds="$REGISTRY_USER:${REGISTRY_PASSWORD:?REGISTRY_PASSWORD with REGISTRY_USER}")
  printf '%s' "$REGISTRY_PASSWORD" | "$helm" registry login "$registry" "${helm_tls[@]}" \
    --username "$REGISTRY_USER" --password-stdin
fi

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
"$helm" push "${charts[0]}" "$chart_repo" "${helm_tls[@]}"
echo "published $image@$digest and $chart_repo/sps-operator:$version"
