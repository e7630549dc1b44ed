"""The demo's pure parts (the full run is test_ship_demo_e2e.py)."""

from __future__ import annotations

import yaml
from ship_helpers import CHART, helm

from sps_operator import demo


def rendered() -> str:
    args = demo.helm_template_args(CHART, demo.SYSTEM_NAMESPACE, demo.NAMESPACE)
    return helm(*args).stdout


def test_demo_renders_the_chart_in_namespaces_mode_with_zero_replicas() -> None:
    crds, rest = demo.split_rendered(rendered())
    assert [c["metadata"]["name"] for c in crds] == ["spsprofiles.sps.dev"]
    (deployment,) = [o for o in rest if o["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 0
    roles = [o for o in rest if o["kind"] == "Role"]
    assert [r["metadata"]["namespace"] for r in roles] == [demo.NAMESPACE]
    sa, sa_ns, args = demo.chart_operator(rest)
    assert (sa, sa_ns) == ("sps-operator", demo.SYSTEM_NAMESPACE)
    assert args[0] == "run" and f"--namespace={demo.NAMESPACE}" in args


def test_local_operator_args_keep_the_chart_scope_and_replace_ports() -> None:
    chart_args = [
        "run",
        "--namespace=sps-demo",
        "--liveness=http://0.0.0.0:8080/healthz",
        "--metrics-port=9090",
        "--log-format=json",
        "--profiler-image=img:1",
    ]
    args = demo.local_operator_args(chart_args, 1234, 5678)
    assert args[:2] == ["run", "--namespace=sps-demo"]
    assert "--profiler-image=img:1" in args
    assert "--liveness=http://127.0.0.1:1234/healthz" in args
    assert "--metrics-port=5678" in args
    assert "--metrics-port=9090" not in args and "--log-format=json" not in args
    assert args.count("--log-format=plain") == 1


def test_token_kubeconfig_uses_the_admin_cluster_and_a_bearer_token() -> None:
    admin = {
        "clusters": [{"name": "sps-dev", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "admin", "user": {"client-certificate-data": "x"}}],
    }
    config = demo.token_kubeconfig(admin, "tok", "system:serviceaccount:a:b")
    assert config["clusters"] == admin["clusters"]
    assert config["users"] == [{"name": "system:serviceaccount:a:b", "user": {"token": "tok"}}]
    (context,) = config["contexts"]
    assert context["context"]["cluster"] == "sps-dev"
    assert config["current-context"] == context["name"]
    assert "client-certificate-data" not in yaml.safe_dump(config)


def row(state: str, gpu: str = "G", table: str = "t") -> dict[str, str]:
    return {"name": demo.PROFILE, "state": state, "gpu": gpu, "table": table}


def test_profile_done_and_failed() -> None:
    assert demo.profile_done([row("Ready", "G")], "G")
    assert not demo.profile_done([row("Ready", "H")], "G")
    assert not demo.profile_done([row("Ready", "G", "<none>")], "G")
    assert not demo.profile_done([row("Profiling/Diagonal", "G")], "G")
    assert demo.profile_failed([row("ProfilingFailed")]) == "ProfilingFailed"
    assert demo.profile_failed([row("Profiling/Diagonal")]) is None
    assert demo.profile_failed([row("Pending")]) is None
    assert demo.profile_failed([row("Ready")]) is None
    assert demo.profile_failed([row("NoTable")]) is None
    assert demo.profile_failed([row("RolloutPending")]) is None
    assert demo.profile_failed([row("FitQualityGateFailed")]) == "FitQualityGateFailed"
    assert demo.profile_failed([row("ResultMissing")]) == "ResultMissing"


def test_demo_cli_rejects_a_bad_time_scale() -> None:
    assert demo.main(["--time-scale", "0"]) == 2


def test_table_flag_with_its_value() -> None:
    flag = "--speculative-dspark-sps-table-path"
    assert demo.table_flag(["--port", "1", flag, "/etc/sps/table/table.json"]) == [
        flag,
        "/etc/sps/table/table.json",
    ]
    assert demo.table_flag([f"{flag}=/t.json", "--x"]) == [f"{flag}=/t.json"]
    assert demo.table_flag(["--port", "1"]) == []
