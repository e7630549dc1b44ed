#!/usr/bin/env bash
# Installs the host packages the tests need (iproute2 for pod network namespaces).
# --nodes: also what the real-node test bed needs (sps_testbed): runc, the CNI
# plugins, iptables and conntrack (kube-proxy), ipset (kube-router's network policy
# controller, `sps-testbed up --with network-policies`), mmdebstrap and buildah (images), skopeo
# (pushes them into the bed's registry), and package lists that offer `prometheus` (the
# monitoring test's server: tests/promserver.py downloads and unpacks it, never installs it).
set -euo pipefail
missing=()
command -v ip >/dev/null || missing+=(iproute2)
command -v unshare >/dev/null || missing+=(util-linux)
command -v nsenter >/dev/null || missing+=(util-linux)
if [ "${1:-}" = "--nodes" ]; then
  PATH=$PATH:/usr/sbin:/sbin
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] || [ -x /opt/cni/bin/bridge ] || missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v conntrack >/dev/null || missing+=(conntrack)
  command -v ipset >/dev/null || missing+=(ipset)
  command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
  command -v buildah >/dev/null || missing+=(buildah)
  command -v skopeo >/dev/null || missing+=(skopeo)
  command -v flock >/dev/null || missing+=(util-linux)
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then echo "need root to install: ${missing[*]}" >&2; exit 1; fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
if [ "${1:-}" = "--nodes" ] && ! apt-cache show prometheus >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then echo "need root to update the package lists (prometheus)" >&2; exit 1; fi
  apt-get update -qq
fi
