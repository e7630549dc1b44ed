"""Kueue on the real bed (issue 21 §1): the manager from its image in kueue-system, its own
webhooks and certificates, the ClusterQueue `gpu` with a flavor per GPU product; Jobs
queued through a LocalQueue are admitted by quota and run on the product of their flavor."""

from __future__ import annotations

import base64
import json
from typing import Any

from realnode_helpers import get_json, pod

from sps_operator.constants import GPU_PRODUCT_LABEL, GPU_RESOURCE
from sps_sim.costmodel import GPU_H100, GPU_H200
from sps_testbed import RealNodeCluster
from sps_testbed.kueue import NAMESPACE, QUEUE_NAME_LABEL, KueueSetup, condition
from waiting import wait_for

PRINT_PRODUCT = ["sh", "-c", 'echo "product=$SPS_SIM_GPU_PRODUCT"']


def job(
    name: str,
    image: str,
    *,
    gpus: int,
    queue: str | None = "gpu",
    suspend: bool = True,
    pods: int = 1,
    product: str | None = None,
) -> dict[str, Any]:
    template = pod(
        name,
        image,
        PRINT_PRODUCT,
        gpus=gpus,
        node_selector={GPU_PRODUCT_LABEL: product} if product else None,
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_NAME_LABEL: queue} if queue else {}},
        "spec": {
            "suspend": suspend,
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {"spec": template["spec"]},
        },
    }


def create(bed: RealNodeCluster, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    """Create `obj`; the object as the API server stored it (after the admission webhooks)."""
    out = bed.kubectl("create", "-n", namespace, "-o", "json", "-f", "-", input=json.dumps(obj))
    return dict(json.loads(out))


def workload_of(bed: RealNodeCluster, namespace: str, job_uid: str) -> dict[str, Any]:
    for wl in get_json(bed, "workloads.kueue.x-k8s.io", "-n", namespace)["items"]:
        if any(ref.get("uid") == job_uid for ref in wl["metadata"].get("ownerReferences") or []):
            return dict(wl)
    return {}


def job_pods(bed: RealNodeCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    return list(get_json(bed, "pods", "-n", namespace, "-l", f"job-name={name}")["items"])


def complete(bed: RealNodeCluster, namespace: str, name: str) -> bool:
    conds = get_json(bed, "job", name, "-n", namespace)
    return condition(conds, "Complete").get("status") == "True"


def test_queued_jobs_are_admitted_and_run_on_the_product_of_their_flavor(
    realnode_cluster: RealNodeCluster, realnode_kueue: KueueSetup, realnode_kueue_namespace: str
) -> None:
    bed, ns = realnode_cluster, realnode_kueue_namespace
    image = bed.image("operator")
    # No product asked for: the first flavor with quota (H100), its node label injected by
    # Kueue on admission. H200 asked for: only the H200 flavor fits the Job's nodeSelector.
    wanted = {"any-product": GPU_H100, "on-h200": GPU_H200}
    uids = {
        name: create(bed, ns, job(name, image, gpus=2, product=None if name == "any-product"
                                  else product))["metadata"]["uid"]
        for name, product in wanted.items()
    }  # fmt: skip
    for name, product in wanted.items():
        wl = wait_for(
            f"the Workload of {name} Admitted",
            lambda n=name: (
                (w := workload_of(bed, ns, uids[n]))
                and condition(w, "Admitted").get("status") == "True"
                and w
            ),
            timeout=120,
        )
        assert condition(wl, "QuotaReserved")["status"] == "True", wl["status"]
        admission = wl["status"]["admission"]
        assert admission["clusterQueue"] == "gpu"
        (assignment,) = admission["podSetAssignments"]
        assert assignment["flavors"][GPU_RESOURCE] == realnode_kueue.flavors[product]
        assert assignment["resourceUsage"][GPU_RESOURCE] == "2"
        wait_for(f"Job {name} complete", lambda n=name: complete(bed, ns, n), timeout=180)
        (job_pod,) = job_pods(bed, ns, name)
        assert job_pod["spec"]["nodeSelector"][GPU_PRODUCT_LABEL] == product
        node = get_json(bed, "node", job_pod["spec"]["nodeName"])
        assert node["metadata"]["labels"][GPU_PRODUCT_LABEL] == product
        out = bed.kubectl("logs", "-n", ns, job_pod["metadata"]["name"])
        assert f"product={product}" in out, out


def test_a_job_over_the_quota_stays_suspended_with_kueues_own_message(
    realnode_cluster: RealNodeCluster, realnode_kueue: KueueSetup, realnode_kueue_namespace: str
) -> None:
    bed, ns = realnode_cluster, realnode_kueue_namespace
    # Three pods of 8 GPUs: 24 > the 16 GPUs of either product's quota.
    uid = create(bed, ns, job("too-big", bed.image("operator"), gpus=8, pods=3))["metadata"]["uid"]
    wl = wait_for(
        "the Workload of too-big refused quota",
        lambda: (
            (w := workload_of(bed, ns, uid))
            and condition(w, "QuotaReserved").get("status") == "False"
            and "insufficient quota" in condition(w, "QuotaReserved").get("message", "")
            and w
        ),
        timeout=120,
    )
    message = condition(wl, "QuotaReserved")["message"]
    assert message.startswith("couldn't assign flavors to pod set main:"), message
    for flavor in realnode_kueue.flavors.values():
        assert (
            f"insufficient quota for {GPU_RESOURCE} in flavor {flavor}, previously considered "
            "podsets requests (0) + current podset request (24) > maximum capacity (16)"
        ) in message, message
    assert condition(wl, "Admitted").get("status") != "True"
    assert get_json(bed, "job", "too-big", "-n", ns)["spec"]["suspend"] is True
    assert job_pods(bed, ns, "too-big") == []
    # Kueue's visibility API, through the API server's aggregation layer, lists it pending.
    pending = json.loads(
        bed.kubectl(
            "get", "--raw",
            f"/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{ns}/localqueues/gpu/pendingworkloads",
        )
    )  # fmt: skip
    assert [(p["metadata"]["name"], p["positionInLocalQueue"]) for p in pending["items"]] == [
        (wl["metadata"]["name"], 0)
    ], pending


def test_kueues_webhook_suspends_a_queued_job_with_certificates_of_its_own(
    realnode_cluster: RealNodeCluster, realnode_kueue: KueueSetup, realnode_kueue_namespace: str
) -> None:
    bed, ns = realnode_cluster, realnode_kueue_namespace
    image = bed.image("operator")
    queued = create(bed, ns, job("queued", image, gpus=1, suspend=False))
    assert queued["spec"]["suspend"] is True  # set at admission, before any controller saw it
    unqueued = create(bed, ns, job("unqueued", image, gpus=1, queue=None, suspend=False))
    assert unqueued["spec"]["suspend"] is False  # not Kueue's: left alone
    wait_for("Job queued complete", lambda: complete(bed, ns, "queued"), timeout=180)
    assert workload_of(bed, ns, unqueued["metadata"]["uid"]) == {}

    # Kueue's internal certificate management filled the Secret (shipped empty) and put its
    # CA into the webhook configurations and the CRDs' conversion webhooks; the API server
    # checked the serving certificate against it on every call above.
    secret = get_json(bed, "secret", "kueue-webhook-server-cert", "-n", NAMESPACE)["data"]
    assert {"ca.crt", "tls.crt", "tls.key"} <= set(secret), sorted(secret)
    ca_pem = base64.b64decode(secret["ca.crt"])
    for kind in ("mutating", "validating"):
        config = get_json(bed, f"{kind}webhookconfiguration", f"kueue-{kind}-webhook-configuration")
        bundles = {base64.b64decode(w["clientConfig"]["caBundle"]) for w in config["webhooks"]}
        assert bundles == {ca_pem}, kind
    crd = get_json(bed, "crd", "workloads.kueue.x-k8s.io")
    conversion = crd["spec"]["conversion"]["webhook"]["clientConfig"]
    assert base64.b64decode(conversion["caBundle"]) == ca_pem
    manager = get_json(bed, "deployment", "kueue-controller-manager", "-n", NAMESPACE)
    (container,) = manager["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"registry.k8s.io/kueue/kueue:{realnode_kueue.version}"
