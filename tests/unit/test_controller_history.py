"""What tables and stable ConfigMaps stay (issue 18, items 9, 12, 25, 27): history holds
its limit across fingerprints and never deletes what a Deployment mounts; one writer per
AnnotateOnly ConfigMap; a stable ConfigMap is released or collected with its profile."""

from __future__ import annotations

from controller_harness import NS, Harness, deployment, profile_body, rounds
from test_controller_safety import ANNOTATE_ONLY, annotate_only_deployment

from sps_operator.api import labels as L
from sps_operator.api.result import build_patch
from sps_operator.controller.finalizer import nothing_to_release, release


def table_config_maps(h: Harness, gpu: str | None = None) -> list[str]:
    return sorted(
        cm["metadata"]["name"]
        for cm in h.kube.kinds("ConfigMap")
        if cm["metadata"]["labels"].get(L.LABEL_COMPONENT) == L.COMPONENT_TABLE
        and (gpu is None or cm["metadata"]["annotations"].get(L.ANNOTATION_GPU) == gpu)
    )


def refresh(h: Harness, token: str, scale: float) -> None:
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": token}
    h.profile_once(result=build_patch(status="succeeded", rounds=rounds(scale=scale)))


# --------------------------------------------------------------------------- item 25


def test_history_limit_holds_across_fingerprints() -> None:
    """Observed: seven image upgrades left eight tables forever (every table of
    status.tables was kept, whatever its fingerprint)."""
    h = Harness.one_target()
    h.profile_once()
    for version in range(2, 9):
        container = h.template()["spec"]["containers"][0]
        container["image"] = f"lmsysorg/sglang:v{version}"
        h.profile_once(
            result=build_patch(status="succeeded", rounds=rounds(scale=1 + version / 10))
        )
    status = h.status()
    live = status["targets"][0]["table"]
    assert status["targets"][0]["state"] == "Live"
    kept = table_config_maps(h)
    assert len(kept) == 3 and live in kept, kept  # spec.historyLimit (3) per GPU product
    assert {t["configMap"] for t in status["tables"]} == set(kept)  # the deleted are forgotten


# --------------------------------------------------------------------------- item 12


def test_history_never_deletes_a_table_a_deployment_mounts_though_not_selected() -> None:
    """Observed: a table a Deployment still mounts, but that no longer matches the
    selector, was deleted; that Deployment's next pod could not start."""
    h = Harness()
    h.add(deployment())
    h.add(deployment("server2"))
    h.add(profile_body(historyLimit=1, refresh={"token": "a"}))
    h.place()
    h.place("server2")
    h.profile_once()
    first = h.status()["targets"][1]["table"]
    assert h.template("server2")["metadata"]["annotations"]["sps.dev/table"] == first
    h.kube.obj("Deployment", "server2")["metadata"]["labels"] = {"app": "elsewhere"}
    refresh(h, "b", 1.2)
    refresh(h, "c", 1.4)
    assert h.status()["targets"][0]["table"] != first
    assert first in table_config_maps(h), "a mounted table was deleted"


# --------------------------------------------------------------------------- item 9


def big_server() -> dict:
    dep = annotate_only_deployment()
    dep["metadata"]["name"] = "big"
    dep["metadata"]["labels"] = {"app": "big"}
    dep["spec"]["selector"]["matchLabels"]["deploy"] = "big"
    pod = dep["spec"]["template"]
    pod["metadata"]["labels"]["deploy"] = "big"
    args = pod["spec"]["containers"][0]["args"]
    args[args.index("org/model-8b")] = "org/model-70b"
    return dep


def two_writers() -> Harness:
    """p (older) and q name the same AnnotateOnly ConfigMap for different servers."""
    h = Harness()
    h.add(annotate_only_deployment())
    h.add(big_server())
    h.add(profile_body("p", **ANNOTATE_ONLY))
    h.add(profile_body("q", selector={"matchLabels": {"app": "big"}}, **ANNOTATE_ONLY))
    h.place()
    h.place("big")
    return h


def stable_hash(h: Harness) -> str:
    return str(
        h.kube.obj("ConfigMap", "llama-sps")["metadata"]["annotations"][L.ANNOTATION_TABLE_HASH]
    )


def fight(h: Harness, names: tuple[str, ...] = ("p", "q")) -> None:
    for _ in range(3):
        for name in names:
            h.tick()
            h.run_pass(name)
            if h.status(name).get("currentRun"):
                h.finish(name)


def test_two_annotate_only_profiles_naming_one_configmap_have_one_writer() -> None:
    """Observed: both overwrote the ConfigMap on every pass and both reported their
    servers as expected (a 70B table read by an 8B server)."""
    h = two_writers()
    fight(h)
    p, q = h.status("p"), h.status("q")
    (table,) = p["tables"]
    assert p["targets"][0]["state"] == "Live" and stable_hash(h) == table["hash"]
    (big,) = q["targets"]
    assert big["state"] == "Refused" and big["reason"] == "Conflict", big
    assert "SpsProfile 'p'" in big["message"] and "tableConfigMap" in big["message"]
    assert not q.get("tables") and not q.get("currentRun")
    cm = h.kube.obj("ConfigMap", "llama-sps")
    assert cm["metadata"]["annotations"][L.ANNOTATION_OWNER] == "p"
    assert not [b for b in h.kube.applied if b["metadata"]["name"] == "big"]  # never written


def test_a_deleted_writer_hands_the_configmap_to_the_profile_naming_it() -> None:
    h = two_writers()
    fight(h)
    meta = h.kube.obj("SpsProfile", "p")["metadata"]
    assert release(h.kube, NS, "p", meta["uid"], "llama-sps") == ["llama-sps"]
    cm = h.kube.obj("ConfigMap", "llama-sps")
    assert L.ANNOTATION_OWNER not in cm["metadata"]["annotations"]
    del h.kube.objects[("SpsProfile", NS, "p")]
    fight(h, ("q",))
    q = h.status("q")
    assert q["targets"][0]["state"] == "Live" and stable_hash(h) == q["tables"][0]["hash"]
    cm = h.kube.obj("ConfigMap", "llama-sps")
    assert cm["metadata"]["annotations"][L.ANNOTATION_OWNER] == "q"
    assert L.LABEL_RELEASED not in cm["metadata"]["labels"]


# --------------------------------------------------------------------------- item 27


def annotate_only_live() -> Harness:
    h = Harness()
    h.add(annotate_only_deployment())
    h.add(profile_body(**ANNOTATE_ONLY))
    h.place()
    h.profile_once()
    assert h.status()["targets"][0]["state"] == "Live"
    return h


def test_deleting_an_annotate_only_profile_releases_the_stable_configmap_a_deployment_mounts() -> (
    None
):
    """Observed: the stable ConfigMap outlived its profile and its Deployment forever (no
    owner, no release label)."""
    h = annotate_only_live()
    meta = h.kube.obj("SpsProfile", "p")["metadata"]
    assert not nothing_to_release("p", meta["uid"], {}, [], [], stable="llama-sps")
    assert "llama-sps" in release(h.kube, NS, "p", meta["uid"], "llama-sps")
    cm = h.kube.obj("ConfigMap", "llama-sps")
    assert cm["metadata"]["labels"][L.LABEL_RELEASED] == "true"
    assert L.ANNOTATION_OWNER not in cm["metadata"]["annotations"]
    assert cm["data"]["table.json"]  # the server keeps reading its table


def test_deleting_an_annotate_only_profile_collects_the_stable_configmap_nothing_mounts() -> None:
    h = annotate_only_live()
    del h.kube.objects[("Deployment", NS, "server")]
    meta = h.kube.obj("SpsProfile", "p")["metadata"]
    release(h.kube, NS, "p", meta["uid"], "llama-sps")
    assert ("ConfigMap", NS, "llama-sps") not in h.kube.objects


def test_a_stable_configmap_git_also_writes_is_released_not_deleted() -> None:
    h = annotate_only_live()
    del h.kube.objects[("Deployment", NS, "server")]
    cm = h.kube.obj("ConfigMap", "llama-sps")
    cm["metadata"]["managedFields"] = [
        {"manager": "argocd-controller"},
        {"manager": "sps-operator"},
    ]
    meta = h.kube.obj("SpsProfile", "p")["metadata"]
    release(h.kube, NS, "p", meta["uid"], "llama-sps")
    assert h.kube.obj("ConfigMap", "llama-sps")["metadata"]["labels"][L.LABEL_RELEASED] == "true"


def test_a_profile_that_never_wrote_the_stable_configmap_leaves_it_alone() -> None:
    h = two_writers()
    fight(h)
    before = h.kube.obj("ConfigMap", "llama-sps")["metadata"]["resourceVersion"]
    meta = h.kube.obj("SpsProfile", "q")["metadata"]
    assert release(h.kube, NS, "q", meta["uid"], "llama-sps") == []
    assert h.kube.obj("ConfigMap", "llama-sps")["metadata"]["resourceVersion"] == before
