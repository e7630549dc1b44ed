"""The chart's monitoring, for real: a Prometheus server (tests/promserver.py) scrapes the
operator the chart installed, with the scrape job the Prometheus Operator generates for
the chart's ServiceMonitor, evaluates the chart's PrometheusRule, and alerts for a failing
profile in the profile's own namespace, not the operator's, and not for a same-named
profile of another namespace. Debian's Prometheus is built without Kubernetes discovery,
so the test reads the metrics Service and its EndpointSlice from the bed and hands
Prometheus the target with the meta labels discovery gives it; the relabelling (the
`namespace` target label from the Service's namespace, honor_labels from the
ServiceMonitor) is Prometheus's own. Prometheus listens on 127.0.0.1 and reaches only the
operator pod on the bed's network."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import yaml
from realnode_helpers import apply, get_json
from realnode_profiles import SIM_TIME_SCALE, chart_installed, conditions, load, quick, with_env

import promserver
from sps_testbed import RealNodeCluster
from waiting import wait_for

# A profiling image the chart's default admin policy does not allow: the run is refused
# (JobPolicy), the profile Stalled at once, and no Job runs.
REFUSED_IMAGE = "registry.invalid/not-allowed:1"


def test_an_alert_names_the_failing_profiles_own_namespace(
    realnode_cluster: RealNodeCluster, realnode_namespace: str, tmp_path: Path
) -> None:
    bed, failing = realnode_cluster, realnode_namespace
    other = bed.create_namespace(f"{failing[:50]}-b")
    release_ns = f"sps-mon-{uuid.uuid4().hex[:5]}"
    values = ("replicaCount=1", "watch.mode=namespaces", f"watch.namespaces={{{failing},{other}}}")
    try:
        with chart_installed(bed, release_ns, *values):
            server = with_env(
                load("sglang-deployment.yaml"), {"SPS_SIM_TIME_SCALE": SIM_TIME_SCALE}
            )
            refused = quick(load("diagonal.yaml"))
            refused["spec"]["job"]["image"] = REFUSED_IMAGE
            apply(bed, failing, server, refused)
            suspended = quick(load("diagonal.yaml"))  # the same name, another tenant
            suspended["spec"]["suspend"] = True
            apply(bed, other, suspended)
            wait_for(
                "the refused profile Stalled",
                lambda: (
                    conditions(get_json(bed, "spsprofile", "llama", "-n", failing)).get("Stalled")
                    == "True"
                ),
                timeout=300,
            )

            # Rendered offline (the bed has no Prometheus Operator CRDs to install them into),
            # for the bed's Kubernetes version.
            server_version = json.loads(bed.kubectl("version", "-o", "json"))["serverVersion"]
            rendered = bed.helm(
                "template", "sps-operator", *bed.chart_args(), "--namespace", release_ns,
                "--kube-version", server_version["gitVersion"],
                *(a for v in values for a in ("--set", v)),
                "--set", "metrics.serviceMonitor.enabled=true",
                "--set", "metrics.prometheusRule.enabled=true",
                "--set", "metrics.prometheusRule.stalledFor=5s",
            )  # fmt: skip
            objects = [o for o in yaml.safe_load_all(rendered) if o]
            (monitor,) = [o for o in objects if o["kind"] == "ServiceMonitor"]
            (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
            scrape = promserver.servicemonitor_scrape_config(monitor, bed.kubeconfig, "2s")
            service = get_json(bed, "service", "sps-operator-metrics", "-n", release_ns)
            (port,) = service["spec"]["ports"]
            (endpoint,) = wait_for(
                "the metrics Service's endpoint",
                lambda: [
                    e
                    for sl in get_json(bed, "endpointslices", "-n", release_ns, "-l",
                                       "kubernetes.io/service-name=sps-operator-metrics")["items"]
                    for e in sl.get("endpoints") or []
                    if (e.get("conditions") or {}).get("ready")
                ],
                timeout=120,
            )  # fmt: skip
            address = f"{endpoint['addresses'][0]}:{port['port']}"
            pod = endpoint["targetRef"]["name"]
            scrape = promserver.as_static(scrape, address, service, pod, "operator")
            with promserver.running(tmp_path / "prometheus", [scrape], rule["spec"]) as url:
                firing = wait_for(
                    "SpsProfileStalled firing",
                    lambda: [
                        a for a in promserver.alerts(url)
                        if a["labels"]["alertname"] == "SpsProfileStalled"
                        and a["state"] == "firing"
                    ],
                    timeout=120,
                )  # fmt: skip
                check_alerts(url, firing, failing, other, release_ns)
    finally:
        bed.kubectl("delete", "namespace", other, "--wait=false", check=False)


def check_alerts(
    url: str, firing: list[dict[str, Any]], failing: str, other: str, release_ns: str
) -> None:
    # One alert, for the failing profile, in its own namespace: not the operator's
    # (Prometheus's `namespace` of the target), not merged with the other tenant's llama.
    (alert,) = firing
    assert alert["labels"]["namespace"] == failing, alert
    assert alert["labels"]["profile"] == "llama"
    assert "exported_namespace" not in alert["labels"]
    assert alert["labels"]["severity"] == "warning"  # one profile: a ticket, not a page
    assert f"-n {failing}`" in alert["annotations"]["description"]
    assert alert["annotations"]["runbook_url"].endswith("troubleshooting.md#spsprofilestalled")
    # Each tenant's series under its own namespace: what the dashboard's namespace list reads.
    ready = promserver.query(url, 'sps_profile_condition{profile="llama", type="Ready"}')
    assert {s["metric"]["namespace"] for s in ready} == {failing, other}, ready
    # The operator's own series keep the Service's namespace, and it is up: no
    # SpsOperatorAbsent, whose `up` selector is the job the ServiceMonitor names.
    (up,) = promserver.query(url, f'up{{job="sps-operator-metrics", namespace="{release_ns}"}}')
    assert up["value"][1] == "1", up
    names = {a["labels"]["alertname"] for a in promserver.alerts(url)}
    assert "SpsOperatorAbsent" not in names and "SpsOperatorNoLeader" not in names, names
