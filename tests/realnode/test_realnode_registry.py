"""Nothing is side-loaded: every image a node runs was pulled from the bed's registry, and
a name the registry lacks fails to pull with the registry's answer (as on a real cluster)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from realnode_helpers import apply, get_json, pod

from sps_testbed import RealNodeCluster
from sps_testbed.registry import access_log_lines, published
from waiting import wait_for

pytestmark = pytest.mark.bed_shared

SOURCE_LABEL = "containerd.io/distribution.source."


def image_sources(bed: RealNodeCluster, node: str) -> dict[str, list[str]]:
    """Each named image in the node's containerd, and the distribution-source labels of its
    top content (manifest or index): containerd sets them on a pull, never on an import."""
    labels_by_digest: dict[str, list[str]] = {}
    for line in bed.ctr(node, "content", "ls").splitlines()[1:]:
        # DIGEST SIZE AGE LABELS: the age has spaces ("About a minute"), the labels none.
        tokens = line.split()
        labels = tokens[-1].split(",") if "=" in tokens[-1] else []
        labels_by_digest[tokens[0]] = [label for label in labels if label.startswith(SOURCE_LABEL)]
    images = {}
    for line in bed.ctr(node, "images", "ls").splitlines()[1:]:
        name, _type, digest, *_ = line.split()
        if not name.startswith("sha256:"):
            images[name] = labels_by_digest.get(digest, [])
    return images


def pod_events(bed: RealNodeCluster, namespace: str, pod_name: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.name={pod_name}"
    out = bed.kubectl("get", "events", "-n", namespace, "--field-selector", selector, "-o", "json")
    return list(json.loads(out)["items"])


def test_the_operator_image_is_pulled_from_the_bed_registry_and_nothing_is_imported(
    realnode_cluster: RealNodeCluster, realnode_namespace: str
) -> None:
    bed, ns = realnode_cluster, realnode_namespace
    image = bed.image("operator")  # ghcr.io/sps-dev/sps-operator:<appVersion>, the chart's default
    target = published(image)
    apply(bed, ns, pod("pulled", image, ["sleep", "600"], restart="Always"))
    running = wait_for(
        "the pod running from the operator image",
        lambda: (
            (p := get_json(bed, "pod", "pulled", "-n", ns))["status"].get("phase") == "Running"
            and p
        ),
        timeout=180,
    )
    node = running["spec"]["nodeName"]
    # The registry served the manifest of that repository and tag (its access log).
    manifest_gets = access_log_lines(
        bed.registry_log(), "GET", f"/v2/{target.repository}/manifests/"
    )
    assert manifest_gets, bed.registry_log().read_text()[-3000:]
    # The node's containerd says it pulled it: the source label a pull sets.
    sources = image_sources(bed, node)
    assert f"{SOURCE_LABEL}ghcr.io={target.repository}" in sources[image], sources
    # And no image on any node came any other way (an import sets no source label).
    for each in bed.record().nodes:
        for name, labels in image_sources(bed, each.name).items():
            assert labels, f"{each.name}: {name} has no distribution source: not pulled"
    # The kubelet recorded the pull.
    events = pod_events(bed, ns, "pulled")
    assert any(e["reason"] in ("Pulled", "Pulling") for e in events), events


def test_an_image_absent_from_the_registry_fails_to_pull_with_its_answer(
    realnode_cluster: RealNodeCluster, realnode_namespace: str
) -> None:
    bed, ns = realnode_cluster, realnode_namespace
    absent = "ghcr.io/sps-dev/sps-operator:0.0.0-absent"
    apply(bed, ns, pod("absent", absent, ["true"]))

    def waiting() -> dict[str, str] | None:
        statuses = get_json(bed, "pod", "absent", "-n", ns)["status"].get("containerStatuses")
        state = (statuses or [{}])[0].get("state", {}).get("waiting") or {}
        return state if state.get("reason") in ("ErrImagePull", "ImagePullBackOff") else None

    state = wait_for("the pull of an absent tag to fail", waiting, timeout=120)
    events = pod_events(bed, ns, "absent")
    failed = [e["message"] for e in events if e["reason"] == "Failed" and "pull" in e["message"]]
    # The registry's answer, as containerd words it: the manifest is not found.
    assert any(re.search(rf"{re.escape(absent)}: not found", m) for m in failed), (state, failed)
    # It asked the bed's registry, which answered 404; nothing went to the real ghcr.io.
    misses = [
        ln
        for ln in access_log_lines(
            bed.registry_log(), "HEAD", "/v2/sps-dev/sps-operator/manifests/0.0.0-absent"
        )
        + access_log_lines(
            bed.registry_log(), "GET", "/v2/sps-dev/sps-operator/manifests/0.0.0-absent"
        )
        if '" 404 ' in ln
    ]
    assert misses, bed.registry_log().read_text()[-3000:]
