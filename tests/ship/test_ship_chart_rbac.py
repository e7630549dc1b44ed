"""The chart's RBAC and the trust boundary of `status` (issue 18, item 19).

An SpsProfile's status is the operator's memory across restarts: which refresh requests
were answered (`observedToken`, `observedReprofile`, `refreshCount`), the run in flight, the
tables. Whoever may write `spsprofiles/status` can make a reprofile request look answered,
so only the operator's own ServiceAccount may: no role the chart renders for anyone else,
and no role that Kubernetes aggregates into the built-in user roles (admin, edit, view),
names that subresource. docs/reliability.md ("Status is the operator's memory").
"""

from __future__ import annotations

from typing import Any

import pytest
from ship_helpers import by_kind, render

GROUP, STATUS = "sps.dev", "spsprofiles/status"
WRITES = {"create", "update", "patch", "delete", "deletecollection", "*"}
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"

VALUES = {
    "cluster": [],
    "namespaces": ["watch.mode=namespaces", "watch.namespaces={team-a,team-b}"],
    "one-replica": ["replicaCount=1"],
    "no-node-access": ["rbac.nodeAccess=false"],
}


def names_status(rule: dict[str, Any]) -> bool:
    """The rule reaches spsprofiles/status (by name or by a wildcard)."""
    groups, resources = rule.get("apiGroups") or [], rule.get("resources") or []
    in_group = GROUP in groups or "*" in groups
    return in_group and any(r in (STATUS, "spsprofiles/*", "*", "*/status") for r in resources)


def writes_status(rule: dict[str, Any]) -> bool:
    return names_status(rule) and bool(WRITES & set(rule.get("verbs") or []))


def bound_subjects(objects: list[dict[str, Any]], role: dict[str, Any]) -> list[dict[str, Any]]:
    """Everyone the rendered bindings give `role` to (a Role: from its own namespace)."""
    subjects: list[dict[str, Any]] = []
    for binding in by_kind(objects, "RoleBinding") + by_kind(objects, "ClusterRoleBinding"):
        ref = binding["roleRef"]
        if ref["kind"] != role["kind"] or ref["name"] != role["metadata"]["name"]:
            continue
        namespace = binding["metadata"].get("namespace")
        if role["kind"] == "Role" and namespace != role["metadata"].get("namespace"):
            continue
        subjects += binding.get("subjects") or []
    return subjects


@pytest.mark.parametrize("values", VALUES.values(), ids=VALUES.keys())
def test_only_the_operators_own_service_account_may_write_profile_status(
    values: list[str],
) -> None:
    objects = render(*values)
    (account,) = by_kind(objects, "ServiceAccount")
    operator = {
        "kind": "ServiceAccount",
        "name": account["metadata"]["name"],
        "namespace": account["metadata"]["namespace"],
    }
    roles = by_kind(objects, "Role") + by_kind(objects, "ClusterRole")
    writers = [r for r in roles if any(writes_status(rule) for rule in r.get("rules") or [])]
    assert writers, "the operator itself must be allowed to write spsprofiles/status"
    for role in writers:
        name = f"{role['kind']} {role['metadata']['name']}"
        subjects = bound_subjects(objects, role)
        assert subjects and all(s == operator for s in subjects), (name, subjects)
    for role in roles:
        labels = role["metadata"].get("labels") or {}
        aggregated = [k for k, v in labels.items() if k.startswith(AGGREGATE) and v == "true"]
        if aggregated:
            # A role Kubernetes folds into admin/edit/view reaches every user of those.
            assert not any(names_status(rule) for rule in role.get("rules") or []), (
                role["metadata"]["name"],
                aggregated,
            )
        assert "aggregationRule" not in role, role["metadata"]["name"]


def test_the_check_sees_a_user_role_that_could_write_status() -> None:
    """The rule matchers catch the forms a grant can take (so the test above can fail)."""
    assert writes_status({"apiGroups": [GROUP], "resources": [STATUS], "verbs": ["patch"]})
    assert writes_status({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]})
    every_subresource = {"apiGroups": [GROUP], "resources": ["spsprofiles/*"], "verbs": ["update"]}
    assert writes_status(every_subresource)
    assert not writes_status({"apiGroups": [GROUP], "resources": ["spsprofiles"], "verbs": ["*"]})
    assert not writes_status({"apiGroups": [GROUP], "resources": [STATUS], "verbs": ["get"]})
