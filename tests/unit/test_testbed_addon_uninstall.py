"""Uninstalling an add-on from the bed (Kueue, LeaderWorkerSet), without a cluster: the
order of what is deleted, which finalizers are cleared, and what counts as left over."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sps_testbed import kueue, lws

WEBHOOKS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def manifest(
    group: str, namespace: str, prefix: str, callers: tuple[str, ...]
) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"things.{group}"},
        },
        {"apiVersion": "v1", "kind": "ClusterRole", "metadata": {"name": f"{prefix}-role"}},
    ]
    docs += [{"apiVersion": "v1", "kind": kind, "metadata": {"name": f"{prefix}-{kind.lower()}"}}
             for kind in callers]  # fmt: skip
    return docs


class RecordingBed:
    """kubectl as the uninstall sees it: every call recorded; `get` answers from `left`
    (names per kind) and `items` (objects of the add-on's CRD)."""

    def __init__(self, left: dict[str, list[str]], items: list[dict[str, Any]]) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.inputs: list[list[str]] = []
        self.left = left
        self.items = items

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> str:
        self.calls.append(args)
        if input:
            self.inputs.append([d["kind"] for d in map(json.loads, input.split("\n---\n"))])
        if args[0] == "get" and args[-2:] == ("-o", "json"):
            return json.dumps({"items": self.items})
        if args[0] == "get":
            return "\n".join(self.left.get(args[1], []))
        return ""


ITEMS: list[dict[str, Any]] = [
    {"metadata": {"name": "held", "namespace": "team-a", "finalizers": ["x.io/f"]}},
    {"metadata": {"name": "free", "namespace": "team-a"}},
    {"metadata": {"name": "cluster-wide", "finalizers": ["x.io/f"]}},
]


@pytest.mark.parametrize(
    ("module", "file", "group", "prefix", "callers"),
    [
        (kueue, "kueue.yaml", "kueue.x-k8s.io", "kueue", (*WEBHOOKS, "APIService")),
        (lws, "lws.yaml", "leaderworkerset.x-k8s.io", "lws", WEBHOOKS),
    ],
)
def test_the_callers_go_first_then_the_namespace_finalizers_and_the_rest(
    tmp_path: Path, module: Any, file: str, group: str, prefix: str, callers: tuple[str, ...]
) -> None:
    (tmp_path / file).write_text(
        yaml.safe_dump_all(manifest(group, module.NAMESPACE, prefix, callers))
    )
    bed = RecordingBed(left={}, items=ITEMS)
    module.uninstall(bed, tmp_path, timeout=30)
    verbs = [c[:2] for c in bed.calls]
    ns = module.NAMESPACE
    assert verbs[:4] == [("delete", "--ignore-not-found"), ("delete", "namespace"),
                         ("delete", "pods"), ("wait", "--for=delete")]  # fmt: skip
    assert bed.calls[1][2] == ns and f"namespace/{ns}" in bed.calls[3]
    assert "--grace-period=1" in bed.calls[2]
    # What calls the manager first; the namespace never in the rest (it is going already).
    assert bed.inputs == [list(callers), ["CustomResourceDefinition", "ClusterRole"]]
    patched = [c for c in bed.calls if c[0] == "patch"]
    assert patched == [
        ("patch", f"things.{group}", "held", "-n", "team-a", "--type=merge",
         "-p", '{"metadata":{"finalizers":null}}'),
        ("patch", f"things.{group}", "cluster-wide", "--type=merge",
         "-p", '{"metadata":{"finalizers":null}}'),
    ]  # fmt: skip
    deletes = [i for i, c in enumerate(bed.calls) if c[0] == "delete"]
    assert bed.calls.index(patched[-1]) < deletes[-1]  # CRDs go after their objects are free


@pytest.mark.parametrize(
    ("module", "left", "named"),
    [
        (kueue, {"crd": ["crd/workloads.kueue.x-k8s.io"], "namespace": ["namespace/kueue-system"]},
         "Kueue uninstalled, but these are left: "
         "crd/workloads.kueue.x-k8s.io, namespace/kueue-system"),
        (lws, {"clusterrole": ["clusterrole/lws-manager-role"],
               "crd": ["crd/disaggregatedsets.disaggregatedset.x-k8s.io"]},
         "LeaderWorkerSet uninstalled, but these are left: "
         "crd/disaggregatedsets.disaggregatedset.x-k8s.io, clusterrole/lws-manager-role"),
    ],
)  # fmt: skip
def test_what_is_left_of_the_add_on_is_named(
    tmp_path: Path, module: Any, left: dict[str, list[str]], named: str
) -> None:
    file = "kueue.yaml" if module is kueue else "lws.yaml"
    (tmp_path / file).write_text(yaml.safe_dump_all(manifest("x.io", module.NAMESPACE, "x", ())))
    with pytest.raises(RuntimeError) as raised:
        module.uninstall(RecordingBed(left=left, items=[]), tmp_path, timeout=30)
    assert str(raised.value) == named


@pytest.mark.parametrize("module", [kueue, lws])
def test_a_test_namespace_that_names_the_add_on_is_not_left_over(
    tmp_path: Path, module: Any
) -> None:
    """Test namespaces may have the add-on's name in theirs: only its own names count."""
    file = "kueue.yaml" if module is kueue else "lws.yaml"
    (tmp_path / file).write_text(yaml.safe_dump_all(manifest("x.io", module.NAMESPACE, "x", ())))
    others = ["namespace/e2e-kueue-1", "namespace/test-lws-2", "crd/foos.example.com"]
    module.uninstall(RecordingBed(left={"namespace": others, "crd": others}, items=[]), tmp_path)
