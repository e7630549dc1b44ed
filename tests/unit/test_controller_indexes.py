"""The operator's cache keys and lookups (`controller/indexes.py`), against brute force:
every key carries the object's own namespace, an owner is an ownerReference (never a
label), and the label shortcuts find exactly what a scan of the namespace would."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sps_operator.api import labels as L
from sps_operator.controller import indexes as ix
from sps_operator.controller.policies.borrow import pdb_covers
from sps_operator.controller.policies.selectors import matches_selector

NAMESPACES = ("a", "b")
keys = st.sampled_from(["app", "tier", "bench", "zone"])
label_values = st.sampled_from(["x", "y", "z"])
label_sets = st.dictionaries(keys, label_values, max_size=3)
expressions = st.fixed_dictionaries(
    {
        "key": keys,
        "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]),
        "values": st.lists(label_values, max_size=2),
    }
)
selectors = st.fixed_dictionaries(
    {}, optional={"matchLabels": label_sets, "matchExpressions": st.lists(expressions, max_size=2)}
)
placed = st.tuples(st.sampled_from(NAMESPACES), label_sets)


def indexed(entries: Any, bodies: list[dict[str, Any]]) -> dict[Any, list[Any]]:
    index: dict[Any, list[Any]] = {}
    for body in bodies:
        for key, value in entries(body).items():
            index.setdefault(key, []).append(value)
    return index


def deployment(i: int, namespace: str, labels: dict[str, str], pod_selector: Any = None,
               template: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    return {
        "metadata": {"name": f"d{i}", "namespace": namespace, "labels": labels},
        "spec": {
            "selector": pod_selector if pod_selector is not None else {"matchLabels": labels},
            "template": {"metadata": {"labels": template if template is not None else labels}},
        },
    }


def names(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objects)


@given(st.lists(placed, max_size=8), selectors)
def test_a_profiles_selector_finds_exactly_its_namespaces_matches(
    world: list[tuple[str, dict[str, str]]], selector: dict[str, Any]
) -> None:
    deps = [deployment(i, ns, labels) for i, (ns, labels) in enumerate(world)]
    found = ix.deployments_selected(indexed(ix.deployment_entries, deps), "a", selector)
    expected = [
        d
        for d in deps
        if d["metadata"]["namespace"] == "a" and matches_selector(selector, d["metadata"]["labels"])
    ]
    assert names(found) == names(expected)


@given(st.lists(st.tuples(st.sampled_from(NAMESPACES), selectors), max_size=8), placed)
def test_a_pod_finds_exactly_the_deployments_whose_selector_matches_it(
    world: list[tuple[str, dict[str, Any]]], pod: tuple[str, dict[str, str]]
) -> None:
    deps = [deployment(i, ns, {}, pod_selector=sel) for i, (ns, sel) in enumerate(world)]
    namespace, labels = pod
    found = ix.deployments_for_pod(indexed(ix.deployment_entries, deps), namespace, labels)
    expected = [
        d
        for d in deps
        if d["metadata"]["namespace"] == namespace
        and matches_selector(d["spec"]["selector"], labels)
    ]
    assert names(found) == names(expected)


@given(st.lists(placed, max_size=8), selectors)
def test_a_budget_finds_exactly_the_deployments_whose_pods_it_covers(
    world: list[tuple[str, dict[str, str]]], selector: dict[str, Any]
) -> None:
    deps = [deployment(i, ns, {}, template=labels) for i, (ns, labels) in enumerate(world)]
    found = ix.deployments_covered(indexed(ix.deployment_entries, deps), "a", selector)
    expected = [
        d
        for d in deps
        if d["metadata"]["namespace"] == "a"
        and pdb_covers(
            {"spec": {"selector": selector}}, d["spec"]["template"]["metadata"]["labels"]
        )
    ]
    assert names(found) == names(expected)


@given(st.lists(st.tuples(st.sampled_from(NAMESPACES), selectors), max_size=8), label_sets)
def test_every_profile_that_selects_a_deployment_is_found_and_none_from_elsewhere(
    world: list[tuple[str, dict[str, Any]]], labels: dict[str, str]
) -> None:
    bodies = [
        {
            "metadata": {"name": f"p{i}", "uid": f"u{i}", "namespace": ns},
            "spec": {"selector": sel},
        }
        for i, (ns, sel) in enumerate(world)
    ]
    found = {
        p.uid
        for p in ix.profiles_for(
            indexed(ix.profile_entries, bodies), "a", deployment(0, "a", labels)
        )
    }
    selecting = {
        b["metadata"]["uid"]
        for b in bodies
        if b["metadata"]["namespace"] == "a" and matches_selector(b["spec"]["selector"], labels)
    }
    assert selecting <= found
    assert all(b["metadata"]["namespace"] == "a" for b in bodies if b["metadata"]["uid"] in found)


OWNER_REF = {
    "apiVersion": "sps.dev/v1alpha1",
    "kind": "SpsProfile",
    "uid": "u1",
    "controller": True,
}


@given(
    st.sampled_from(NAMESPACES),
    st.text("abc-", min_size=1, max_size=8),
    st.dictionaries(
        st.sampled_from([L.LABEL_PROFILE_UID, L.LABEL_RUN, "app"]), st.text("abu1", max_size=4)
    ),
    st.booleans(),
)
def test_every_key_carries_the_objects_own_namespace_and_owners_come_from_references(
    namespace: str, name: str, labels: dict[str, str], owned: bool
) -> None:
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "uid": "x"},
        "spec": {"selector": {"matchLabels": labels}, "nodeName": "n1",
                 "rollout": {"mode": "AnnotateOnly", "tableConfigMap": name}},
    }  # fmt: skip
    if owned:
        body["metadata"]["ownerReferences"] = [OWNER_REF]
    entries = [ix.deployment_entries, ix.job_entries, ix.config_map_entries, ix.profile_entries,
               ix.pod_entries, ix.pdb_entries, ix.hpa_entries]  # fmt: skip
    for entry in entries:
        for key in entry(body):
            assert key[0] == ix.NODE or key[1] == namespace, (entry.__name__, key)
    owners = {key[2] for entry in (ix.job_entries, ix.config_map_entries)
              for key in entry(body) if key[0] == ix.OWNER}  # fmt: skip
    assert owners == ({"u1"} if owned else set())  # never the label's UID


def test_a_uid_is_an_owner_only_as_a_controller_reference_to_an_spsprofile() -> None:
    def cm(ref: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": "c", "namespace": "a", "ownerReferences": [ref]}}

    assert ix.controller_profile(cm(OWNER_REF)) == "u1"
    assert ix.controller_profile(cm({**OWNER_REF, "controller": False})) is None
    assert ix.controller_profile(cm({**OWNER_REF, "kind": "Deployment"})) is None
    assert ix.controller_profile(cm({**OWNER_REF, "apiVersion": "evil.dev/v1"})) is None
