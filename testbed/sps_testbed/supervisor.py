"""The process that owns one test bed: `python -m sps_testbed.supervisor --state-dir D`.

It reserves a bed id, creates the bed's network namespace and moves into it, starts the
control plane (sps_operator.devcluster.ControlPlane) there, the pod bridge, the registry
the nodes pull every image from (sps_testbed.registry; the chart is pushed there too), one
node runner per node (sps_testbed.node, each in its own mount namespace), kube-proxy, and
CoreDNS; then writes `D/bed.json` with status `ready` and waits for SIGTERM. Everything
it starts dies with it (parent-death signals), and a reaper process it starts first
removes what is left (containers, cgroups, the namespace) if it is killed outright.

Its input is `D/request.json` (nodes and artifacts), written by RealNodeCluster.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from string import Template
from typing import Any

import yaml

from sps_testbed import cgroups, netns, pki, registry
from sps_testbed import node as node_mod
from sps_testbed.controlplane import SERVICE_CLUSTER_IP_RANGE, ControlPlane, kubeconfig_yaml
from sps_testbed.lifecycle import run_until_signalled
from sps_testbed.node import NodeConfig
from sps_testbed.plan import BedRecord, NodeRecord, teardown
from sps_testbed.processes import log_tail, spawn, terminate_group

CLUSTER_DNS = "10.96.0.10"
BRIDGE = "tb0"
ADDONS = Path(__file__).parent / "addons"


def pod_ranges(cidr: str, nodes: int) -> list[tuple[str, str]]:
    """Each node's pod addresses: .32 up to the last host address, split evenly.

    .1 is the gateway (the API server's advertised address), .2 upward the nodes' own.
    """
    net = ipaddress.ip_network(cidr)
    first, last = 32, net.num_addresses - 2
    per = (last - first + 1) // max(nodes, 1)
    if nodes < 1 or per < 1 or nodes + 2 > first:
        raise ValueError(f"{nodes} nodes do not fit in {cidr}")
    base = net.network_address
    return [
        (str(base + first + i * per), str(base + first + (i + 1) * per - 1)) for i in range(nodes)
    ]


class Supervisor:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.request: dict[str, Any] = json.loads((state_dir / "request.json").read_text())
        self.record = BedRecord(state_dir=str(state_dir), supervisor_pid=os.getpid())
        self.cp: ControlPlane | None = None
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.reaper: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.t0 = time.monotonic()

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    def mark(self, what: str) -> None:
        self.record.timings[what] = round(time.monotonic() - self.t0, 2)
        self.record.save()

    # -- start -----------------------------------------------------------------
    def start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        self.record.save()
        net = netns.reserve(self.state_dir)
        self.record.bed_id = net.bed_id
        self.record.run_dir = f"/run/sps-testbed/{net.name}"
        self.record.save()
        self._start_reaper()
        netns.create(net)
        netns.enter(net)
        netns.set_sysctl("net.ipv4.ip_forward", "1")
        # Pod -> Service -> pod on the same bridge: replies must see the DNAT again.
        if Path("/proc/sys/net/bridge/bridge-nf-call-iptables").exists():
            netns.set_sysctl("net.bridge.bridge-nf-call-iptables", "1")
        self.mark("netns")

        self.cp = ControlPlane(
            self.state_dir / "cp",
            detached=False,
            apiserver_args=list(self.request.get("apiserver_args") or []),
        )
        self.cp.start()
        rec = self.cp.record
        assert rec is not None
        self.record.pod_network_index = rec.pod_network_index
        self.record.pod_cidr = rec.pod_cidr
        self.record.gateway = rec.gateway
        self.record.api_server_port = rec.api_server_port
        self.record.server = f"https://{rec.gateway}:{rec.api_server_port}"
        self.mark("control_plane")

        self._bridge(rec.pod_cidr, rec.gateway)
        self._host_route(net, rec.pod_cidr)
        kubeconfig = self.state_dir / "kubeconfig"
        pki_dir = self.state_dir / "cp" / "pki"
        kubeconfig.write_text(
            kubeconfig_yaml(
                self.record.server,
                pki_dir / "ca.crt",
                pki_dir / "admin.crt",
                pki_dir / "admin.key",
                "admin",
            )
        )
        kubeconfig.chmod(0o600)
        self.record.kubeconfig = str(kubeconfig)
        self.record.save()

        self._start_registry(rec.gateway, pki_dir)
        self.mark("registry_ready")
        self._start_nodes(rec.pod_cidr, rec.gateway)
        self._start_kube_proxy(rec.pod_cidr)
        self._wait("nodes Ready", self._nodes_ready, float(self.request.get("node_timeout", 240)))
        self.mark("nodes_ready")
        if self.request.get("kube_router"):
            # After the nodes: it looks its node up once, at start, and exits if it is absent.
            self._start_network_policy_controller()
            self.mark("network_policy_controller")
        self._start_coredns()
        self._wait("CoreDNS available", self._coredns_available, 120)
        self.mark("coredns_ready")
        self.record.status = "ready"
        self.record.save()

    def _start_reaper(self) -> None:
        # Started before anything else, in the host's namespaces and its own session, with
        # a pipe only this process holds: EOF means the supervisor is gone, however it went.
        self.reaper = subprocess.Popen(
            [sys.executable, "-m", "sps_testbed.reaper", str(self.state_dir)],
            stdin=subprocess.PIPE,
            stdout=open(self.logs / "reaper.log", "ab"),  # noqa: SIM115 - handed to the child
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.record.reaper_pid = self.reaper.pid
        self.record.save()

    def _bridge(self, cidr: str, gateway: str) -> None:
        net = ipaddress.ip_network(cidr)
        netns.ip("link", "add", BRIDGE, "type", "bridge")
        netns.ip("addr", "add", f"{gateway}/{net.prefixlen}", "dev", BRIDGE)
        for i, _ in enumerate(self.request["nodes"]):
            netns.ip("addr", "add", f"{net.network_address + 2 + i}/{net.prefixlen}", "dev", BRIDGE)
        netns.ip("link", "set", BRIDGE, "up")
        # The API server calls webhooks and aggregated APIs (Kueue's) at their Service's
        # ClusterIP, which kube-proxy's OUTPUT rules rewrite to a pod; the kernel only gets
        # that far with a route to the ClusterIP (a real host has its default route).
        netns.ip("route", "add", SERVICE_CLUSTER_IP_RANGE, "dev", BRIDGE)

    def _host_route(self, net: netns.BedNet, cidr: str) -> None:
        # Run in the host's namespace (the reaper's): the supervisor's own is the bed's by
        # now. `add`, not `replace`: a route someone else holds makes the bed fail, not theirs.
        host_ns = f"/proc/{self.record.reaper_pid}/ns/net"
        argv = ["nsenter", f"--net={host_ns}", "ip", "route", "add", cidr]
        argv += ["via", net.ns_ip, "dev", net.name]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")

    def _start_registry(self, gateway: str, cp_pki: Path) -> None:
        """The bed's registry on its gateway, serving a copy of the seed, with a certificate
        from the bed's CA; then the chart pushed into it (helm push)."""
        art = self.request["artifacts"]
        reg_dir = self.state_dir / "registry"
        trust = reg_dir / "trust"  # only the CA: a directory skopeo's --*-cert-dir can take
        trust.mkdir(parents=True, exist_ok=True)
        ca = trust / "ca.crt"
        ca.write_bytes((cp_pki / "ca.crt").read_bytes())
        tls = pki.issue_server(cp_pki / "ca.crt", cp_pki / "ca.key", reg_dir, "registry", [gateway])
        registry.clone_storage(Path(art["registry_seed"]), reg_dir / "storage")
        addr = f"{gateway}:{registry.PORT}"
        conf = reg_dir / "config.yml"
        conf.write_text(
            yaml.safe_dump(registry.config(reg_dir / "storage", addr, tls), sort_keys=False)
        )
        binary = Path(art["registry_dir"]) / "registry"
        log = self.logs / "registry.log"
        log.unlink(missing_ok=True)  # its access log is read for this bed's pulls only
        proc = spawn([str(binary), "serve", str(conf)], log, env={**os.environ, **registry.ENV})
        self.procs["registry"] = proc
        self.record.pids["registry"] = proc.pid
        registry.wait_ready(f"https://{addr}", ca, proc, log)
        self.record.registry = addr
        self.record.registry_ca = str(ca)
        self.record.save()
        assert self.cp is not None and self.cp.binaries.helm is not None
        self.record.chart_version = registry.push_chart(
            str(self.cp.binaries.helm), Path(art["chart"]), addr, ca, reg_dir / "chart"
        )
        self.record.save()

    def _start_nodes(self, cidr: str, gateway: str) -> None:
        net = ipaddress.ip_network(cidr)
        nodes = self.request["nodes"]
        art = self.request["artifacts"]
        ranges = pod_ranges(cidr, len(nodes))
        base_cg = cgroups.own_path("memory", str(self.record.reaper_pid)).rstrip("/")
        # Mount points for the nodes' own directories (empty on the host; see node.py).
        for fixed in node_mod.FIXED_DIRS:
            fixed.mkdir(parents=True, exist_ok=True)
        run_dir = Path(self.record.run_dir)
        for i, node in enumerate(nodes):
            name = node["name"]
            ndir = self.state_dir / "nodes" / name
            ndir.mkdir(parents=True, exist_ok=True)
            cfg = NodeConfig(
                name=name,
                product=node["product"],
                gpus=int(node["gpus"]),
                node_ip=str(net.network_address + 2 + i),
                gateway=gateway,
                pod_subnet=cidr,
                range_start=ranges[i][0],
                range_end=ranges[i][1],
                dir=str(ndir),
                run_dir=str(run_dir / name),
                cgroup_root=f"{base_cg}/{netns.BedNet(self.record.bed_id).name}-{name}",
                kubeconfig=self.record.kubeconfig,
                cluster_dns=CLUSTER_DNS,
                node_bin=art["node_bin"],
                containerd_bin=art["containerd_bin"],
                cni_bin=art["cni_bin"],
                registry=self.record.registry,
                registry_ca=self.record.registry_ca,
                sandbox_image=art["images"]["pause"]["ref"],
                labels={
                    "nvidia.com/gpu.product": node["product"],
                    "nvidia.com/gpu.count": str(node["gpus"]),
                    "nvidia.com/gpu.present": "true",
                    "sps.dev/testbed-node": "true",
                },
                bridge=BRIDGE,
            )
            cfg.save(ndir / "node.json")
            self.record.nodes.append(
                NodeRecord(
                    name=name,
                    product=cfg.product,
                    gpus=cfg.gpus,
                    node_ip=cfg.node_ip,
                    cgroup_root=cfg.cgroup_root,
                    dir=str(ndir),
                )
            )
            proc = spawn(
                [
                    "unshare",
                    "--mount",
                    "--propagation",
                    "private",
                    "--",
                    sys.executable,
                    "-m",
                    "sps_testbed.node",
                    str(ndir / "node.json"),
                ],
                ndir / "runner.log",
                parent_death_signal=signal.SIGTERM,
            )
            self.procs[f"node/{name}"] = proc
            self.record.nodes[-1].pid = proc.pid
            self.record.pids[f"node/{name}"] = proc.pid
        self.record.save()

    def _start_kube_proxy(self, cidr: str) -> None:
        # One kube-proxy serves the whole bed: every node shares this network namespace.
        conf = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": self.record.kubeconfig},
            "mode": "iptables",
            "clusterCIDR": cidr,
            "hostnameOverride": self.request["nodes"][0]["name"],
            "bindAddress": "0.0.0.0",
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            # conntrack limits are host-wide: leave them alone.
            "conntrack": {"maxPerCore": 0, "min": 0},
            "iptables": {"syncPeriod": "10s", "minSyncPeriod": "0s"},
            "nodePortAddresses": ["primary"],
        }
        path = self.state_dir / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(conf, sort_keys=False))
        kp = Path(self.request["artifacts"]["node_bin"]) / "kube-proxy"
        proc = spawn([str(kp), f"--config={path}", "--v=1"], self.logs / "kube-proxy.log")
        self.procs["kube-proxy"] = proc
        self.record.pids["kube-proxy"] = proc.pid
        self.record.save()

    def _start_network_policy_controller(self) -> None:
        # kube-router's network policy controller only (iptables + ipset), one for the bed:
        # every node shares this network namespace, and an instance deletes the pod chains
        # it did not make itself, so a second one would undo the first's. It enforces for
        # the pods whose hostIP is its node's address: the first node's.
        argv = [
            self.request["kube_router"],
            f"--kubeconfig={self.record.kubeconfig}",
            f"--hostname-override={self.request['nodes'][0]['name']}",
            "--run-firewall=true",
            "--run-router=false",
            "--run-service-proxy=false",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--health-port=0",
            "--metrics-port=0",
            "--v=1",
        ]
        proc = spawn(argv, self.logs / "kube-router.log")
        self.procs["kube-router"] = proc
        self.record.pids["kube-router"] = proc.pid
        self.record.save()

    def _kubectl(self, *args: str, input: str | None = None) -> str:
        assert self.cp is not None
        kubectl = str(self.cp.binaries.kubectl)
        proc = subprocess.run(
            [kubectl, f"--kubeconfig={self.record.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def _start_coredns(self) -> None:
        text = Template((ADDONS / "coredns.yaml").read_text()).substitute(
            IMAGE=self.request["artifacts"]["images"]["coredns"]["ref"], CLUSTER_DNS=CLUSTER_DNS
        )
        self._kubectl("apply", "-f", "-", input=text)

    def _nodes_ready(self) -> bool:
        """Every node Ready, with its GPUs advertised by the device plugin (a pod that asks
        for `nvidia.com/gpu` right after start-up must not find none)."""
        assert self.cp is not None
        gpus = {n["name"]: str(n["gpus"]) for n in self.request["nodes"]}
        ready = set()
        for item in (self.cp.get("/api/v1/nodes") or {}).get("items", []):
            name = item.get("metadata", {}).get("name")
            status = item.get("status", {})
            conditions = status.get("conditions") or []
            advertised = (status.get("capacity") or {}).get("nvidia.com/gpu", "0")
            if (
                name in gpus
                and advertised == gpus[name]
                and any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            ):
                ready.add(name)
        return set(gpus) <= ready

    def _coredns_available(self) -> bool:
        assert self.cp is not None
        dep = self.cp.get("/apis/apps/v1/namespaces/kube-system/deployments/coredns") or {}
        return int(dep.get("status", {}).get("availableReplicas", 0) or 0) >= 1

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                log = (
                    self.state_dir / "nodes" / name.split("/", 1)[1] / "runner.log"
                    if name.startswith("node/")
                    else self.logs / f"{name}.log"
                )
                raise RuntimeError(f"{name} exited with {proc.returncode}; {log}:\n{log_tail(log)}")

    def _wait(self, what: str, ready: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.stopping:
                raise RuntimeError("stopped while starting")
            self._check_alive()
            try:
                if ready():
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: not within {timeout:.0f}s")
            time.sleep(0.25)

    # -- run and stop -------------------------------------------------------------
    def run(self) -> int:
        while not self.stopping:
            try:
                self._check_alive()
            except RuntimeError as err:
                self.record.status = "failed"
                self.record.error = str(err)
                self.record.save()
                return 1
            time.sleep(0.5)
        return 0

    def failed(self, err: Exception) -> None:
        self.record.status = "failed"
        self.record.error = f"{err}\n{traceback.format_exc()}"
        self.record.save()

    def stop(self) -> None:
        t0 = time.monotonic()

        def stopped(what: str) -> None:
            # Seconds since the stop began, in bed.json (`timings`, keys `stop:...`).
            self.record.timings[f"stop:{what}"] = round(time.monotonic() - t0, 2)

        for name, proc in self.procs.items():
            if name.startswith("node/"):
                proc.send_signal(signal.SIGTERM)
        for name, proc in self.procs.items():
            if name.startswith("node/"):
                terminate_group(proc.pid, grace=30.0)
                stopped(name)
        for agent in ("kube-proxy", "kube-router"):
            if agent in self.procs:
                terminate_group(self.procs[agent].pid, grace=5.0)
        if self.cp is not None:
            self.cp.stop()
            stopped("control plane")
        problems = teardown(self.record, keep={self.reaper.pid} if self.reaper else None)
        stopped("teardown")
        if self.record.status != "failed":
            self.record.status = "stopped"
        if problems:
            self.record.error = (self.record.error + "\n" if self.record.error else "") + "; ".join(
                problems
            )
        self.record.save()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sps_testbed.supervisor")
    parser.add_argument("--state-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    return run_until_signalled(Supervisor(args.state_dir.resolve()))


if __name__ == "__main__":
    sys.exit(main())
