"""`helm upgrade` from the last release, 0.1.0, while profiles run and tables are live, and
`helm rollback` to it (issue 36 §1).

0.1.0 is commit 18c8f3b: the tree before c9c618e, the first change CHANGELOG.md lists under
"Upgrading from 0.1.0" (there is no tag). Its operator image is built from that tree as the
bed built it then (`sps_testbed.artifacts.build_past_release`, cached by commit) and pushed
into the bed's registry; its chart is installed from that tree, with its CRD from the
chart's `crds/` directory, as a 0.1.0 user has it.

One test, on the bed's one-at-a-time phase (it deletes the CRD and runs 0.1.0's operator):
two servers with live tables, `steady` (no run at the upgrade) and `rerun` (a second run in
progress at the upgrade); `helm upgrade --take-ownership` to the current chart with the
values the bed's releases use. After it: the steady server's pods are the same pods (UIDs,
restart counts), the run ends with a table, the CRD is the chart's (a field new since 0.1.0
is kept). Then `helm rollback` to 0.1.0: the CRD stays, the tables keep their Deployment
holder, neither server is profiled again nor restarted by 0.1.0 (steady's table 0.1.0
measured, rerun's the current version measured), a profile using a new field is refused,
and a server pod deleted comes back Ready with its table.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from pathlib import Path
from typing import Any, cast

import pytest
from e2e_env import (
    CRD,
    GROUP,
    PLURAL,
    VERSION,
    Env,
    crd_gone,
    force_crd_gone,
    install_crd,
    ready_true,
    server_deployment,
)
from kubernetes.client.rest import ApiException

from sps_sim.costmodel import GPU_H100, GPU_H200
from sps_testbed.artifacts import PAST_RELEASES, ArtifactError, PastRelease, build_past_release
from sps_testbed.registry import RegistryError, published, push_image
from waiting import wait_crd_established, wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.e2e, pytest.mark.slow]

RELEASE_0_1_0 = PAST_RELEASES["0.1.0"]
# The field new since 0.1.0 the upgraded CRD must keep (0.1.0's CRD prunes it).
NEW_FIELD = ("refresh", "minIntervalSeconds")
# A profile of no server that uses the new field: 0.1.0, rolled back to, refuses it.
REFUSED = "refused"
# Both versions run two replicas, elected on one Lease (0.1.0's default): the upgrade and
# the rollback roll them one pod at a time, so a pod of each version runs at once.
REPLICAS = 2


@pytest.fixture(scope="module")
def release_0_1_0(e2e_cluster: Any) -> PastRelease:
    """0.1.0's tree and operator image, the image pushed into the bed's registry. Fails
    (never skips) when it cannot: an upgrade test that does not run proves nothing."""
    try:
        release = build_past_release(RELEASE_0_1_0)
    except ArtifactError as err:
        pytest.fail(
            f"cannot build 0.1.0's operator image ({RELEASE_0_1_0[:12]}): {err}", pytrace=False
        )
    reg = e2e_cluster.bed.registry_env()
    try:
        push_image(
            f"oci-archive:{release.operator.archive}",
            reg["SPS_TESTBED_REGISTRY"],
            published(release.operator.ref),
            Path(reg["SPS_TESTBED_CA"]).parent,
            shutil.which("skopeo") or "skopeo",
        )
    except RegistryError as err:
        pytest.fail(f"cannot push 0.1.0's operator image into the bed: {err}", pytrace=False)
    return release


# ----------------------------------------------------------------------------- helpers


def old_values(env: Env, release: PastRelease) -> list[str]:
    """0.1.0's chart values as the bed's releases set them, in the keys 0.1.0 has (its
    schema refuses the others): its `sps-operator run` has no test entry point."""
    _, _, tag = release.operator.ref.rpartition(":")
    return [
        f"image.tag={tag}",
        f"replicaCount={REPLICAS}",
        "watch.mode=namespaces",
        f"watch.namespaces={{{env.namespace}}}",
        "operator.logLevel=verbose",
        "operator.logFormat=plain",
        "operator.extraArgs={--resync-seconds=60,--gpu-debounce-seconds=2}",
    ]


def sets(values: list[str]) -> list[str]:
    return [arg for value in values for arg in ("--set", value)]


def operator_image_up(env: Env, image: str) -> bool:
    """Every replica Ready, running `image`, and no other pod of the release."""
    pods = env.operator.all_pods()
    return len(pods) == REPLICAS and all(
        p["spec"]["containers"][0]["image"] == image and ready_true(p) for p in pods
    )


class LeaseWatch:
    """The release's pods (name -> image, once seen) and the Lease's holders in order,
    sampled while the Deployment rolls: which version acted when."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.images: dict[str, str] = {}
        self.holders: list[str] = []
        self.both_running = False

    def sample(self) -> None:
        running: set[str] = set()
        for pod in self.env.operator.all_pods():
            image = pod["spec"]["containers"][0]["image"]
            self.images[pod["metadata"]["name"]] = image
            if (pod.get("status") or {}).get("phase") == "Running":
                running.add(image)
        self.both_running = self.both_running or len(running) > 1
        op = self.env.operator
        path = f"/apis/coordination.k8s.io/v1/namespaces/{op.namespace}/leases/{op.lease}"
        lease = self.env.cluster.bed.api("GET", path) or {}
        holder = (lease.get("spec") or {}).get("holderIdentity")
        if holder and (not self.holders or self.holders[-1] != holder):
            self.holders.append(holder)

    def until(self, what: str, done: Any, timeout: float) -> None:
        def step() -> bool:
            self.sample()
            return bool(done())

        wait_for(what, step, timeout=timeout, interval=1)

    def held_by(self, image: str) -> bool:
        """Whether the last holder seen is a pod running `image`."""
        return bool(self.holders) and self.images.get(self.holders[-1]) == image

    def versions(self) -> list[str]:
        """The image of each holder in turn (consecutive repeats merged)."""
        out: list[str] = []
        for holder in self.holders:
            image = self.images.get(holder, f"unknown pod {holder}")
            if not out or out[-1] != image:
                out.append(image)
        return out


def profile_for(name: str) -> dict[str, Any]:
    sweep = {"batchSizes": [1, 2, 4, 8], "ciRelWidth": 0.05, "repeats": 1, "vocabSize": 32000}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SpsProfile",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"deploy": name}},
            "serverContainer": "sglang",
            "table": {"kind": "Diagonal", "sweep": sweep},
            "job": {"activeDeadlineSeconds": 600},
        },
    }


def status(env: Env, name: str) -> dict[str, Any]:
    """The status as the operator reads it (no entries listed for 0.1.0)."""
    return dict(env.profile(name).get("status") or {})


def live_table(env: Env, name: str) -> dict[str, Any] | None:
    """The profile's table its Deployment runs on every replica, once rolled out."""
    dep = env.deployment(name)
    template = dep["spec"]["template"].get("metadata") or {}
    running = (template.get("annotations") or {}).get("sps.dev/table-hash")
    st = dep.get("status") or {}
    rolled = (
        st.get("observedGeneration", 0) >= dep["metadata"]["generation"]
        and st.get("updatedReplicas") == st.get("availableReplicas") == st.get("replicas") == 1
    )
    tables = status(env, name).get("tables") or []
    table = next((t for t in tables if running and t["hash"] == running), None)
    return dict(table) if rolled and table else None


def server_pods(env: Env, name: str) -> dict[str, int]:
    """UID -> restart count of each server pod of Deployment `name`."""
    return {
        p["metadata"]["uid"]: sum(
            s.get("restartCount", 0) for s in (p.get("status") or {}).get("containerStatuses") or []
        )
        for p in env.pods(f"deploy={name}")
        if not p["metadata"].get("deletionTimestamp")
    }


def holders(env: Env, config_map: str) -> set[str]:
    refs = env.config_map(config_map)["metadata"].get("ownerReferences") or []
    return {f"{r['kind']}/{r['name']}" for r in refs}


def fill_gpus(env: Env, product: str) -> list[str]:
    """Pods (pause) holding every free GPU of `product`'s nodes; their names."""
    nodes = json.loads(
        env.cluster.kubectl("get", "nodes", "-l", f"nvidia.com/gpu.product={product}", "-o", "json")
    )["items"]
    pods = json.loads(env.cluster.kubectl("get", "pods", "-A", "-o", "json"))["items"]
    names = []
    for node in nodes:
        node_name = node["metadata"]["name"]
        used = sum(
            int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
            for p in pods
            if p["spec"].get("nodeName") == node_name
            and not p["metadata"].get("deletionTimestamp")  # its GPUs are being freed
            and p["status"].get("phase") not in ("Succeeded", "Failed")
            for c in p["spec"]["containers"]
        )
        free = int(node["status"]["allocatable"].get("nvidia.com/gpu", 0)) - used
        if free <= 0:
            continue
        name = f"gpu-filler-{node_name}"
        env.core.create_namespaced_pod(env.namespace, {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node_name},
                "terminationGracePeriodSeconds": 0,
                "containers": [{
                    "name": "pause", "image": env.cluster.bed.image("pause"),
                    "resources": {"limits": {"nvidia.com/gpu": str(free)}},
                }],
            },
        })  # fmt: skip
        names.append(name)

    def running() -> bool:
        phases = {p["metadata"]["name"]: p["status"].get("phase") for p in env.pods("")}
        return all(phases.get(n) == "Running" for n in names)

    wait_for(f"fillers {names} running", running, timeout=120)
    return names


def patch_spec(env: Env, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    obj = env.custom.patch_namespaced_custom_object(
        GROUP, VERSION, env.namespace, PLURAL, name, {"spec": spec}
    )
    return cast(dict[str, Any], obj)


def mounted_config_maps(pod_spec: dict[str, Any]) -> set[str]:
    return {v["configMap"]["name"] for v in pod_spec.get("volumes") or [] if v.get("configMap")}


def v1_entry(env: Env, name: str, config_map: str) -> dict[str, Any] | None:
    """The status.tables entry of `config_map` under a version-1 fingerprint (no `v2-`),
    as stored: the key 0.1.0 finds a server's table by."""
    tables = (env.stored_profile(name).get("status") or {}).get("tables") or []
    return next(
        (
            dict(t)
            for t in tables
            if t["configMap"] == config_map and not str(t["fingerprint"]).startswith("v2-")
        ),
        None,
    )


def objects_written(env: Env, name: str, config_map: str) -> dict[str, Any]:
    """What a write to the server's objects would change: the Deployment's generation
    (its spec, the pod template) and the table ConfigMap's resourceVersion (its owners,
    labels)."""
    dep = env.deployment(name)
    cm = env.config_map(config_map)
    return {
        "generation": dep["metadata"]["generation"],
        "template": (dep["spec"]["template"].get("metadata") or {}).get("annotations"),
        "table": cm["metadata"]["resourceVersion"],
    }


def restart_serves_table(env: Env, name: str) -> None:
    """A server pod deleted comes back Ready, mounting the table ConfigMaps the
    Deployment names (each of them there)."""
    tables = mounted_config_maps(env.deployment(name)["spec"]["template"]["spec"])
    assert tables, env.deployment(name)["spec"]["template"]["spec"]
    for cm in tables:
        env.config_map(cm)  # 404 raises
    old = set(server_pods(env, name))
    pod = env.pods(f"deploy={name}")[0]["metadata"]["name"]
    env.core.delete_namespaced_pod(pod, env.namespace, grace_period_seconds=0)

    def back() -> dict[str, Any] | None:
        for p in env.pods(f"deploy={name}"):
            if p["metadata"]["uid"] not in old and ready_true(p):
                return p
        return None

    new = wait_for(f"a new Ready {name} pod", back, timeout=180)
    assert tables <= mounted_config_maps(new["spec"]), (tables, new["spec"]["volumes"])


def cleanup(env: Env) -> None:
    """Profiles deleted by the operator if one runs, else their finalizers forced; the
    current CRD back for the next module."""
    for name in ("steady", "rerun", REFUSED):
        with contextlib.suppress(ApiException):
            env.custom.delete_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, name)
    deadline = time.monotonic() + 60
    patch = json.dumps({"metadata": {"finalizers": None}})
    while time.monotonic() < deadline:
        left = env.cluster.kubectl(
            "get", "spsprofiles", "-n", env.namespace, "-o", "name", check=False
        ).split()
        if not left:
            break
        if time.monotonic() > deadline - 30:
            for obj in left:
                env.cluster.kubectl(
                    "patch", obj, "-n", env.namespace, "--type=merge", "-p", patch, check=False
                )
        time.sleep(2)
    install_crd(env.cluster)


# ----------------------------------------------------------------------------- the test


def test_e2e_helm_upgrade_from_0_1_0_and_rollback(env: Env, release_0_1_0: PastRelease) -> None:
    op = env.operator
    timings: dict[str, float] = {}
    started = time.monotonic()
    try:
        # 0.1.0 as its users have it: its CRD from the chart's crds/ (Helm installs it
        # only when there is none), its operator.
        if not crd_gone(env):
            env.cluster.kubectl("delete", "crd", CRD, "--wait=false")
            force_crd_gone(env)
        env.cluster.helm(
            "install",
            op.name,
            str(release_0_1_0.chart),
            "--namespace",
            op.namespace,
            *sets(old_values(env, release_0_1_0)),
        )
        op.installed = True
        wait_crd_established(env.cluster.kubectl)
        wait_for(
            "0.1.0's operator Ready",
            lambda: operator_image_up(env, release_0_1_0.operator.ref),
            timeout=600,
        )
        timings["0.1.0 installed"] = time.monotonic() - started

        for name, gpu in (("steady", GPU_H100), ("rerun", GPU_H200)):
            dep = server_deployment(gpu, name=name)
            env.apps.create_namespaced_deployment(env.namespace, dep)
            env.custom.create_namespaced_custom_object(
                GROUP, VERSION, env.namespace, PLURAL, profile_for(name)
            )
        first = {
            name: wait_for(
                f"{name}'s table live under 0.1.0",
                lambda name=name: live_table(env, name),
                timeout=420,
            )
            for name in ("steady", "rerun")
        }
        timings["0.1.0 tables live"] = time.monotonic() - started
        # 0.1.0's CRD does not know the new field: the API server drops it.
        kept = patch_spec(env, "steady", {NEW_FIELD[0]: {NEW_FIELD[1]: 0}})["spec"]
        assert NEW_FIELD[1] not in (kept.get(NEW_FIELD[0]) or {}), kept

        # A second run of `rerun`, in progress at the upgrade: its Job waits for GPUs that
        # fillers hold (a run of the stand-in takes 15 s: 0.1.0 finished it while the
        # current operator's pod started, so the upgrade found no run to take over).
        fillers = fill_gpus(env, GPU_H200)
        patch_spec(env, "rerun", {"refresh": {"token": "before-the-upgrade"}})

        def second_run() -> dict[str, Any] | None:
            run = status(env, "rerun").get("currentRun") or {}
            waiting = (run.get("waiting") or {}).get("reason")
            return dict(run) if run.get("job") and waiting == "WaitingForGPUs" else None

        run = wait_for("rerun's second run waiting for GPUs", second_run, timeout=180)
        before = {name: server_pods(env, name) for name in ("steady", "rerun")}
        timings["second run running"] = time.monotonic() - started

        # The upgrade, with the values the bed's releases use; the CRD taken over.
        old_image = release_0_1_0.operator.ref
        values = [
            v for v in op.values() if not v.startswith(("crds.enabled=", "replicaCount="))
        ] + [f"replicaCount={REPLICAS}"]
        lease = LeaseWatch(env)
        lease.sample()
        env.cluster.helm(
            "upgrade",
            op.name,
            *env.cluster.bed.chart_args(),
            "--namespace",
            op.namespace,
            "--take-ownership",
            "--set",
            "crds.enabled=true",
            *sets(values),
        )
        current = env.cluster.bed.image("operator")
        # Ready says nothing of the Lease (a standby replica is Ready too): wait for a
        # current replica to lead as well, or the watch can end before the hand-over.
        lease.until(
            "the current operator Ready and leading",
            lambda: operator_image_up(env, current) and lease.held_by(current),
            600,
        )
        timings["upgraded"] = time.monotonic() - started
        # A pod of each version ran at once; 0.1.0 led until its last pod went, and once
        # the current version held the Lease, 0.1.0 never held it again.
        print(f"upgrade: lease holders {lease.holders}, pods {lease.images}")
        assert lease.both_running, lease.images
        assert lease.versions() == [old_image, current], lease.versions()

        # The CRD is the chart's now: the new field is kept.
        crd = json.loads(env.cluster.kubectl("get", "crd", CRD, "-o", "json"))
        assert crd["metadata"].get("annotations", {}).get("meta.helm.sh/release-name") == op.name
        kept = patch_spec(env, "steady", {NEW_FIELD[0]: {NEW_FIELD[1]: 0}})["spec"]
        assert kept[NEW_FIELD[0]][NEW_FIELD[1]] == 0, kept

        # The run 0.1.0 started is the current operator's now; once GPUs are free it ends
        # with a table, and the server runs it.
        for filler in fillers:
            env.core.delete_namespaced_pod(filler, env.namespace, grace_period_seconds=0)

        def rerun_table() -> dict[str, Any] | None:
            table = live_table(env, "rerun")
            measured = ("run", "profiledAt")
            fresh = table and [table.get(k) for k in measured] != [
                first["rerun"].get(k) for k in measured
            ]
            return table if fresh else None

        second = wait_for("rerun's table from the second run live", rerun_table, timeout=480)
        final = status(env, "rerun")
        print(f"run at the upgrade: {run}\ntable after it: {second}\nstatus: {final}")
        assert not final.get("currentRun"), final
        # The table answers the refresh (the run 0.1.0 started, adopted, or a retry: the
        # printed status says which).
        assert second.get("refreshCount", 0) >= 1, second
        print(f"the run at the upgrade measured the table: {second.get('run') == run['name']}")
        timings["second table live"] = time.monotonic() - started

        # The steady server: same pods, no restart; its table still the one it runs.
        assert (live_table(env, "steady") or {}).get("hash") == first["steady"]["hash"]
        assert server_pods(env, "steady") == before["steady"], (before, server_pods(env, "steady"))
        ready = next(c for c in status(env, "steady")["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True", ready
        # The current operator makes each Deployment a holder of the table it mounts.
        for name, table in (("steady", first["steady"]), ("rerun", second)):
            wait_for(
                f"{name} holds its table",
                lambda name=name, table=table: (
                    f"Deployment/{name}" in holders(env, table["configMap"])
                ),
                timeout=120,
            )

        # Before the rollback, as docs/operator.md asks: steady's new field removed; a
        # profile of no server keeps one, to see 0.1.0 refuse it. Both tables are listed
        # under their server's version-1 key too (api/legacy_tables.py): steady's, measured
        # by 0.1.0 and re-keyed by the upgrade, and rerun's, measured by this version.
        patch_spec(env, "steady", {NEW_FIELD[0]: {NEW_FIELD[1]: None}})
        refused = profile_for(REFUSED)
        refused["spec"][NEW_FIELD[0]] = {NEW_FIELD[1]: 0}
        env.custom.create_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, refused)
        live_cms = {"steady": first["steady"]["configMap"], "rerun": second["configMap"]}
        listed = {
            name: wait_for(
                f"{name}'s table listed under its version-1 key",
                lambda name=name, cm=cm: v1_entry(env, name, cm),
                timeout=120,
            )
            for name, cm in live_cms.items()
        }
        written = {name: objects_written(env, name, cm) for name, cm in live_cms.items()}
        before = {name: server_pods(env, name) for name in ("steady", "rerun")}

        # Rollback to 0.1.0 (its two replicas roll in one at a time beside the current
        # version's): the CRD is kept (resource-policy keep), so are the profiles.
        lease = LeaseWatch(env)
        # The current version holds the Lease when the rollback starts. One sample was not
        # enough: a run under load (ci18) sampled in a moment without a holder (a replica
        # handing the Lease over) and saw only 0.1.0 hold it afterwards.
        lease.until("a current replica holding the Lease", lambda: lease.held_by(current), 120)
        lease.holders = lease.holders[-1:]
        env.cluster.helm("rollback", op.name, "1", "--namespace", op.namespace)
        # Ready and leading (make test, 2026-12-07: 0.1.0's replicas were Ready while the
        # Lease, released by the current version, had no holder yet; the watch ended there).
        lease.until(
            "0.1.0's operator Ready again and leading",
            lambda: operator_image_up(env, old_image) and lease.held_by(old_image),
            600,
        )
        timings["rolled back"] = time.monotonic() - started
        print(f"rollback: lease holders {lease.holders}, pods {lease.images}")
        assert lease.both_running, lease.images
        assert lease.versions() == [current, old_image], lease.versions()
        # A resync of 0.1.0 (--resync-seconds=60) over every profile, watched throughout:
        # neither server, whose table 0.1.0 finds under its own key, is profiled again
        # nor rolled.
        deadline = time.monotonic() + 70
        while time.monotonic() < deadline:
            for name in live_cms:
                assert not status(env, name).get("currentRun"), (name, status(env, name))
            time.sleep(2)
        assert not crd_gone(env), "helm rollback deleted the CRD"
        for name, cm in live_cms.items():
            assert objects_written(env, name, cm) == written[name], (name, written[name])
            assert server_pods(env, name) == before[name], (name, before[name])
        assert "Deployment/steady" in holders(env, live_cms["steady"])
        # 0.1.0 kept each table under the key it found it by, as the current version wrote
        # it: it measured nothing. Without that entry, 0.1.0 starts a ServerChanged run; for
        # steady it adopts the first run's finished Job (same name) and republishes the same
        # table at a later profiledAt; where that Job is gone (rerun's), it measures the
        # server again and restarts it onto the new table.
        key = ("fingerprint", "configMap", "hash", "profiledAt", "run")
        for name, cm in live_cms.items():
            still = v1_entry(env, name, cm) or {}
            assert [still.get(k) for k in key] == [listed[name][k] for k in key], (
                name, still, listed[name],
            )  # fmt: skip
            ready = next(c for c in status(env, name)["conditions"] if c["type"] == "Ready")
            assert ready["status"] == "True", (name, ready)
        # 0.1.0 refuses the spec that uses a field it does not know and says which.
        ready = next(c for c in status(env, REFUSED)["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec"), ready
        assert NEW_FIELD[1] in ready["message"], ready
        # A server pod deleted comes back Ready with the table its Deployment mounts.
        for name in ("steady", "rerun"):
            restart_serves_table(env, name)
        timings["a pod of each server restarted under 0.1.0"] = time.monotonic() - started
    finally:
        print(f"upgrade: cumulative seconds {timings}")
        cleanup(env)
