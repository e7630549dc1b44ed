"""The chart's alerts and dashboard: they parse as Prometheus parses them (its own rule
validation and PromQL parser, tests/ship/promcheck.py) and use only metrics the operator
exports; docs/operator.md lists every metric."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from promcheck import check_exprs, check_rules, metric_names
from prometheus_client import generate_latest, start_http_server
from prometheus_client.parser import text_string_to_metric_families
from ship_helpers import CHART, ROOT, by_kind, render

import promserver
from sps_operator.api.status import SpsProfileStatus
from sps_operator.controller.kube.builders import ProfileRef
from sps_operator.controller.process.metrics import Metrics
from waiting import wait_for

pytestmark = pytest.mark.slow  # builds promcheck once (cached)

DASHBOARD = CHART / "dashboards" / "sps-operator.json"
ALERTS = {
    "SpsTableStale", "SpsProfileStalled", "SpsProfilingRunsFailing", "SpsProfileWaitingForGPUs",
    "SpsReplicaBorrowedTooLong", "SpsOperatorNoLeader", "SpsOperatorAbsent",
}  # fmt: skip
# The alerts that mean no profile of any tenant is served (a page); the others are one
# profile's (a ticket).
OPERATOR_ALERTS = {"SpsOperatorNoLeader", "SpsOperatorAbsent"}


def exported() -> tuple[set[str], set[str]]:
    """(sample names, family names) of a Metrics with every series set once."""
    m = Metrics()
    ref = ProfileRef("p", "ns", "uid")
    m.run_started(ref)
    m.run_finished(ref, "succeeded", 1.0)
    m.gpu_wait(ref, 3.0)
    m.rollout(ref, "Inject")
    m.leading(True)
    m.pass_done(0.1, "rollout")
    m.passed(ref)
    at = "2026-03-01T12:00:00Z"
    m.status(
        ref,
        SpsProfileStatus.model_validate(
            {
                "tables": [{"gpuProduct": "G", "fingerprint": "f", "configMap": "c", "hash": "h",
                            "kind": "Diagonal", "profiledAt": at}],
                "currentRun": {
                    "name": "r", "job": "r", "phase": "Diagonal", "gpuProduct": "G",
                    "fingerprint": "f", "target": "d", "trigger": "NoTable", "startedAt": at,
                    "waiting": {"reason": "WaitingForGPUs", "message": "m", "since": at},
                    "borrow": {"deployment": "d", "replicas": 2, "at": at},
                },
                "conditions": [{"type": "Ready", "status": "False", "reason": "Profiling",
                                "lastTransitionTime": at}],
            }
        ),
    )  # fmt: skip
    m.cost_written(ref, [], [{"gpuProduct": "G", "gpuSeconds": 2.0, "lentSeconds": 1.0}])
    families = list(text_string_to_metric_families(generate_latest(m.registry).decode()))
    return {s.name for f in families for s in f.samples}, {f.name for f in families}


SAMPLES, FAMILIES = exported()


def test_the_alerts_parse_as_promtool_checks_them_and_use_exported_metrics(
    tmp_path: Path,
) -> None:
    (rule,) = by_kind(render("metrics.prometheusRule.enabled=true"), "PrometheusRule")
    assert {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]} == ALERTS
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    used = metric_names(check_rules(path))
    # `up`: Prometheus's own series of each target (SpsOperatorAbsent).
    assert used and used <= SAMPLES | {"up"}, used - SAMPLES
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            assert "kubectl" in alert["annotations"]["description"], alert["alert"]


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings (lowercase, punctuation dropped, spaces
    to hyphens)."""
    headings = re.findall(r"^#+ (.+)$", markdown, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_alert_severities_differ_and_each_runbook_is_a_troubleshooting_section() -> None:
    (rule,) = by_kind(render("metrics.prometheusRule.enabled=true"), "PrometheusRule")
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    for name, alert in rules.items():
        expected = "critical" if name in OPERATOR_ALERTS else "warning"
        assert alert["labels"]["severity"] == expected, name
    anchors = github_anchors((ROOT / "docs" / "troubleshooting.md").read_text())
    base = "https://github.com/sps-dev/sps-operator/blob/main/docs/troubleshooting.md#"
    for name, alert in rules.items():
        url = alert["annotations"]["runbook_url"]
        assert url.startswith(base), url
        assert url.removeprefix(base) in anchors, (name, url)
    # The operator's own absence: its job as the ServiceMonitor names it (the Service).
    absent = rules["SpsOperatorAbsent"]["expr"]
    assert absent == 'absent(up{job="sps-operator-metrics", namespace="sps-system"} == 1)'
    (service,) = [s for s in by_kind(render(), "Service") if "metrics" in s["metadata"]["name"]]
    assert service["metadata"]["name"] == "sps-operator-metrics"


def test_the_servicemonitor_keeps_the_profiles_own_namespace_label() -> None:
    # Without honorLabels, Prometheus renames the operator's `namespace` (the profile's)
    # to exported_namespace and sets the Service's: every alert would name sps-system.
    (monitor,) = by_kind(render("metrics.serviceMonitor.enabled=true"), "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["honorLabels"] is True
    # Every rule and panel groups and filters by `namespace`, never exported_namespace.
    (rule,) = by_kind(render("metrics.prometheusRule.enabled=true"), "PrometheusRule")
    assert "exported_namespace" not in json.dumps(rule)
    assert "exported_namespace" not in DASHBOARD.read_text()


@pytest.mark.parametrize(
    ("rule", "error"),
    [
        ({"alert": "A", "expr": "rate(sps_leader[5m)"}, "parse error"),
        ({"alert": "B", "expr": "sps_leader", "for": "soon"}, "not a valid duration"),
        ({"alert": "C", "expr": "sps_leader", "annotations": {"x": "{{ $labels.y "}}, "template"),
        ({"record": "r", "alert": "D", "expr": "sps_leader"}, "only one of 'record' and 'alert'"),
    ],
)
def test_the_rule_checker_refuses_what_prometheus_would(
    tmp_path: Path, rule: dict[str, Any], error: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [rule]}]}))
    result = check_rules(path)
    assert result.returncode == 1
    assert error in result.stderr


def test_the_rules_follow_values() -> None:
    (rule,) = by_kind(
        render("metrics.prometheusRule.enabled=true", "metrics.prometheusRule.waitingSeconds=60",
               "metrics.prometheusRule.labels.release=prom",
               "metrics.prometheusRule.severities.operator=page",
               "metrics.prometheusRule.severities.profile=ticket",
               "metrics.prometheusRule.runbookBaseURL=https://wiki.example/sps/",
               "metrics.prometheusRule.operatorJob=sps", "metrics.prometheusRule.absentFor=3m"),
        "PrometheusRule",
    )  # fmt: skip
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert rules["SpsProfileWaitingForGPUs"]["expr"].endswith("> 60")
    assert {r["labels"]["severity"] for n, r in rules.items() if n in OPERATOR_ALERTS} == {"page"}
    assert {r["labels"]["severity"] for n, r in rules.items() if n not in OPERATOR_ALERTS} == {
        "ticket"
    }
    assert rules["SpsTableStale"]["annotations"]["runbook_url"] == (
        "https://wiki.example/sps#spstablestale"
    )
    assert rules["SpsOperatorAbsent"]["expr"].startswith('absent(up{job="sps", ')
    assert rules["SpsOperatorAbsent"]["for"] == "3m"
    assert rule["metadata"]["labels"]["release"] == "prom"
    assert not by_kind(render(), "PrometheusRule")
    assert not by_kind(
        render("metrics.enabled=false", "metrics.prometheusRule.enabled=true"), "PrometheusRule"
    )


def test_a_real_prometheus_alerts_for_a_failing_profile_in_its_own_namespace(
    tmp_path: Path,
) -> None:
    """Prometheus itself (tests/promserver.py) scrapes an operator's /metrics on 127.0.0.1
    through the scrape job the Prometheus Operator generates for the chart's ServiceMonitor
    (the target labelled as discovery labels the metrics Service's endpoint) and evaluates
    the chart's rules: the alert names team-a, where the failing profile is, not the
    operator's namespace, and not team-b's profile of the same name; with the operator gone,
    SpsOperatorAbsent pages. (tests/realnode/test_realnode_monitoring.py: the same against
    the operator on the bed.)"""
    objects = render(
        "metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true",
        "metrics.prometheusRule.stalledFor=1s", "metrics.prometheusRule.absentFor=1s",
    )  # fmt: skip
    (monitor,) = by_kind(objects, "ServiceMonitor")
    (service,) = [
        s for s in by_kind(objects, "Service") if s["metadata"]["name"].endswith("-metrics")
    ]
    (rule,) = by_kind(objects, "PrometheusRule")
    m = Metrics()
    at = "2026-03-01T12:00:00Z"
    stalled = {"type": "Stalled", "status": "True", "reason": "JobPolicy", "lastTransitionTime": at}
    failing = SpsProfileStatus.model_validate({"conditions": [stalled]})
    m.status(ProfileRef("llama", "team-a", "u1"), failing)
    m.status(
        ProfileRef("llama", "team-b", "u2"),
        SpsProfileStatus.model_validate(
            {"conditions": [{**stalled, "status": "False", "reason": "Suspended"}]}
        ),
    )
    m.leading(True)
    server, _ = start_http_server(0, addr="127.0.0.1", registry=m.registry)
    address = f"127.0.0.1:{server.server_address[1]}"
    job = promserver.servicemonitor_scrape_config(monitor, tmp_path / "unused-kubeconfig", "1s")
    job = promserver.as_static(job, address, service, "sps-operator-0", "operator")
    try:
        with promserver.running(tmp_path / "prometheus", [job], rule["spec"]) as url:

            def firing(name: str) -> list[dict[str, Any]]:
                return [
                    a for a in promserver.alerts(url)
                    if a["labels"]["alertname"] == name and a["state"] == "firing"
                ]  # fmt: skip

            (alert,) = wait_for("SpsProfileStalled", lambda: firing("SpsProfileStalled"), 60)
            assert (alert["labels"]["namespace"], alert["labels"]["profile"]) == ("team-a", "llama")
            assert alert["labels"]["severity"] == "warning"
            assert "-n team-a`" in alert["annotations"]["description"]
            (up,) = promserver.query(url, "up")
            assert up["metric"]["namespace"] == "sps-system"  # the Service's, on its own series
            assert up["metric"]["job"] == "sps-operator-metrics" and up["value"][1] == "1"
            assert not firing("SpsOperatorAbsent")
            server.shutdown()
            server.server_close()
            (absent,) = wait_for("SpsOperatorAbsent", lambda: firing("SpsOperatorAbsent"), 60)
            assert absent["labels"]["severity"] == "critical"
    finally:
        server.shutdown()
        server.server_close()


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):  # label_values(METRIC, label): the metric must exist
            match = re.fullmatch(r"label_values\((\w+), *\w+\)", query["query"])
            assert match, query
            exprs.append(match.group(1))
    # Grafana's variables, as Grafana substitutes them before Prometheus parses.
    return [e.replace("$__rate_interval", "5m").replace("$namespace", ".*") for e in exprs]


def test_the_dashboard_queries_parse_and_use_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = dashboard_queries(dashboard)
    assert len(queries) > 15
    used = metric_names(check_exprs(queries))
    assert used <= SAMPLES, used - SAMPLES
    # Every family of the operator's own is on the dashboard, or said why not.
    shown = {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in used}
    ours = {f for f in FAMILIES if f.startswith("sps_")}
    assert ours <= shown, ours - shown
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_the_dashboard_configmap_carries_the_json() -> None:
    assert not by_kind(render(), "ConfigMap")
    (cm,) = by_kind(render("metrics.grafanaDashboard.enabled=true"), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["sps-operator.json"]) == json.loads(DASHBOARD.read_text())


def test_docs_list_every_metric_the_operator_exports() -> None:
    text = (ROOT / "docs" / "operator.md").read_text()
    section = text.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(sps_\w+)`", section, re.M))
    ours = {f for f in FAMILIES if f.startswith("sps_")}
    # Counters are documented by their sample name (with _total).
    assert {re.sub(r"_total$", "", d) for d in documented} == ours
