#!/usr/bin/env bash
# Installs the host packages the tests need (iproute2 for pod network namespaces).
set -euo pipefail
missing=()
command -v ip >/dev/null || missing+=(iproute2)
command -v unshare >/dev/null || missing+=(util-linux)
command -v nsenter >/dev/null || missing+=(util-linux)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then echo "need root to install: ${missing[*]}" >&2; exit 1; fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
