"""Configuration of the node agent: its nodes, its pod network, where pods find the API server."""

from __future__ import annotations

import argparse
import base64
import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

DEFAULT_POD_CIDR = "10.244.250.0/24"
DEFAULT_GPUS = 8
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class ConfigError(ValueError):
    """A flag or file given to the node agent is invalid."""


@dataclass(frozen=True)
class NodeSpec:
    """One simulated GPU node: its name, GPU product label value and GPU count."""

    name: str
    gpu_product: str
    gpus: int = DEFAULT_GPUS


def parse_node_spec(text: str) -> NodeSpec:
    """Parse `NAME=PRODUCT[:GPUS]`, e.g. `gpu-h100-0=NVIDIA-H100-80GB-HBM3:8`."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise ConfigError(f"--node {text!r}: expected NAME=PRODUCT[:GPUS]")
    if not _NODE_NAME.match(name) or len(name) > 63:
        raise ConfigError(
            f"--node {text!r}: {name!r} is not a valid node name (DNS-1123 subdomain)"
        )
    product, gpus = rest, DEFAULT_GPUS
    head, colon, tail = rest.rpartition(":")
    if colon:
        if not tail.isdigit():
            raise ConfigError(f"--node {text!r}: GPU count {tail!r} is not a whole number")
        product, gpus = head, int(tail)
    if not product or any(c.isspace() for c in product):
        raise ConfigError(f"--node {text!r}: GPU product must be a non-empty label value")
    return NodeSpec(name=name, gpu_product=product, gpus=gpus)


@dataclass(frozen=True)
class PodNetworkConfig:
    """The /24 (or any IPv4 subnet) pods get addresses from; the host bridge holds the gateway."""

    cidr: str
    gateway: str

    @property
    def index(self) -> int:
        """Short number naming host interfaces (third octet), so two agents never collide."""
        return int(ipaddress.ip_network(self.cidr).network_address.packed[2])

    @property
    def prefixlen(self) -> int:
        return ipaddress.ip_network(self.cidr).prefixlen

    def pod_addresses(self) -> list[str]:
        """Addresses free for pods: every host address except the gateway."""
        net = ipaddress.ip_network(self.cidr)
        return [str(a) for a in net.hosts() if str(a) != self.gateway]


def pod_network(cidr: str, gateway: str | None) -> PodNetworkConfig:
    try:
        net = ipaddress.ip_network(cidr)
    except ValueError as exc:
        raise ConfigError(f"--pod-cidr {cidr!r}: {exc}") from None
    if net.version != 4 or net.prefixlen > 29:
        raise ConfigError(f"--pod-cidr {cidr!r}: need an IPv4 subnet of /29 or larger")
    gw = gateway or str(net.network_address + 1)
    if ipaddress.ip_address(gw) not in net:
        raise ConfigError(f"--gateway {gw} is not inside --pod-cidr {cidr}")
    return PodNetworkConfig(cidr=str(net), gateway=gw)


@dataclass(frozen=True)
class KubeconfigInfo:
    server: str
    ca_pem: bytes | None


def read_kubeconfig(path: Path) -> KubeconfigInfo:
    """The current context's server URL and CA (inline or file) from a kubeconfig."""
    try:
        doc: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"--kubeconfig {path}: {exc}") from None
    contexts = {c["name"]: c.get("context", {}) for c in doc.get("contexts") or []}
    clusters = {c["name"]: c.get("cluster", {}) for c in doc.get("clusters") or []}
    context = contexts.get(doc.get("current-context", ""), {})
    cluster = clusters.get(context.get("cluster", ""))
    if cluster is None:
        if len(clusters) != 1:
            raise ConfigError(f"--kubeconfig {path}: no current context naming a cluster")
        cluster = next(iter(clusters.values()))
    server = cluster.get("server")
    if not server:
        raise ConfigError(f"--kubeconfig {path}: the cluster has no server")
    ca: bytes | None = None
    if cluster.get("certificate-authority-data"):
        ca = base64.b64decode(cluster["certificate-authority-data"])
    elif cluster.get("certificate-authority"):
        ca_path = Path(cluster["certificate-authority"])
        if not ca_path.is_absolute():
            ca_path = path.parent / ca_path
        ca = ca_path.read_bytes()
    return KubeconfigInfo(server=server, ca_pem=ca)


@dataclass(frozen=True)
class AgentConfig:
    kubeconfig: Path
    state_dir: Path
    nodes: tuple[NodeSpec, ...]
    network: PodNetworkConfig
    api_server_host: str
    api_server_port: int
    ca_pem: bytes
    image_map: Path | None = None
    sim_time_scale: float | None = None
    sim_seed: int | None = None
    # Restart backoff: kubelet uses 10 s doubling to 300 s; tests want seconds.
    backoff_base_seconds: float = 1.0
    backoff_cap_seconds: float = 20.0
    extra_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_argv(cls, argv: list[str]) -> AgentConfig:
        return cls.from_args(build_parser().parse_args(argv))

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AgentConfig:
        if not args.node:
            raise ConfigError("give at least one --node NAME=PRODUCT[:GPUS]")
        nodes = tuple(parse_node_spec(n) for n in args.node)
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            raise ConfigError(f"--node names must be unique, got {names}")
        kubeconfig = Path(args.kubeconfig)
        info = read_kubeconfig(kubeconfig)
        network = pod_network(args.pod_cidr, args.gateway)
        port = args.api_server_port or urlsplit(info.server).port or 443
        if args.ca_file:
            try:
                ca = Path(args.ca_file).read_bytes()
            except OSError as exc:
                raise ConfigError(f"--ca-file: {exc}") from None
        elif info.ca_pem is not None:
            ca = info.ca_pem
        else:
            raise ConfigError("no CA: give --ca-file or a kubeconfig with a certificate authority")
        scale = args.sim_time_scale
        if scale is None and os.environ.get("SPS_NODE_AGENT_SIM_TIME_SCALE"):
            scale = float(os.environ["SPS_NODE_AGENT_SIM_TIME_SCALE"])
        if scale is not None and scale <= 0:
            raise ConfigError(f"--sim-time-scale must be > 0, got {scale}")
        return cls(
            kubeconfig=kubeconfig,
            state_dir=Path(args.state_dir),
            nodes=nodes,
            network=network,
            api_server_host=args.api_server_host or network.gateway,
            api_server_port=int(port),
            ca_pem=ca,
            image_map=Path(args.image_map) if args.image_map else None,
            sim_time_scale=scale,
            sim_seed=args.sim_seed,
            backoff_base_seconds=args.backoff_base,
            backoff_cap_seconds=args.backoff_cap,
        )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sps-operator node-agent",
        description="Kubelet stand-in: registers simulated GPU nodes and runs their pods "
        "as local processes, each pod in its own network and mount namespace.",
    )
    p.add_argument("--kubeconfig", required=True, help="admin kubeconfig of the cluster")
    p.add_argument("--state-dir", required=True, help="pod volumes, logs and the ready file")
    p.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="NAME=PRODUCT[:GPUS]",
        help=f"a simulated GPU node (repeatable; GPUS defaults to {DEFAULT_GPUS})",
    )
    p.add_argument("--pod-cidr", default=DEFAULT_POD_CIDR, help="subnet for pod IPs")
    p.add_argument("--gateway", help="host address on the pod bridge (default: first address)")
    p.add_argument("--api-server-host", help="API server address pods use (default: gateway)")
    p.add_argument("--api-server-port", type=int, help="default: the kubeconfig server's port")
    p.add_argument("--ca-file", help="CA pods trust (default: the kubeconfig's CA)")
    p.add_argument("--image-map", help="YAML/JSON file of image rules, tried before the built-in")
    p.add_argument(
        "--sim-time-scale",
        type=float,
        help="SPS_SIM_TIME_SCALE for simulated SGLang servers "
        "(env SPS_NODE_AGENT_SIM_TIME_SCALE; default: real time)",
    )
    p.add_argument("--sim-seed", type=int, help="SPS_SIM_SEED for simulated SGLang servers")
    p.add_argument("--backoff-base", type=float, default=1.0, help="restart backoff start (s)")
    p.add_argument("--backoff-cap", type=float, default=20.0, help="restart backoff cap (s)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p
