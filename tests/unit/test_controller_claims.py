"""A clone of a server whose weights are on a PersistentVolumeClaim: ReadWriteOnce runs
next to a ready pod that holds the claim, ReadWriteOncePod is refused, shared claims go
anywhere (controller/policies/claims.py, through the run and the capacity wait)."""

from __future__ import annotations

from typing import Any

from capacity_harness import job_pod
from controller_harness import H100, H200, NODES, NS, Harness, deployment, profile_body
from hypothesis import given
from hypothesis import strategies as st

from sps_operator.api import labels as L
from sps_operator.api.reasons import CLAIM_NODE_UNAVAILABLE, READ_WRITE_ONCE_POD_CLAIM
from sps_operator.controller import indexes as ix
from sps_operator.controller.policies.claims import (
    ACCESS_MODES,
    MAX_CLAIMS,
    ClaimInfo,
    VolumePin,
    claim_info,
    pin_to_node,
    pod_claims,
    volume_pin,
)
from sps_operator.controller.policies.job_policy import Refusal
from sps_operator.controller.policies.placement import PodInfo, pod_info

GPU = "nvidia.com/gpu.product"
WEIGHTS = "weights"
SERVER_LABELS = {"app": "sglang", "deploy": "server"}


def claim(name: str = WEIGHTS, *modes: str, bound: bool = True) -> dict[str, Any]:
    modes = modes or ("ReadWriteOnce",)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"accessModes": list(modes)},
        "status": {"phase": "Bound", "accessModes": list(modes)} if bound else {},
    }


def with_claim(dep: dict[str, Any], name: str = WEIGHTS) -> dict[str, Any]:
    pod = dep["spec"]["template"]["spec"]
    pod["volumes"] = [{"name": "w", "persistentVolumeClaim": {"claimName": name}}]
    pod["containers"][0]["volumeMounts"] = [{"name": "w", "mountPath": "/models"}]
    return dep


def holder(node: str = "n1", ready: bool = True, claims: tuple[str, ...] = (WEIGHTS,)) -> PodInfo:
    return PodInfo("server-0", SERVER_LABELS, node, ready=ready, phase="Running", claims=claims)


def harness(*modes: str, node: str = "n1", ready: bool = True) -> Harness:
    h = Harness()
    h.add(with_claim(deployment()))
    if modes:
        h.add(claim(WEIGHTS, *modes))
    h.add(profile_body())
    h.pods = [holder(node, ready)]
    return h


def job_pod_spec(h: Harness) -> dict[str, Any]:
    (job,) = h.kube.kinds("Job")
    return job["spec"]["template"]["spec"]


def required_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return list(required["nodeSelectorTerms"])


# --------------------------------------------------------------------------- the decision


def test_a_read_write_once_claim_pins_the_clone_to_the_node_of_a_ready_holder() -> None:
    spec = with_claim(deployment())["spec"]["template"]["spec"]
    pods = [holder("n2", ready=False), holder("n1")]
    pin = volume_pin(spec, {WEIGHTS: claim_info(WEIGHTS, {}, {"accessModes": ["ReadWriteOnce"]})},
                     pods, NODES, GPU, H100)  # fmt: skip
    assert pin == VolumePin(node="n1", claims=(WEIGHTS,))
    assert "pin it to node n1" in pin.describe()


def test_a_read_write_once_pod_claim_is_refused_with_what_to_do() -> None:
    spec = with_claim(deployment())["spec"]["template"]["spec"]
    infos = {WEIGHTS: ClaimInfo(WEIGHTS, frozenset({"ReadWriteOncePod"}))}
    refusal = volume_pin(spec, infos, [holder()], NODES, GPU, H100)
    assert isinstance(refusal, Refusal)
    assert refusal.reason == READ_WRITE_ONCE_POD_CLAIM
    assert WEIGHTS in refusal.message and "ReadOnlyMany" in refusal.message


def test_shared_claims_do_not_pin_the_clone() -> None:
    spec = with_claim(deployment())["spec"]["template"]["spec"]
    for mode in ("ReadOnlyMany", "ReadWriteMany"):
        infos = {WEIGHTS: ClaimInfo(WEIGHTS, frozenset({mode}))}
        assert volume_pin(spec, infos, [], NODES, GPU, H100) == VolumePin()


def test_an_unknown_claim_counts_as_read_write_once() -> None:
    spec = with_claim(deployment())["spec"]["template"]["spec"]
    assert volume_pin(spec, {}, [holder("n1")], NODES, GPU, H100).node == "n1"  # type: ignore[union-attr]


def test_a_claim_held_only_on_another_gpu_product_is_refused() -> None:
    spec = with_claim(deployment())["spec"]["template"]["spec"]
    refusal = volume_pin(spec, {}, [holder("n2")], NODES, GPU, H100)
    assert isinstance(refusal, Refusal) and refusal.reason == CLAIM_NODE_UNAVAILABLE
    assert "n2" in refusal.message and H100 in refusal.message


def test_pin_to_node_is_anded_with_every_required_term() -> None:
    pod: dict[str, Any] = {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
        ]}}}}  # fmt: skip
    pin_to_node(pod, "n1")
    terms = required_terms(pod)
    assert len(terms) == 2
    for term in terms:
        assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]
        assert term["matchExpressions"]
    bare: dict[str, Any] = {}
    pin_to_node(bare, "n1")
    assert required_terms(bare) == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    ]


# --------------------------------------------------------------------------- a pass


def test_the_job_of_a_read_write_once_target_runs_on_the_holders_node() -> None:
    h = harness("ReadWriteOnce")
    h.tick()
    status = h.run_pass()
    assert status.get("currentRun"), status.get("lastFailure")
    pod = job_pod_spec(h)
    assert required_terms(pod)[0]["matchFields"][0]["values"] == ["n1"]
    assert pod["nodeSelector"][GPU] == H100  # the GPU pin still holds
    assert pod["volumes"][-1]["persistentVolumeClaim"]["claimName"] == WEIGHTS
    (job,) = h.kube.kinds("Job")
    assert "node n1" in job["metadata"]["annotations"][L.ANNOTATION_VOLUME_PIN]


def test_a_read_write_many_target_is_not_pinned() -> None:
    h = harness("ReadWriteMany")
    h.tick()
    h.run_pass()
    assert "affinity" not in job_pod_spec(h)
    (job,) = h.kube.kinds("Job")
    assert L.ANNOTATION_VOLUME_PIN not in (job["metadata"].get("annotations") or {})


def test_a_read_write_once_pod_target_creates_no_job_and_says_so() -> None:
    h = harness("ReadWriteOncePod")
    h.tick()
    status = h.run_pass()
    assert not h.kube.kinds("Job") and not status.get("currentRun")
    assert status["lastFailure"]["reason"] == READ_WRITE_ONCE_POD_CLAIM
    assert h.condition("Degraded")[:2] == ("True", READ_WRITE_ONCE_POD_CLAIM)


def test_the_run_starts_once_a_holder_is_ready() -> None:
    h = harness("ReadWriteOnce", ready=False)
    h.tick()
    status = h.run_pass()
    assert status["lastFailure"]["reason"] == CLAIM_NODE_UNAVAILABLE and not h.kube.kinds("Job")
    h.pods = [holder("n1")]
    h.tick()
    status = h.run_pass()
    assert status.get("currentRun") and h.kube.kinds("Job")
    assert not status.get("lastFailure")


def test_a_waiting_pinned_job_says_which_claim_pins_it_where() -> None:
    h = harness("ReadWriteOnce")
    h.tick()
    h.run_pass()
    job_pod(h)  # unschedulable: no free GPU
    h.tick()
    waiting = h.run_pass()["currentRun"]["waiting"]
    assert waiting["reason"] == "WaitingForGPUs"
    assert f"claim(s) {WEIGHTS} pin it to node n1" in waiting["message"]


def test_the_claim_index_feeds_the_cached_pass() -> None:
    h = Harness()
    dep = with_claim(deployment())
    h.add(dep)
    h.add(claim(WEIGHTS, "ReadWriteOncePod"))
    h.add(profile_body())
    other = claim("unrelated", "ReadWriteOncePod")
    objects = [*h.cluster_objects(), {**other, "metadata": {"name": "x", "namespace": "other"}}]
    body = h.kube.obj("SpsProfile", "p", NS)
    from controller_harness import indexes_of

    world = ix.world_for(body, indexes_of(objects))
    assert set(world.claims) == {WEIGHTS}
    assert world.claims[WEIGHTS].pod_exclusive


def test_the_pod_index_keeps_the_claims_a_pod_mounts() -> None:
    spec = {"nodeName": "n1", "volumes": [
        {"name": "a", "persistentVolumeClaim": {"claimName": "w2"}},
        {"name": "b", "persistentVolumeClaim": {"claimName": "w1"}},
        {"name": "c", "emptyDir": {}},
    ]}  # fmt: skip
    assert pod_info("p", {}, spec, {}, {}).claims == ("w1", "w2")


# --------------------------------------------------------------------------- outside input

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(
    spec=st.dictionaries(st.sampled_from(["accessModes", "x"]), JSON, max_size=2),
    status=st.dictionaries(st.sampled_from(["accessModes", "phase"]), JSON, max_size=2),
)
def test_claim_info_keeps_only_known_access_modes(spec: dict, status: dict) -> None:
    info = claim_info("c", spec, status)
    assert info.access_modes <= ACCESS_MODES


CLAIM_SOURCE = st.fixed_dictionaries({"claimName": st.one_of(JSON, st.text(max_size=300))})
VOLUME = st.fixed_dictionaries(
    {"name": st.text(max_size=4), "persistentVolumeClaim": st.one_of(JSON, CLAIM_SOURCE)}
)


@given(volumes=st.one_of(JSON, st.lists(st.one_of(JSON, VOLUME), max_size=60)))
def test_pod_claims_survives_any_volume_list_and_stays_bounded(volumes: Any) -> None:
    claims = pod_claims({"volumes": volumes})
    assert len(claims) <= MAX_CLAIMS
    assert all(isinstance(c, str) and 0 < len(c) <= 253 for c in claims)
    assert list(claims) == sorted(set(claims))


@given(
    modes=st.frozensets(st.sampled_from(sorted(ACCESS_MODES))),
    pods=st.lists(
        st.builds(
            PodInfo,
            name=st.just("s"),
            labels=st.just(SERVER_LABELS),
            node=st.sampled_from([None, "n1", "n2", "n3"]),
            ready=st.booleans(),
            phase=st.sampled_from([None, "Running", "Pending", "Succeeded"]),
            claims=st.sampled_from([(), (WEIGHTS,)]),
        ),
        max_size=5,
    ),
    product=st.sampled_from([H100, H200]),
)
def test_a_pin_is_always_a_ready_holder_of_the_product(
    modes: frozenset[str], pods: list[PodInfo], product: str
) -> None:
    spec = with_claim(deployment())["spec"]["template"]["spec"]
    result = volume_pin(spec, {WEIGHTS: ClaimInfo(WEIGHTS, modes)}, pods, NODES, GPU, product)
    if "ReadWriteOncePod" in modes:
        assert isinstance(result, Refusal) and result.reason == READ_WRITE_ONCE_POD_CLAIM
    elif isinstance(result, VolumePin) and result.node is not None:
        assert NODES[result.node][GPU] == product
        assert any(p.node == result.node and p.ready and WEIGHTS in p.claims for p in pods)
    elif isinstance(result, Refusal):
        assert result.reason == CLAIM_NODE_UNAVAILABLE
        assert not (modes & {"ReadOnlyMany", "ReadWriteMany"})
    else:
        assert modes & {"ReadOnlyMany", "ReadWriteMany"}
