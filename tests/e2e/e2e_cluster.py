"""The real-node test bed as the end-to-end tests use it: kubectl and helm, namespaces,
the nodes of a GPU product, pod logs, killing a pod's containers."""

from __future__ import annotations

import json
from pathlib import Path

from sps_testbed import RealNodeCluster


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

    def helm(self, *args: str, check: bool = True) -> str:
        return self.bed.helm(*args, check=check)

    def create_namespace(self, name: str) -> str:
        return self.bed.create_namespace(name)

    def delete_namespace(self, name: str) -> None:
        self.bed.delete_namespace(name)

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
