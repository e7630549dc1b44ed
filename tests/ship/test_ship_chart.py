"""The Helm chart: lint, render the main value combinations, assert on the objects."""

from __future__ import annotations

import json
import subprocess
from dataclasses import astuple
from pathlib import Path
from typing import Any

import pytest
import yaml
from ship_helpers import CHART, ROOT, by_kind, helm, render

from sps_operator.api import labels as L
from sps_operator.controller.main import job_policy, key_values, parse_args
from sps_operator.controller.passes.state import Settings
from sps_operator.controller.policies.job_policy import BORROW_BOUNDS, JobPolicy, NameRule
from sps_operator.controller.policies.pace import DEFAULT_CEILING


def rules_grant(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", [])
        and resource in r.get("resources", [])
        and (verb in r.get("verbs", []) or "*" in r.get("verbs", []))
        for r in rules
    )


AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"


def operator_cluster_roles(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The operator's own ClusterRoles (not those aggregated into the user roles)."""
    return [
        r
        for r in by_kind(objects, "ClusterRole")
        if not any(k.startswith(AGGREGATE) for k in r["metadata"]["labels"])
    ]


def operator_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = by_kind(objects, "Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "operator")


@pytest.mark.parametrize(
    "values",
    [[], ["watch.mode=namespaces", "watch.namespaces={team-a,team-b}"]],
    ids=["cluster", "namespaces"],
)
def test_helm_lint(values: list[str]) -> None:
    args = ["lint", "--strict", str(CHART)]
    for item in values:
        args += ["--set", item]
    result = helm(*args, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_default_render_cluster_mode() -> None:
    objects = render()
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted(
        ["ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding",
         "CustomResourceDefinition", "Deployment", "PodDisruptionBudget", "Role", "Role",
         "RoleBinding", "RoleBinding", "Service", "ServiceAccount"]
    ), kinds  # fmt: skip
    for obj in objects:
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"):
            assert obj["metadata"]["namespace"] == "sps-system", obj["metadata"]
    container = operator_container(objects)
    assert container["image"] == "ghcr.io/sps-dev/sps-operator:0.1.0"
    assert container["args"][0] == "run"
    assert "--all-namespaces" in container["args"]
    assert not any(a.startswith("--namespace") for a in container["args"])
    # Nothing in the image plots: no matplotlib configuration directory.
    assert [e["name"] for e in container["env"]] == ["POD_NAMESPACE", "POD_NAME"]

    (cluster_role,) = operator_cluster_roles(objects)
    assert cluster_role["metadata"]["name"] == "sps-operator"
    rules = cluster_role["rules"]
    for group, resource, verb in [
        ("sps.dev", "spsprofiles", "watch"),
        ("sps.dev", "spsprofiles/status", "patch"),
        ("batch", "jobs", "create"),
        ("", "configmaps", "create"),
        ("apps", "deployments", "patch"),
        ("", "pods", "list"),
        ("", "services", "watch"),  # a profiling pod must never be selected by a Service
        ("", "events", "create"),
        # the per-run profiler ServiceAccount and its Role
        ("", "serviceaccounts", "create"),
        ("rbac.authorization.k8s.io", "roles", "create"),
        ("rbac.authorization.k8s.io", "rolebindings", "create"),
        ("", "nodes", "watch"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
        ("", "namespaces", "list"),
        # Kueue's words on a queued profiling Job, and whether its LocalQueue exists
        ("kueue.x-k8s.io", "workloads", "watch"),
        ("kueue.x-k8s.io", "localqueues", "get"),
        # and its position in the queue (Kueue's visibility API)
        ("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", "get"),
    ]:
        assert rules_grant(rules, group, resource, verb), (group, resource, verb)
    # Events are created as core/v1 only (kopf's and the operator's), never patched.
    assert not rules_grant(rules, "", "events", "patch")
    assert not rules_grant(rules, "events.k8s.io", "events", "create")
    for verb in ("create", "update", "patch", "delete"):
        assert not rules_grant(rules, "kueue.x-k8s.io", "workloads", verb)
        assert not rules_grant(rules, "kueue.x-k8s.io", "localqueues", verb)
    # Least privilege: no wildcards, no secrets, never delete Deployments, never update a spec.
    assert not any("*" in r["verbs"] or "*" in r["resources"] for r in rules)
    assert not rules_grant(rules, "", "secrets", "get")
    # A multi-node clone's headless Service is created and deleted; never changed after.
    assert rules_grant(rules, "", "services", "create")
    assert not rules_grant(rules, "", "services", "patch")
    assert not rules_grant(rules, "", "services", "update")
    assert not rules_grant(rules, "apps", "deployments", "delete")
    assert not rules_grant(rules, "sps.dev", "spsprofiles", "update")
    assert not rules_grant(rules, "", "configmaps", "update")  # tables are immutable; SSA patches
    for binding in by_kind(objects, "ClusterRoleBinding"):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "sps-operator", "namespace": "sps-system"}
        ], binding
    # The only namespaced Roles, both in the release namespace: leader election on one
    # named Lease, and BorrowReplica's pool Leases (one per GPU product).
    roles = {r["metadata"]["name"]: r for r in by_kind(objects, "Role")}
    assert sorted(roles) == ["sps-operator-borrow", "sps-operator-leader"]
    assert {r["metadata"]["namespace"] for r in roles.values()} == {"sps-system"}
    leader = roles["sps-operator-leader"]["rules"]
    assert rules_grant(leader, "coordination.k8s.io", "leases", "update")
    assert not rules_grant(leader, "coordination.k8s.io", "leases", "delete")
    pools = roles["sps-operator-borrow"]["rules"]
    for verb in ("get", "list", "create", "patch", "delete"):
        assert rules_grant(pools, "coordination.k8s.io", "leases", verb), verb
    assert not rules_grant(pools, "coordination.k8s.io", "leases", "update")
    # The borrow record and the replicas are one patch of the Deployment: no scale access.
    assert not rules_grant(rules, "apps", "deployments/scale", "patch")
    args = operator_container(objects)["args"]
    assert "--leader-election" in args and "--lease-name=sps-operator" in args
    assert "--min-refresh-interval-seconds=3600" in args
    (deployment,) = by_kind(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    single = render("replicaCount=1", "refresh.minIntervalSeconds=7200")
    assert [r["metadata"]["name"] for r in by_kind(single, "Role")] == ["sps-operator-borrow"]
    assert "--leader-election" not in operator_container(single)["args"]
    assert "--min-refresh-interval-seconds=7200" in operator_container(single)["args"]


def test_user_roles_let_edit_use_profiles_but_never_write_their_status() -> None:
    roles = {r["metadata"]["name"]: r for r in by_kind(render(), "ClusterRole")}
    edit, view = roles["sps-operator-edit"], roles["sps-operator-view"]
    aggregated = {
        name: sorted(k.removeprefix(AGGREGATE) for k in r["metadata"]["labels"] if AGGREGATE in k)
        for name, r in (("edit", edit), ("view", view))
    }
    assert aggregated == {"edit": ["admin", "edit"], "view": ["view"]}
    for verb in ("create", "update", "patch", "delete"):
        assert rules_grant(edit["rules"], "sps.dev", "spsprofiles", verb)
        assert not rules_grant(view["rules"], "sps.dev", "spsprofiles", verb)
    assert rules_grant(view["rules"], "sps.dev", "spsprofiles", "list")
    for role in (edit, view):
        assert [r["resources"] for r in role["rules"]] == [["spsprofiles"]]  # not status
    without = by_kind(render("rbac.userRoles=false"), "ClusterRole")
    assert [r["metadata"]["name"] for r in without] == ["sps-operator"]


def test_service_account_name_matches_bindings() -> None:
    objects = render(release="prod")
    (sa,) = by_kind(objects, "ServiceAccount")
    (deployment,) = by_kind(objects, "Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    for binding in by_kind(objects, "ClusterRoleBinding"):
        assert binding["subjects"][0]["name"] == sa["metadata"]["name"]
        assert binding["roleRef"]["name"] in {
            r["metadata"]["name"] for r in by_kind(objects, "ClusterRole")
        }


def test_restricted_pod_security() -> None:
    objects = render()
    (deployment,) = by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = operator_container(objects)["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # A read-only root needs a writable scratch dir.
    mounts = {m["mountPath"]: m["name"] for m in operator_container(objects)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]


def test_extra_volumes_are_added_beside_the_scratch_dir() -> None:
    objects = render(
        "extraVolumes[0].name=ca",
        "extraVolumes[0].configMap.name=corp-ca",
        "extraVolumeMounts[0].name=ca",
        "extraVolumeMounts[0].mountPath=/etc/ssl/corp",
        "extraVolumeMounts[0].readOnly=true",
    )
    (deployment,) = by_kind(objects, "Deployment")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["ca"] == {"name": "ca", "configMap": {"name": "corp-ca"}}
    assert "emptyDir" in volumes["tmp"]
    mounts = {m["mountPath"]: m for m in operator_container(objects)["volumeMounts"]}
    assert mounts["/etc/ssl/corp"] == {"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": True}
    assert mounts["/tmp"]["name"] == "tmp"


def test_probes_resources_and_metrics_port() -> None:
    objects = render("health.port=8181", "metrics.port=9191")
    container = operator_container(objects)
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8181, "metrics": 9191}
    assert "--liveness=http://0.0.0.0:8181/healthz" in container["args"]
    assert "--metrics-port=9191" in container["args"]
    assert container["resources"]["requests"]["cpu"]
    assert container["resources"]["requests"]["memory"]
    (service,) = by_kind(objects, "Service")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9191, "targetPort": "metrics", "protocol": "TCP"}
    ]
    pod_labels = by_kind(objects, "Deployment")[0]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_namespaces_mode_role_per_namespace() -> None:
    objects = render("watch.mode=namespaces", "watch.namespaces={team-a,team-b}")
    own = ("-leader", "-borrow")  # the release namespace's own Roles
    roles = [r for r in by_kind(objects, "Role") if not r["metadata"]["name"].endswith(own)]
    bindings = [
        b for b in by_kind(objects, "RoleBinding") if not b["metadata"]["name"].endswith(own)
    ]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"][0]["namespace"] == "sps-system"
    for role in roles:
        assert rules_grant(role["rules"], "sps.dev", "spsprofiles", "watch")
        assert rules_grant(role["rules"], "batch", "jobs", "create")
        assert rules_grant(role["rules"], "kueue.x-k8s.io", "workloads", "list")
        assert rules_grant(role["rules"], "kueue.x-k8s.io", "localqueues", "get")
    # Only the cluster-scoped reads remain in a ClusterRole.
    (cluster_role,) = operator_cluster_roles(objects)
    assert cluster_role["metadata"]["name"] == "sps-operator-cluster"
    for rule in cluster_role["rules"]:
        assert set(rule["resources"]) <= {"nodes", "namespaces", "customresourcedefinitions"}
        assert set(rule["verbs"]) <= {"get", "list", "watch"}
    assert rules_grant(cluster_role["rules"], "", "nodes", "list")
    args = operator_container(objects)["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args
    assert "--all-namespaces" not in args


def test_node_access_can_be_dropped() -> None:
    (role,) = operator_cluster_roles(render("rbac.nodeAccess=false"))
    assert not rules_grant(role["rules"], "", "nodes", "list")
    assert rules_grant(role["rules"], "sps.dev", "spsprofiles", "watch")


def test_operator_arguments_follow_values() -> None:
    args = operator_container(render())["args"]
    assert "--profiler-image=ghcr.io/sps-dev/sps-operator:0.1.0" in args
    assert "--log-format=json" in args
    assert "--debug" not in args and "--verbose" not in args
    args = operator_container(
        render(
            "operator.logLevel=debug",
            "operator.profilerImage=reg/p:1",
            "operator.extraArgs={--resync-seconds=5}",
        )
    )["args"]
    assert "--debug" in args
    assert "--profiler-image=reg/p:1" in args
    assert args[-1] == "--resync-seconds=5"


def test_job_defaults_become_operator_flags_it_parses() -> None:
    args = operator_container(render())["args"]
    assert not any(a.startswith(("--job-label", "--job-annotation", "--job-prio")) for a in args)
    args = operator_container(
        render(
            r"jobDefaults.labels.kueue\.x-k8s\.io/queue-name=gpu-profiling",
            "jobDefaults.labels.team=ml",
            r"jobDefaults.annotations.example\.com/owner=ml team\, on call: 42",
            "jobDefaults.priorityClassName=profiling-low",
        )
    )["args"]
    assert "--job-label=kueue.x-k8s.io/queue-name=gpu-profiling" in args
    assert "--job-label=team=ml" in args
    assert "--job-priority-class=profiling-low" in args
    # What the chart renders is what the operator reads: its own parser, its defaults.
    parsed = parse_args(args[1:])
    assert key_values(parsed.job_label, "--job-label") == {
        "kueue.x-k8s.io/queue-name": "gpu-profiling",
        "team": "ml",
    }
    assert key_values(parsed.job_annotation, "--job-annotation") == {
        "example.com/owner": "ml team, on call: 42"
    }
    assert parsed.job_priority_class == "profiling-low"


def test_the_borrow_bounds_become_flags_the_operator_parses_to_its_own_defaults() -> None:
    """Issue 33 §2: every hold of the shared GPU pool has the admin's bound; the chart's
    defaults are the operator's, and a value reaches it."""
    parsed = parse_args(operator_container(render())["args"][1:])
    assert (parsed.max_lent_seconds, parsed.max_rollout_hold_seconds,
            parsed.max_pool_turn_seconds) == astuple(BORROW_BOUNDS)  # fmt: skip
    args = operator_container(render("borrowPolicy.maxRolloutHoldSeconds=600"))["args"]
    assert parse_args(args[1:]).max_rollout_hold_seconds == 600


def test_the_rollout_ceiling_becomes_a_flag_the_operator_parses_to_its_own_default() -> None:
    """Issue 34 §1: the chart's ceiling on targets mid-rollout at once is the operator's."""
    parsed = parse_args(operator_container(render())["args"][1:])
    assert parsed.max_concurrent_rollouts == DEFAULT_CEILING == 10
    args = operator_container(render("rollout.maxConcurrent=3"))["args"]
    assert parse_args(args[1:]).max_concurrent_rollouts == 3


def test_the_workload_progress_bound_becomes_a_flag_the_operator_parses() -> None:
    """Issue 34: the admin's bound of a StatefulSet's or LeaderWorkerSet's roll (they have
    no progressDeadlineSeconds); the chart's default is the operator's; and the chart's
    RBAC lets the operator patch the new kinds."""
    rendered = render()
    parsed = parse_args(operator_container(rendered)["args"][1:])
    assert parsed.workload_progress_seconds == Settings().workload_progress_seconds == 600
    args = operator_container(render("workloadProgressSeconds=1200"))["args"]
    assert parse_args(args[1:]).workload_progress_seconds == 1200
    rules = [r for role in by_kind(rendered, "ClusterRole") for r in role.get("rules") or []]
    for group, resource in [("apps", "statefulsets"), ("leaderworkerset.x-k8s.io",
                                                       "leaderworkersets")]:  # fmt: skip
        (rule,) = [r for r in rules if group in r["apiGroups"] and resource in r["resources"]]
        assert {"get", "list", "watch", "patch"} <= set(rule["verbs"])


def test_the_admin_policy_becomes_flags_the_operator_parses_to_its_own_defaults(
    tmp_path: Path,
) -> None:
    """The chart's default policy is the operator's (they cannot drift), and every value
    reaches the operator as the rule it names."""
    args = operator_container(render())["args"]
    assert job_policy(parse_args(args[1:])) == JobPolicy()
    values = {
        "jobPolicy": {
            "allowedImages": ["registry.example.com/sps/*"],
            "allowedQueues": ["team-a", "team-b"],
            "priorityClasses": {"allowed": ["*", "system-cluster-critical"], "reserved": []},
            "labelKeys": {"allowed": ["team", "app.kubernetes.io/*"], "reserved": ["x.io/*"]},
            "annotationKeys": {"allowed": ["*"], "reserved": []},
            "maxActiveDeadlineSeconds": 7200,
            "allowedServerHosts": ["*.{namespace}.svc.cluster.local", "gpu-*.example.com"],
        }
    }
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    out = helm("template", "x", str(CHART), "--kube-version", "1.36.0",
               "-f", str(tmp_path / "values.yaml")).stdout  # fmt: skip
    args = operator_container([d for d in yaml.safe_load_all(out) if d])["args"]
    assert job_policy(parse_args(args[1:])) == JobPolicy(
        allowed_images=("registry.example.com/sps/*",),
        allowed_queues=("team-a", "team-b"),
        priority_classes=NameRule(("*", "system-cluster-critical"), ()),
        label_keys=NameRule(("team", "app.kubernetes.io/*"), ("x.io/*",)),
        annotation_keys=NameRule(("*",), ()),
        max_active_deadline_seconds=7200,
        allowed_server_hosts=("*.{namespace}.svc.cluster.local", "gpu-*.example.com"),
    )


@pytest.mark.parametrize(
    "value",
    [
        "jobPolicy.maxActiveDeadlineSeconds=30",
        "jobPolicy.allowedQueues={a b}",
        "jobPolicy.labelKeys.allowed={a,,b}",
        "jobPolicy.allowedServerHosts={a;b c}",
        "jobPolicy.priorityClasses.unknown=1",
    ],
)
def test_the_schema_refuses_a_policy_the_operator_could_not_read(value: str) -> None:
    result = helm(
        "template", "x", str(CHART), "--kube-version", "1.36.0", "--set", value, check=False
    )
    assert result.returncode != 0 and "jobPolicy" in result.stderr, result.stderr


def test_service_monitor_optional_and_selects_the_metrics_service() -> None:
    assert not by_kind(render(), "ServiceMonitor")
    objects = render(
        "metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=prom"
    )
    (monitor,) = by_kind(objects, "ServiceMonitor")
    (service,) = by_kind(objects, "Service")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


def test_metrics_disabled_renders_no_service_and_no_port() -> None:
    objects = render("metrics.enabled=false", "metrics.serviceMonitor.enabled=true")
    assert not by_kind(objects, "Service")
    assert not by_kind(objects, "ServiceMonitor")
    container = operator_container(objects)
    assert [p["name"] for p in container["ports"]] == ["health"]
    assert not any(a.startswith("--metrics-port") for a in container["args"])


def test_image_digest_wins_over_tag_and_keeps_it() -> None:
    digest = "sha256:" + "ab" * 32
    container = operator_container(render(f"image.digest={digest}", "image.tag=9.9.9"))
    # The runtime pulls by digest; the tag stays for people and `kubectl sps version`.
    assert container["image"] == f"ghcr.io/sps-dev/sps-operator:9.9.9@{digest}"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["watch.mode=namespaces"], "namespaces"),
        (["watch.mode=everywhere"], "mode"),
        (["replicaCount=6"], "replicaCount"),
        (["imageTypo=x"], "imageTypo"),
        (["image.pullPolicy=Sometimes"], "pullPolicy"),
        (["jobDefaults.priorityClass=x"], "priorityClass"),
        (["extraVolumeMounts[0].name=ca"], "mountPath"),
    ],
)
def test_schema_rejects_bad_values(values: list[str], message: str) -> None:
    with pytest.raises(subprocess.CalledProcessError) as error:
        render(*values)
    assert message in error.value.stderr, error.value.stderr


def test_schema_is_valid_json_and_covers_every_top_level_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values) <= set(schema["properties"])
    assert schema["additionalProperties"] is False


def test_argocd_health_snippet_in_docs_reads_ready() -> None:
    text = Path(ROOT / "docs" / "gitops.md").read_text()
    assert "resource.customizations.health.sps.dev_SpsProfile" in text
    assert "Ready" in text


def test_chart_readme_documents_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    schema = json.loads((CHART / "values.schema.json").read_text())

    def leaves(prefix: str, node: Any, node_schema: dict[str, Any]) -> list[str]:
        # Free-form objects (resources, securityContext, ...) are one value.
        props = node_schema.get("properties")
        if isinstance(node, dict) and node and props:
            return [
                leaf
                for k, v in node.items()
                for leaf in leaves(f"{prefix}{k}.", v, props.get(k, {}))
            ]
        return [prefix.rstrip(".")]

    missing = []
    for leaf in leaves("", values, schema):
        head, _, last = leaf.rpartition(".")
        # `a.b.c` may be documented as `a.b.c` or in a grouped row `a.b.x, .c`.
        if f"`{leaf}`" not in readme and not (head and f"`.{last}`" in readme):
            missing.append(leaf)
    assert not missing, missing


def test_profiling_egress_policy_is_off_by_default_and_per_watched_namespace() -> None:
    assert not by_kind(render("watch.mode=namespaces", "watch.namespaces={a}"), "NetworkPolicy")
    objects = render(
        "watch.mode=namespaces",
        "watch.namespaces={team-a,team-b}",
        "networkPolicy.profilingPods.enabled=true",
        "networkPolicy.profilingPods.apiServer.cidrs={10.0.0.10/32}",
    )
    policies = by_kind(objects, "NetworkPolicy")
    assert sorted(p["metadata"]["namespace"] for p in policies) == ["team-a", "team-b"]
    spec = policies[0]["spec"]
    # It selects exactly the profiling pods (the labels the operator puts on them).
    assert spec["podSelector"]["matchLabels"] == {
        L.LABEL_MANAGED_BY: L.MANAGED_BY,
        L.LABEL_COMPONENT: L.COMPONENT_POD,
    }
    assert spec["policyTypes"] == ["Egress"]
    dns, api = spec["egress"]
    assert dns["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
    assert api["to"] == [{"ipBlock": {"cidr": "10.0.0.10/32"}}]
    assert [p["port"] for p in api["ports"]] == [443, 6443]
    anywhere = render(
        "watch.mode=namespaces",
        "watch.namespaces={a}",
        "networkPolicy.profilingPods.enabled=true",
    )
    (policy,) = by_kind(anywhere, "NetworkPolicy")
    assert "to" not in policy["spec"]["egress"][1]


def test_the_operator_pod_policy_admits_only_probes_and_the_named_scrapers() -> None:
    # Off by default (a scraper left out would silently lose the metrics).
    assert not by_kind(render(), "NetworkPolicy")
    prometheus = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
    objects = render(
        "networkPolicy.operator.enabled=true",
        "networkPolicy.operator.metricsFrom[0].namespaceSelector.matchLabels"
        r".kubernetes\.io/metadata\.name=monitoring",
        "networkPolicy.operator.metricsFrom[0].podSelector.matchLabels"
        r".app\.kubernetes\.io/name=prometheus",
    )
    (policy,) = by_kind(objects, "NetworkPolicy")
    (deployment,) = by_kind(objects, "Deployment")
    spec = policy["spec"]
    assert policy["metadata"]["namespace"] == "sps-system"
    # It selects the operator's pods (and no profiling pod: those carry other labels).
    assert spec["podSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert spec["policyTypes"] == ["Ingress"]  # egress (the API server) unrestricted
    health, metrics = spec["ingress"]
    assert health == {"ports": [{"protocol": "TCP", "port": 8080}]}  # the kubelet's probes
    assert metrics == {"ports": [{"protocol": "TCP", "port": 9090}], "from": [prometheus]}
    ports = {p["containerPort"] for p in operator_container(objects)["ports"]}
    assert ports == {8080, 9090}  # nothing else served, so nothing else to admit
    # No scraper named: the metrics port admits no one.
    (closed,) = by_kind(render("networkPolicy.operator.enabled=true"), "NetworkPolicy")
    assert [r["ports"][0]["port"] for r in closed["spec"]["ingress"]] == [8080]


def test_the_test_entry_point_is_a_value_and_not_the_default() -> None:
    # The production container runs the image's `sps-operator` (which refuses the test
    # hooks); only a release that names the test entry point takes them.
    assert "command" not in operator_container(render())
    testing = ["python", "-m", "sps_operator.controller.testing_main"]
    container = operator_container(render(f"operator.command={{{','.join(testing)}}}"))
    assert container["command"] == testing and container["args"][0] == "run"


def test_profiling_egress_policy_is_refused_in_cluster_mode() -> None:
    with pytest.raises(subprocess.CalledProcessError) as error:
        render("networkPolicy.profilingPods.enabled=true")
    assert "watch.mode=namespaces" in error.value.stderr
