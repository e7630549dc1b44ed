"""The RBAC review in docs/security.md is the chart's RBAC, verb by verb.

The review's table names every (API group, resource, verb) the operator holds and why;
a verb added to the chart without a reason there, or a row left behind after a verb is
removed, fails here. Both watch modes must grant the same rights (namespaces mode only
narrows where the namespaced ones hold).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from ship_helpers import ROOT, by_kind, render

REVIEW = ROOT / "docs" / "security.md"
TABLE_HEADER = "| API group | resources | verbs | scope | used for | in the wrong hands |"
USER_ROLE_SUFFIXES = ("-edit", "-view")

Grant = tuple[str, str, str]  # (API group, resource, verb)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _names(cell: str) -> list[str]:
    """`a`, `b` -> [a, b]; the core group is written `""`."""
    return [n.strip('"') for n in re.findall(r"`([^`]*)`", cell)]


def review_grants(text: str) -> set[Grant]:
    lines = text.splitlines()
    start = lines.index(TABLE_HEADER) + 2  # the header and its |---| line
    grants: set[Grant] = set()
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        group_cell, resources_cell, verbs_cell, *_ = _cells(line)
        (group,) = _names(group_cell)
        for resource in _names(resources_cell):
            for verb in (v.strip() for v in verbs_cell.split(",")):
                grants.add((group, resource, verb))
    return grants


def chart_grants(objects: list[dict[str, Any]]) -> set[Grant]:
    """What the rendered chart gives the operator's ServiceAccount (the user roles, which
    Kubernetes aggregates into admin/edit/view, are someone else's)."""
    (account,) = by_kind(objects, "ServiceAccount")
    subject = {"kind": "ServiceAccount", "name": account["metadata"]["name"]}
    bound = {
        (b["roleRef"]["kind"], b["roleRef"]["name"])
        for b in by_kind(objects, "RoleBinding") + by_kind(objects, "ClusterRoleBinding")
        if any({k: s.get(k) for k in subject} == subject for s in b.get("subjects") or [])
    }
    grants: set[Grant] = set()
    for role in by_kind(objects, "Role") + by_kind(objects, "ClusterRole"):
        if (role["kind"], role["metadata"]["name"]) not in bound:
            continue
        for rule in role.get("rules") or []:
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    for verb in rule.get("verbs") or []:
                        grants.add((group, resource, verb))
    return grants


MODES = {
    "cluster": [],
    "namespaces": ["watch.mode=namespaces", "watch.namespaces={team-a,team-b}"],
}


@pytest.mark.parametrize("values", MODES.values(), ids=MODES.keys())
def test_the_review_lists_exactly_what_the_chart_grants(values: list[str]) -> None:
    documented = review_grants(REVIEW.read_text())
    granted = chart_grants(render(*values))
    assert granted - documented == set(), "granted by the chart, missing from docs/security.md"
    assert documented - granted == set(), "in docs/security.md, not granted by the chart"


def test_the_review_table_is_read_as_written() -> None:
    row = '| `""`, `events.k8s.io` | `events` | create, patch | namespaced | x | y |'
    text = f"{TABLE_HEADER}\n| --- |\n{row}\n\nafter"
    with pytest.raises(ValueError):  # two groups in one row: the table says one per row
        review_grants(text)
    row = "| `apps` | `deployments`, `replicasets` | get, patch | n | x | y |"
    one = f"{TABLE_HEADER}\n| --- |\n{row}\n"
    assert review_grants(one) == {
        ("apps", "deployments", "get"),
        ("apps", "deployments", "patch"),
        ("apps", "replicasets", "get"),
        ("apps", "replicasets", "patch"),
    }


def test_user_roles_are_not_the_operators() -> None:
    objects = render()
    granted = chart_grants(objects)
    # The user roles grant spsprofiles create; the operator never creates a profile.
    assert ("sps.dev", "spsprofiles", "create") not in granted
    names = [r["metadata"]["name"] for r in by_kind(objects, "ClusterRole")]
    assert any(n.endswith(USER_ROLE_SUFFIXES) for n in names), names


def test_no_verb_the_review_says_is_never_granted() -> None:
    granted = chart_grants(render())
    never = {
        ("", "secrets"),
        ("", "pods/exec"),
        ("", "pods/log"),
        ("apps", "deployments/scale"),
    }
    assert not {(g, r) for g, r, _ in granted} & never
    verbs = {v for _, _, v in granted}
    assert not verbs & {"*", "bind", "escalate", "impersonate", "deletecollection"}
    # update only on the leader-election Lease (the chart names it: resourceNames).
    assert {(g, r) for g, r, v in granted if v == "update"} == {("coordination.k8s.io", "leases")}
    assert ("apps", "deployments", "delete") not in granted
