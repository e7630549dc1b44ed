"""Server-side apply on the local control plane: field managers, conflicts, and the
operator's conditional writes to Deployments."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.dynamic import DynamicClient

from sps_operator.api import labels as L
from sps_operator.constants import FIELD_MANAGER
from sps_operator.controller.kube import workload_apply
from sps_operator.controller.kube.client import Kube
from sps_operator.controller.kube.workload_apply import owner_patch
from waiting import wait_for

pytestmark = pytest.mark.k8s


def _configmap(namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "shared", "namespace": namespace},
        "data": data,
    }


def _owned_keys(obj: Any) -> dict[str, set[str]]:
    """manager -> data keys it owns, from managedFields."""
    owned: dict[str, set[str]] = {}
    for entry in obj.to_dict()["metadata"]["managedFields"]:
        fields = entry["fieldsV1"].get("f:data", {})
        owned.setdefault(entry["manager"], set()).update(k[2:] for k in fields)
    return owned


def test_k8s_controlplane_ssa_field_managers(k8s_api: ApiClient, namespace: str) -> None:
    dyn = DynamicClient(k8s_api)
    configmaps = dyn.resources.get(api_version="v1", kind="ConfigMap")

    def apply(manager: str, data: dict[str, str], force: bool = False) -> Any:
        return dyn.server_side_apply(
            configmaps,
            body=_configmap(namespace, data),
            namespace=namespace,
            field_manager=manager,
            force_conflicts=force,
        )

    apply("gitops", {"model": "llama", "replicas": "2"})
    obj = apply(FIELD_MANAGER, {"table": "t1"})
    # Each manager owns exactly the fields it applied; both sets of data are merged.
    assert _owned_keys(obj) == {"gitops": {"model", "replicas"}, FIELD_MANAGER: {"table"}}
    assert dict(obj.data) == {"model": "llama", "replicas": "2", "table": "t1"}

    # Applying a field another manager owns, with a different value, is a conflict...
    with pytest.raises(client.ApiException) as conflict:
        apply(FIELD_MANAGER, {"table": "t1", "model": "mistral"})
    assert conflict.value.status == 409
    assert 'conflict with "gitops"' in json.loads(conflict.value.body)["message"]

    # ...unless forced, which moves ownership of that field.
    obj = apply(FIELD_MANAGER, {"table": "t2", "model": "mistral"}, force=True)
    assert _owned_keys(obj) == {"gitops": {"replicas"}, FIELD_MANAGER: {"model", "table"}}

    # A manager that stops applying a field it alone owns removes it.
    obj = apply(FIELD_MANAGER, {"model": "mistral"})
    assert dict(obj.data) == {"model": "mistral", "replicas": "2"}


SERVER_ARGS = ["--model-path", "org/model-8b", "--speculative-algorithm", "DSPARK"]
TABLE_FLAG = ["--speculative-dspark-sps-table-path", "/etc/sps/table/table.json"]


def _server_deployment(namespace: str) -> dict[str, Any]:
    labels = {"app": "sglang"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "server", "namespace": namespace},
        "spec": {
            "replicas": 0,  # no nodes here: the object and its writes are what is tested
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "containers": [
                        {
                            "name": "sglang",
                            "image": "lmsysorg/sglang:v1",
                            "command": ["python3", "-m", "sglang.launch_server"],
                            "args": list(SERVER_ARGS),
                        }
                    ]
                },
            },
        },
    }


def _create_settled(kube: Kube, apps: client.AppsV1Api, namespace: str) -> None:
    apps.create_namespaced_deployment(namespace, _server_deployment(namespace))
    _wait_settled(kube, namespace)


def _wait_settled(kube: Kube, namespace: str) -> None:
    """Until the Deployment controller has written its revision and observed the latest
    generation: its later status writes would change the resourceVersion and make a write
    under test conflict for another reason than the one tested."""

    def settled() -> bool:
        dep = kube.get("Deployment", namespace, "server") or {}
        meta, status = dep.get("metadata") or {}, dep.get("status") or {}
        revision = (meta.get("annotations") or {}).get("deployment.kubernetes.io/revision")
        return bool(revision) and status.get("observedGeneration") == meta.get("generation")

    wait_for("the Deployment controller to observe the Deployment", settled, timeout=30)


def _args(kube: Kube, namespace: str) -> list[str]:
    dep = kube.get("Deployment", namespace, "server") or {}
    return list(dep["spec"]["template"]["spec"]["containers"][0]["args"])


def _inject(read: dict[str, Any]) -> dict[str, Any]:
    """The operator's Inject apply body, built from the Deployment as read."""
    container = read["spec"]["template"]["spec"]["containers"][0]
    return workload_apply.inject_apply(
        read, "sglang", "p-table-0", "hash0", TABLE_FLAG[1], list(container["args"])
    )


def test_k8s_controlplane_an_apply_never_reverts_an_edit_made_after_the_read(
    k8s_api: ApiClient, namespace: str
) -> None:
    """Issue 18, item 11, on the real API server: the operator's Inject apply repeats the
    args it read (and forces ownership of them); an edit between its read and its write
    must make the API server refuse it, not be overwritten."""
    apps = client.AppsV1Api(k8s_api)
    kube = Kube(k8s_api)
    _create_settled(kube, apps, namespace)
    read = kube.get("Deployment", namespace, "server")
    assert read is not None

    # A user's edit (`kubectl edit`/`patch`) after the operator read the Deployment.
    edited = [*SERVER_ARGS, "--max-running-requests", "64"]
    apps.patch_namespaced_deployment(
        "server",
        namespace,
        {"spec": {"template": {"spec": {"containers": [{"name": "sglang", "args": edited}]}}}},
        field_manager="kubectl-edit",
    )
    _wait_settled(kube, namespace)
    with pytest.raises(client.ApiException) as conflict:
        kube.apply(_inject(read))
    assert conflict.value.status == 409
    assert _args(kube, namespace) == edited  # not reverted, and no table flag written

    # From the Deployment as it is now, the same write goes through and keeps the edit.
    fresh = kube.get("Deployment", namespace, "server")
    assert fresh is not None
    kube.apply(_inject(fresh))
    assert _args(kube, namespace) == [*edited, *TABLE_FLAG]


def test_k8s_controlplane_a_claim_then_an_apply_in_one_pass(
    k8s_api: ApiClient, namespace: str
) -> None:
    """The claim (owner record, conditional) changes the Deployment; the apply that follows
    in the same pass is conditional on the object the claim returned, so it succeeds. A
    claim decided on an older read is refused."""
    apps = client.AppsV1Api(k8s_api)
    kube = Kube(k8s_api)
    _create_settled(kube, apps, namespace)
    first = kube.get("Deployment", namespace, "server")
    assert first is not None
    # The Deployment controller may still write the Deployment's status right after the
    # claim (a changed annotation makes it sync): then the apply is refused, as it must be
    # for any write in between, and the pass is done again. Never more than that.
    for _attempt in range(3):
        read = kube.get("Deployment", namespace, "server")
        assert read is not None
        claimed = kube.patch_metadata("Deployment", namespace, "server", owner_patch(read, "p"))
        assert claimed["metadata"]["annotations"][L.ANNOTATION_OWNER] == "p"
        try:
            kube.apply(_inject(claimed))
            break
        except client.ApiException as exc:
            assert exc.status == 409
            moved = kube.get("Deployment", namespace, "server") or {}
            # Refused only because someone wrote after the claim, never for the claim itself.
            assert moved["metadata"]["resourceVersion"] != claimed["metadata"]["resourceVersion"]
    else:
        pytest.fail("the apply after the claim was refused three times")
    assert _args(kube, namespace) == [*SERVER_ARGS, *TABLE_FLAG]

    with pytest.raises(client.ApiException) as stale:
        kube.patch_metadata("Deployment", namespace, "server", owner_patch(first, "q"))
    assert stale.value.status == 409
    now = kube.get("Deployment", namespace, "server") or {}
    assert now["metadata"]["annotations"][L.ANNOTATION_OWNER] == "p"


def test_k8s_controlplane_the_operator_applies_its_table_into_a_stateful_set(
    k8s_api: ApiClient, namespace: str
) -> None:
    """Issue 34 on the real API server: the client lists a StatefulSet as a target (with its
    kind), claims it and applies the table's volume, mount, flag and annotations into its
    template; the user's fields stay, and the operator owns only what it applied. No
    LeaderWorkerSet CRD here: the list skips the kind and discovery says it is not served."""
    apps = client.AppsV1Api(k8s_api)
    kube = Kube(k8s_api)
    sts = _server_deployment(namespace)
    sts["kind"] = "StatefulSet"
    sts["spec"]["serviceName"] = "server"
    sts["metadata"]["labels"] = {"app": "sglang"}
    apps.create_namespaced_stateful_set(namespace, sts)
    (listed,) = [t for t in kube.list_targets(namespace, "app=sglang")]
    assert (listed["kind"], listed["metadata"]["name"]) == ("StatefulSet", "server")
    assert kube.serves("StatefulSet") and not kube.serves("LeaderWorkerSet")

    # The StatefulSet controller writes its status right after the create: a claim or an
    # apply between its writes is refused (409), as it must be; read again then.
    for _attempt in range(5):
        read = kube.get("StatefulSet", namespace, "server")
        assert read is not None
        try:
            claimed = kube.patch_metadata(
                "StatefulSet", namespace, "server", owner_patch(read, "p")
            )
            kube.apply(_inject(claimed))
            break
        except client.ApiException as exc:
            assert exc.status == 409
    else:
        pytest.fail("the claim and apply were refused five times")
    now = kube.get("StatefulSet", namespace, "server") or {}
    template = now["spec"]["template"]
    (server,) = template["spec"]["containers"]
    assert server["args"] == [*SERVER_ARGS, *TABLE_FLAG]
    assert server["image"] == "lmsysorg/sglang:v1" and server["command"][0] == "python3"
    assert template["metadata"]["annotations"][L.ANNOTATION_TABLE_HASH] == "hash0"
    assert template["metadata"]["labels"] == {"app": "sglang"}
    assert [v["configMap"]["name"] for v in template["spec"]["volumes"]] == ["p-table-0"]
    assert now["metadata"]["annotations"][L.ANNOTATION_OWNER] == "p"
    managers = {m["manager"] for m in now["metadata"]["managedFields"]}
    assert FIELD_MANAGER in managers
