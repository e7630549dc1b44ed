"""The README's install path for real: the chart, `helm install`, the image built from
the project's Dockerfile; the operator runs as the chart's Deployment under restricted
pod security, which the runtime enforces, and reconciles a profile."""

from __future__ import annotations

import uuid
from pathlib import Path

from realnode_helpers import get_json
from sps_testbed import RealNodeCluster

from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


def test_helm_install_runs_the_operator_from_its_image(realnode_cluster: RealNodeCluster) -> None:
    bed = realnode_cluster
    release_ns = f"sps-system-{uuid.uuid4().hex[:5]}"
    bed.kubectl("create", "namespace", release_ns)
    bed.kubectl("label", "namespace", release_ns, "pod-security.kubernetes.io/enforce=restricted")
    try:
        bed.helm(
            "install",
            "sps-operator",
            str(REPO / "charts" / "sps-operator"),
            "--namespace",
            release_ns,
            "--wait",
            "--timeout",
            "180s",
        )
        deploy = get_json(
            bed, "deployment", "-n", release_ns, "-l", "app.kubernetes.io/name=sps-operator"
        )
        (item,) = deploy["items"]
        replicas = item["spec"]["replicas"]
        assert item["status"].get("readyReplicas") == replicas, item["status"]
        pods = get_json(bed, "pods", "-n", release_ns)["items"]
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        assert len(running) == replicas, [p["metadata"]["name"] for p in pods]
        for operator_pod in running:
            container = operator_pod["spec"]["containers"][0]
            assert container["image"] == bed.image("operator")
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            status = operator_pod["status"]["containerStatuses"][0]
            assert status["ready"] is True and status["restartCount"] == 0, status
            # Run from the image, not a host process: the runtime reports the image it ran.
            assert "sha256:" in status["imageID"], status["imageID"]

        # It reconciles: a profile for an SGLang stand-in Deployment gets a status.
        work = f"serving-{uuid.uuid4().hex[:5]}"
        bed.kubectl("create", "namespace", work)
        bed.kubectl(
            "apply",
            "-n",
            work,
            "-f",
            str(REPO / "examples" / "sglang-deployment.yaml"),
            "-f",
            str(REPO / "examples" / "diagonal.yaml"),
        )

        def reconciled() -> object:
            prof = get_json(bed, "spsprofile", "llama", "-n", work)
            return prof.get("status", {}).get("conditions")

        wait_for("the operator writes the SpsProfile's status", reconciled, timeout=120)
        wait_for(
            "the SGLang stand-in is Ready",
            lambda: (
                get_json(bed, "deployment", "llama", "-n", work)
                .get("status", {})
                .get("readyReplicas")
            ),
            timeout=120,
        )
    finally:
        bed.helm("uninstall", "sps-operator", "--namespace", release_ns, check=False)
