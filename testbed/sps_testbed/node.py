"""One real node: containerd (with runc and the CNI bridge), the kubelet and the GPU
device plugin, run by `python -m sps_testbed.node CONFIG.json`.

The supervisor starts it as `unshare --mount --propagation private`, inside the bed's
network namespace, so each node has a mount namespace of its own: the kubelet's secret
and projected-volume mounts, containerd's overlay mounts and the device-plugin
directory (whose path, /var/lib/kubelet/device-plugins, is fixed in the kubelet) are
private to the node and vanish with it. The runner joins the node's cgroup
(`<cgroup_root>/system`), so everything it starts is found again at teardown.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sps_testbed import cgroups, registry
from sps_testbed.lifecycle import run_until_signalled
from sps_testbed.processes import log_tail, spawn, terminate_group

DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
# Host paths that the kubelet, containerd's shims and libcni use whatever they are told.
FIXED_DIRS = (
    DEVICE_PLUGIN_DIR,  # the kubelet's device-plugin registration socket
    Path("/var/log/containers"),  # the kubelet's container-log symlinks
    Path("/var/lib/cni"),  # libcni's result cache
    Path("/run/containerd"),  # containerd's shims' sockets (/run/containerd/s)
)


def in_memory_dirs(cfg: NodeConfig) -> list[Path]:
    """The node's stores that a tmpfs holds, mounted in its own mount namespace: what its
    containerd pulled and unpacked, its containers' writable layers and bundles, runc's
    state and the kubelet's pod directories.

    Why: on the hosts this runs on, creating files on the disk's file system costs far more
    CPU than writing their bytes (untarring the operator image's 237 MB dependency layer,
    8,154 files: 2.3-5.6 CPU-s of system time on ext4, 0.3 on tmpfs), and every node
    unpacks ~390 MB of images and every pod creates its bundle, rootfs and volumes. Six
    nodes pulling both images: containerd 69 CPU-s on disk, 26 in memory. Nothing on the
    host reads these (the sockets stay in `run_dir`; logs stay on disk), and the mounts
    vanish with the node's mount namespace: no deletion after the bed stops."""
    d, r = Path(cfg.dir), Path(cfg.run_dir)
    return [d / "containerd", r / "containerd", r / "runc", cfg.kubelet_root]


# A bound on each store's memory, not a reservation: a node holds ~0.5 GB once it has
# pulled the operator and SGLang images (the past release's image adds as much).
IN_MEMORY_SIZE = "8g"


def private_dirs(cfg: NodeConfig) -> dict[Path, Path]:
    """Each fixed host path, and the node's own directory bound over it."""
    d, r = Path(cfg.dir), Path(cfg.run_dir)
    return {
        DEVICE_PLUGIN_DIR: d / "device-plugins",
        Path("/var/log/containers"): d / "container-logs",
        Path("/var/lib/cni"): d / "cni-cache",
        Path("/run/containerd"): r / "shims",
    }


@dataclass
class NodeConfig:
    """Everything one node runner needs (written as JSON by the supervisor)."""

    name: str
    product: str
    gpus: int
    node_ip: str
    gateway: str
    pod_subnet: str
    range_start: str
    range_end: str
    dir: str  # configuration, logs, pod logs; containerd root (in memory: in_memory_dirs)
    run_dir: str  # /run/...: sockets; containerd, runc and kubelet state (in memory)
    cgroup_root: str
    kubeconfig: str
    cluster_dns: str
    node_bin: str
    cni_bin: str
    containerd_bin: str  # containerd 2.x, its runc shim and ctr (build-containerd.sh)
    registry: str  # host:port of the bed's registry, which every image is pulled from
    registry_ca: str  # the bed's CA, which signed the registry's certificate
    sandbox_image: str = "registry.k8s.io/pause:3.10"
    labels: dict[str, str] = field(default_factory=dict)
    bridge: str = "tb0"

    @classmethod
    def load(cls, path: Path) -> NodeConfig:
        return cls(**json.loads(path.read_text()))

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @property
    def socket(self) -> Path:
        return Path(self.run_dir) / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        # Under /run: the kubelet's unix sockets need a short path.
        return Path(self.run_dir) / "kubelet"

    @property
    def ready_file(self) -> Path:
        return Path(self.dir) / "ready"

    @property
    def logs(self) -> Path:
        return Path(self.dir) / "logs"


def containerd_toml(cfg: NodeConfig) -> str:
    """containerd 2.x's configuration (version 3): CRI's image and runtime plugins apart."""
    d, r = Path(cfg.dir), Path(cfg.run_dir)
    return f"""version = 3
root = "{d / "containerd"}"
state = "{r / "containerd"}"
# Snapshotters the bed does not use; tracing; /opt/containerd; NRI, whose socket path is
# host-wide (/var/run/nri) and would be shared by every node of every bed.
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs", "io.containerd.differ.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
  "io.containerd.internal.v1.opt", "io.containerd.nri.v1.nri"]
[grpc]
  address = "{cfg.socket}"
[ttrpc]
  address = "{cfg.socket}.ttrpc"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{cfg.sandbox_image}"
  # Every image comes from the bed's registry (registry.write_hosts).
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "{d / "certs.d"}"
[plugins."io.containerd.cri.v1.runtime"]
  # Non-root containers may bind ports below 1024 (CoreDNS on 53) without capabilities.
  enable_unprivileged_ports = true
  enable_unprivileged_icmp = true
  # The pods' network namespaces stay under this node's state, not in /run/netns.
  netns_mounts_under_state_dir = true
  # Inside a container the runtime may not lower oom_score_adj below its own.
  restrict_oom_score_adj = true
  disable_apparmor = true
  disable_hugetlb_controller = true
  tolerate_missing_hugetlb_controller = true
  # The bed has no CDI devices (the device plugin hands out environment variables).
  enable_cdi = false
  enable_criu = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{cfg.cni_bin}"]
    conf_dir = "{d / "cni"}"
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        Root = "{r / "runc"}"
        SystemdCgroup = false
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""


def cni_conflist(cfg: NodeConfig) -> dict[str, Any]:
    """One bridge shared by every node of the bed; each node allocates from its own range."""
    return {
        "cniVersion": "0.4.0",
        "name": "sps-testbed",
        "plugins": [
            {
                "type": "bridge",
                "bridge": cfg.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [
                        [
                            {
                                "subnet": cfg.pod_subnet,
                                "rangeStart": cfg.range_start,
                                "rangeEnd": cfg.range_end,
                                "gateway": cfg.gateway,
                            }
                        ]
                    ],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(Path(cfg.dir) / "cni-ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(cfg: NodeConfig) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # The hosts this runs on (containers, CI) may still have cgroup v1 (hybrid).
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cfg.cgroup_root,
        "containerRuntimeEndpoint": f"unix://{cfg.socket}",
        "address": cfg.node_ip,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": cfg.node_ip,
        "healthzPort": 10248,
        # The API server reaches the kubelet (logs, exec) without a client certificate.
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "clusterDNS": [cfg.cluster_dns],
        "clusterDomain": "cluster.local",
        "resolvConf": str(Path(cfg.dir) / "resolv.conf"),
        # Container logs stay with the node, not in the host's /var/log/pods.
        "podLogsDir": str(Path(cfg.dir) / "pod-logs"),
        "failSwapOn": False,
        # A pulled image stays for the bed's life: a second pull is time a test waits.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
        },
        # A changed status (a device plugin's GPUs, a condition) reaches the API within 5 s;
        # an unchanged one is posted only every 5 min (the kubelet's default; its heartbeat
        # is the node Lease). Setting the update frequency alone also sets the report
        # frequency to it: every node then wrote its whole status every 5 s, which the API
        # server, etcd and every watcher of nodes (each operator under test) paid for.
        "nodeStatusUpdateFrequency": "5s",
        "nodeStatusReportFrequency": "5m",
        "syncFrequency": "10s",
        "fileCheckFrequency": "5s",
        "registerNode": True,
    }


class NodeRunner:
    def __init__(self, cfg: NodeConfig) -> None:
        self.cfg = cfg
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.stopping = False

    def _ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                str(Path(self.cfg.containerd_bin) / "ctr"),
                "-a",
                str(self.cfg.socket),
                "-n",
                "k8s.io",
                *args,
            ],
            capture_output=True,
            text=True,
            check=False,
        )

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.procs[name] = spawn(
            argv, self.cfg.logs / f"{name}.log", env=env, parent_death_signal=signal.SIGKILL
        )

    def _wait(self, name: str, check: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is not None:
                log = self.cfg.logs / f"{name}.log"
                raise RuntimeError(f"{name} exited ({proc.returncode}):\n{log_tail(log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not ready in {timeout:.0f}s")
            time.sleep(0.1)

    def start(self) -> None:
        cfg = self.cfg
        d = Path(cfg.dir)
        for sub in ("cni", "device-plugins", "logs", "pod-logs"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        cgroups.create(cfg.cgroup_root)
        cgroups.join(cfg.cgroup_root + "/system", os.getpid())
        # Paths fixed in the kubelet, containerd's shims and libcni: each node binds its own
        # directory there, in its own mount namespace, so nothing lands on the host's.
        for fixed, own in private_dirs(cfg).items():
            own.mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", "--bind", str(own), str(fixed)], check=True)
        for store in in_memory_dirs(cfg):
            store.mkdir(parents=True, exist_ok=True)
            options = f"mode=0711,size={IN_MEMORY_SIZE}"
            mount = ["mount", "-t", "tmpfs", "-o", options, "sps-node", str(store)]
            subprocess.run(mount, check=True)

        (d / "containerd.toml").write_text(containerd_toml(cfg))
        (d / "cni" / "10-sps-testbed.conflist").write_text(json.dumps(cni_conflist(cfg), indent=1))
        (d / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config(cfg), sort_keys=False))
        # Pods with dnsPolicy Default get this; the bed has no upstream resolver.
        (d / "resolv.conf").write_text(f"nameserver {cfg.cluster_dns}\n")

        registry.write_hosts(d / "certs.d", cfg.registry, Path(cfg.registry_ca))
        # containerd finds its shim (containerd-shim-runc-v2) on PATH; runc is Debian's.
        bin_dirs = [cfg.containerd_bin, os.environ.get("PATH", "")]
        self._spawn(
            "containerd",
            [str(Path(cfg.containerd_bin) / "containerd"), "--config", str(d / "containerd.toml")],
            env={**os.environ, "PATH": os.pathsep.join(bin_dirs)},
        )
        self._wait("containerd", lambda: self._ctr("version").returncode == 0, 30)

        labels = ",".join(f"{k}={v}" for k, v in cfg.labels.items())
        bin_dir = Path(cfg.node_bin)
        self._spawn(
            "kubelet",
            [
                str(bin_dir / "kubelet"),
                f"--config={d / 'kubelet.yaml'}",
                f"--kubeconfig={cfg.kubeconfig}",
                f"--root-dir={cfg.kubelet_root}",
                f"--cert-dir={cfg.kubelet_root / 'pki'}",
                f"--hostname-override={cfg.name}",
                f"--node-ip={cfg.node_ip}",
                f"--node-labels={labels}",
                "--v=1",
            ],
        )
        self._spawn(
            "device-plugin",
            [
                str(bin_dir / "sps-gpu-device-plugin"),
                f"--node={cfg.name}",
                f"--product={cfg.product}",
                f"--count={cfg.gpus}",
                f"--device-plugin-dir={DEVICE_PLUGIN_DIR}",
            ],
        )
        self._wait("kubelet", lambda: (DEVICE_PLUGIN_DIR / "kubelet.sock").exists(), 60)
        cfg.ready_file.write_text(json.dumps({"pid": os.getpid()}))

    def failed(self, err: Exception) -> None:
        print(f"node {self.cfg.name} failed: {err}", file=sys.stderr, flush=True)

    def run(self) -> int:
        """Wait for SIGTERM; a component that dies takes the node down (exit 1)."""
        while not self.stopping:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    print(f"{name} exited with {proc.returncode}", file=sys.stderr, flush=True)
                    return 1
            time.sleep(0.5)
        return 0

    def _log(self, what: str, since: float) -> None:
        print(f"stop: {what} at {time.monotonic() - since:.2f}s", file=sys.stderr, flush=True)

    def stop(self) -> None:
        t0 = time.monotonic()
        for name in ("device-plugin", "kubelet"):
            proc = self.procs.get(name)
            if proc is not None:
                terminate_group(proc.pid, grace=5.0)
                self._log(f"{name} stopped", t0)
        # Containers, shims and whatever else the node started; then containerd itself.
        me = {os.getpid()}
        containerd = self.procs.get("containerd")
        keep = me | ({containerd.pid} if containerd is not None else set())
        cgroups.kill_all(self.cfg.cgroup_root, exclude=keep)
        self._log("containers and shims killed", t0)
        if containerd is not None:
            terminate_group(containerd.pid, grace=5.0)
            self._log("containerd stopped", t0)
        cgroups.kill_all(self.cfg.cgroup_root, exclude=me)
        self._log(f"cgroup empty ({len(cgroups.members(self.cfg.cgroup_root) - me)} left)", t0)
        with contextlib.suppress(OSError):
            self.cfg.ready_file.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sps_testbed.node")
    parser.add_argument("config", type=Path)
    args = parser.parse_args(argv)
    return run_until_signalled(NodeRunner(NodeConfig.load(args.config)))


if __name__ == "__main__":
    sys.exit(main())
