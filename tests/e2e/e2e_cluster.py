"""The real-node test bed as the end-to-end tests use it: kubectl and helm as admin or as a
ServiceAccount, namespaces, the nodes of a GPU product, pod logs."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from sps_testbed import RealNodeCluster
from sps_testbed.accounts import service_account_kubeconfig


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class E2eCluster:
    def __init__(self, bed: RealNodeCluster) -> None:
        self.bed = bed

    @property
    def kubeconfig(self) -> Path:
        return self.bed.kubeconfig

    def env(self) -> dict[str, str]:
        """For subprocesses: this cluster's KUBECONFIG; its kubectl and helm on PATH."""
        return self.bed.env()

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        kubeconfig: Path | None = None,
    ) -> str:
        """kubectl as admin (or as whoever `kubeconfig` says); stdout, KubectlError on failure."""
        if kubeconfig is not None:
            args = (f"--kubeconfig={kubeconfig}", *args)
        return self.bed.kubectl(*args, input=input, check=check)

    def helm(self, *args: str) -> str:
        return self.bed.helm(*args)

    def service_account_kubeconfig(
        self, service_account: str, namespace: str, path: Path, expiration_seconds: int = 3600
    ) -> Path:
        """A kubeconfig with a real token of the ServiceAccount: for programs (the operator
        under test, kubectl) that must run with exactly its RBAC, the way a pod would."""
        return service_account_kubeconfig(
            self.kubectl, self.kubeconfig, service_account, namespace, path, expiration_seconds
        )

    def create_namespace(self, name: str, timeout: float = 60.0) -> str:
        """Create `name` and wait until pods can be created in it (its default SA exists)."""
        self.kubectl("create", "namespace", name)
        deadline = time.monotonic() + timeout
        while not self.kubectl("get", "serviceaccount", "default", "-n", name, check=False):
            if time.monotonic() > deadline:
                raise RuntimeError(f"namespace {name}: no default service account in time")
            time.sleep(0.2)
        return name

    def delete_namespace(self, name: str) -> None:
        self.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)

    def nodes_with_product(self, product: str) -> list[str]:
        return [n.name for n in self.bed.nodes if n.product == product]

    def pod_logs(self, namespace: str, tail: int = 200) -> str:
        """Every container's log in `namespace` (init containers too), one section per
        container: `==> namespace/pod [container] <==`."""
        pods = json.loads(self.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]
        sections = []
        for pod in pods:
            name = pod["metadata"]["name"]
            spec = pod["spec"]
            for c in [*(spec.get("initContainers") or []), *spec["containers"]]:
                text = self.kubectl(
                    "logs", "-n", namespace, name, "-c", c["name"], f"--tail={tail}", check=False
                )
                sections.append(f"==> {namespace}/{name} [{c['name']}] <==\n{text.rstrip()}")
        return "\n".join(sections)


def short_name(nodeid: str) -> str:
    """A namespace name for a test: its name, shortened, and a random suffix."""
    base = nodeid.split("::")[-1].lower().replace("_", "-")[:40].strip("-")
    return f"{base}-{os.urandom(3).hex()}"
