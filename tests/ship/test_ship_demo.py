"""The demo's pure parts (the full run is test_ship_demo_e2e.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ship_helpers import CHART, KUBE_VERSION, helm

from sps_operator.plugin.view import get_row
from sps_testbed import demo

EXAMPLE = CHART.parents[1] / "examples" / "sglang-deployment.yaml"


def test_demo_installs_the_chart_from_the_registry_in_namespaces_mode() -> None:
    ref = "oci://10.244.3.1:5000/charts/sps-operator"
    args = demo.helm_install_args(
        ref, "0.1.0", Path("/bed/ca.crt"), demo.SYSTEM_NAMESPACE, demo.NAMESPACE
    )
    assert args[:3] == ["install", demo.RELEASE, ref] and "--wait" in args
    assert args[args.index("--version") + 1] == "0.1.0"
    assert args[args.index("--ca-file") + 1] == "/bed/ca.crt"
    # The chart's default image: no override of it.
    assert not [a for a in args if a.startswith("image.")]
    # The same values, rendered: the operator's rights are a Role in the demo namespace.
    values = [a for i, a in enumerate(args) if i and args[i - 1] == "--set"]
    sets = [x for v in values for x in ("--set", v)]
    rendered = helm(
        "template", demo.RELEASE, str(CHART), "--namespace", demo.SYSTEM_NAMESPACE,
        "--kube-version", KUBE_VERSION, *sets,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    roles = [d for d in docs if d["kind"] == "Role"]
    assert demo.NAMESPACE in [r["metadata"]["namespace"] for r in roles]
    assert not [
        d for d in docs if d["kind"] == "ClusterRole" and "deployments" in yaml.safe_dump(d)
    ]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert f"--namespace={demo.NAMESPACE}" in container["args"]


def test_the_time_scale_is_the_only_change_to_the_example() -> None:
    example = yaml.safe_load(EXAMPLE.read_text())
    fast = demo.with_time_scale(example, 100)
    (server,) = fast["spec"]["template"]["spec"]["containers"]
    assert {"name": demo.TIME_SCALE_ENV, "value": "100"} in server["env"]
    server["env"] = [e for e in server["env"] if e["name"] != demo.TIME_SCALE_ENV]
    assert fast == example
    again = demo.with_time_scale(fast, 40)  # replaces, never duplicates
    (server,) = again["spec"]["template"]["spec"]["containers"]
    assert [e["value"] for e in server["env"] if e["name"] == demo.TIME_SCALE_ENV] == ["40"]


def test_table_flag_in_both_spellings() -> None:
    assert demo.table_flag(["a", "--speculative-dspark-sps-table-path", "/t"]) == [
        "--speculative-dspark-sps-table-path",
        "/t",
    ]
    assert demo.table_flag(["--speculative-dspark-sps-table-path=/t"]) == [
        "--speculative-dspark-sps-table-path=/t"
    ]
    assert demo.table_flag(["--port=1"]) == []


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


def test_profile_done_reads_what_kubectl_sps_get_shows() -> None:
    profile = {
        "metadata": {"name": demo.PROFILE, "namespace": demo.NAMESPACE},
        "spec": {"table": {"kind": "Diagonal"}},
        "status": {
            "gpuProduct": "G",
            "liveTable": "llama-table-1",
            "conditions": [{"type": "Ready", "status": "True", "reason": "TableLive"}],
        },
    }
    from datetime import UTC, datetime

    assert demo.profile_done([get_row(profile, datetime.now(UTC))], "G")


def test_demo_cli_rejects_a_bad_time_scale() -> None:
    assert demo.main(["--time-scale", "0"]) == 2


def test_demo_env_and_down_without_a_demo_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert demo.main(["env", "--state-dir", str(tmp_path)]) == 1
    assert "no test bed" in capsys.readouterr().err
    assert demo.main(["down", "--state-dir", str(tmp_path)]) == 0
    assert "no demo running" in capsys.readouterr().out


class _RunningBed:
    """What print_env reads of a running demo bed."""

    kubeconfig = Path("/demo/bed/kubeconfig")

    def running(self) -> bool:
        return True

    def registry_env(self) -> dict[str, str]:
        return {"SPS_TESTBED_REGISTRY": "10.244.3.1:5000", "SPS_TESTBED_CA": "/demo/trust/ca.crt"}


class _NoBinaries:
    def path_dirs(self) -> list[Path]:
        return []


def test_demo_env_exports_the_beds_registry_for_make_publish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(demo.RealNodeCluster, "attach", staticmethod(lambda _: _RunningBed()))
    monkeypatch.setattr(demo, "find_binaries", lambda build: _NoBinaries())
    assert demo.main(["env", "--state-dir", str(tmp_path)]) == 0
    exports = capsys.readouterr().out.splitlines()
    assert "export KUBECONFIG=/demo/bed/kubeconfig" in exports
    assert "export SPS_TESTBED_REGISTRY=10.244.3.1:5000" in exports
    assert "export SPS_TESTBED_CA=/demo/trust/ca.crt" in exports
