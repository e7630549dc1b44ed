"""Host side of the pod network: a bridge holding the gateway, one netns + veth per pod."""

from __future__ import annotations

import fcntl
import logging
import os
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .config import PodNetworkConfig

log = logging.getLogger(__name__)
NETNS_DIR = Path("/run/netns")
LOCK_DIR = Path("/run/lock") if Path("/run/lock").is_dir() else Path("/tmp")
LOCK_WAIT_SECONDS = 3.0


class NetworkError(RuntimeError):
    pass


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc


@dataclass(frozen=True)
class Sandbox:
    netns: str
    veth: str
    ip: str

    @property
    def netns_path(self) -> str:
        return str(NETNS_DIR / self.netns)


class HostNetwork:
    """Bridge `spsbr<N>`, veths `sps<N>p<k>`, namespaces `sps<N>-<uid>`: N keeps agents apart."""

    def __init__(self, config: PodNetworkConfig) -> None:
        self.config = config
        n = config.index
        self.bridge = f"spsbr{n}"
        self.veth_prefix = f"sps{n}p"
        self.netns_prefix = f"sps{n}-"
        self._lock = threading.Lock()
        self._free = config.pod_addresses()
        self._used: set[str] = set()
        self._next_veth = 0
        self._sandboxes: dict[str, Sandbox] = {}
        self._lock_fd: int | None = None
        self._cleaner_fd: int | None = None  # closing it (or dying) runs the cleaner

    @property
    def lock_path(self) -> Path:
        return LOCK_DIR / f"sps-node-agent-{self.config.index}.lock"

    def setup(self) -> None:
        # One agent per pod network: the next step deletes whatever holds its names.
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT)
        deadline = time.monotonic() + LOCK_WAIT_SECONDS  # a dead agent's cleaner may hold it
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise NetworkError(
                        f"another node agent is running on pod network {self.config.cidr} "
                        f"(bridge {self.bridge}); give this one another --pod-cidr"
                    ) from None
                time.sleep(0.1)
        self._lock_fd = fd
        self._start_cleaner()
        try:
            self.remove_stale()
            gw = f"{self.config.gateway}/{self.config.prefixlen}"
            ip("link", "add", self.bridge, "type", "bridge")
            # Pod-to-pod traffic is bridged; keep host firewalls (e.g. a FORWARD DROP policy
            # with br_netfilter) out of it. Older kernels lack the option: best effort.
            ip("link", "set", self.bridge, "type", "bridge", "nf_call_iptables", "0",
               "nf_call_ip6tables", "0", "nf_call_arptables", "0", check=False)  # fmt: skip
            ip("addr", "add", gw, "dev", self.bridge)
            ip("link", "set", self.bridge, "up")
        except NetworkError:
            self.teardown()
            raise

    def _start_cleaner(self) -> None:
        """A small process, outside our process group, that removes this network once the
        agent is gone however it died (SIGKILL included): it waits for EOF on a pipe only
        the agent holds, then takes the network lock and deletes our namespaces and links."""
        if self._cleaner_fd is not None:
            return
        read_end, write_end = os.pipe()  # both non-inheritable: pods never hold them
        q = shlex.quote
        script = (
            "read _ignored; exec flock "
            + q(str(self.lock_path))
            + " sh -c "
            + q(
                f"for ns in $(ip netns list | awk '{{print $1}}' | grep '^{self.netns_prefix}'); "
                'do ip netns delete "$ns"; done; '
                f"for l in $(ip -o link show | awk -F': ' '{{print $2}}' | cut -d@ -f1 "
                f"| grep -E '^({self.bridge}|{self.veth_prefix}[0-9]+)$'); "
                'do ip link delete "$l"; done'
            )
        )
        subprocess.Popen(
            ["sh", "-c", script],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        os.close(read_end)
        self._cleaner_fd = write_end

    def remove_stale(self) -> None:
        """Leftovers of an agent on the same network that died without cleaning up."""
        for line in ip("netns", "list", check=False).stdout.splitlines():
            name = line.split()[0] if line.strip() else ""
            if name.startswith(self.netns_prefix):
                ip("netns", "delete", name, check=False)
        for line in ip("-o", "link", "show", check=False).stdout.splitlines():
            parts = line.split(":")
            if len(parts) < 2:
                continue
            name = parts[1].strip().split("@")[0]
            if name.startswith(self.veth_prefix) or name == self.bridge:
                ip("link", "delete", name, check=False)

    def create_sandbox(self, key: str) -> Sandbox:
        """A fresh network namespace wired to the bridge, with an address and default route."""
        with self._lock:
            if not self._free:
                raise NetworkError(f"no free pod address in {self.config.cidr}")
            addr = self._free.pop(0)
            self._used.add(addr)
            veth = f"{self.veth_prefix}{self._next_veth}"
            self._next_veth += 1
        sandbox = Sandbox(netns=f"{self.netns_prefix}{key[:12]}", veth=veth, ip=addr)
        try:
            ip("netns", "add", sandbox.netns)
            ns = sandbox.netns
            ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            ip("link", "set", veth, "master", self.bridge, "up")
            ip("-n", ns, "addr", "add", f"{addr}/{self.config.prefixlen}", "dev", "eth0")
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "route", "add", "default", "via", self.config.gateway)
        except NetworkError:
            self.delete_sandbox(sandbox)
            raise
        with self._lock:
            self._sandboxes[sandbox.netns] = sandbox
        return sandbox

    def delete_sandbox(self, sandbox: Sandbox) -> None:
        ip("netns", "delete", sandbox.netns, check=False)
        ip("link", "delete", sandbox.veth, check=False)  # gone with the netns, normally
        with self._lock:
            self._sandboxes.pop(sandbox.netns, None)
            if sandbox.ip in self._used:
                self._used.discard(sandbox.ip)
                self._free.append(sandbox.ip)  # reused last: old connections die first

    def teardown(self) -> None:
        with self._lock:
            sandboxes = list(self._sandboxes.values())
        for sandbox in sandboxes:
            self.delete_sandbox(sandbox)
        if self._lock_fd is not None:
            self.remove_stale()
            os.close(self._lock_fd)  # releases the lock
            self._lock_fd = None
        if self._cleaner_fd is not None:
            os.close(self._cleaner_fd)  # the cleaner finds nothing left and exits
            self._cleaner_fd = None
