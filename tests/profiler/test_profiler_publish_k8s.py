"""--publish-configmap against the local control plane: what the operator will read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from sps_operator.api.kinds import TableKind
from sps_operator.profiler.cli import main
from sps_operator.profiler.publish import read_result
from sps_operator.tables.fit import fit_from_rounds
from sps_sim.testing import running_sim

pytestmark = pytest.mark.k8s

FAST = ["--vocab-size", "32000", "--poll-interval", "0.02", "--max-steady-steps", "200"]


def _empty_configmap(api: Any, namespace: str, name: str) -> None:
    client.CoreV1Api(api).create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name))
    )


def _run_published(url: str, tmp_path: Path, configmap: str, namespace: str, *sweep: str) -> int:
    """`sps-profiler run` on `sweep`, publishing to ConfigMap `configmap` in `namespace`."""
    return main(
        [
            "run",
            "--base-url",
            url,
            "--out",
            str(tmp_path / "sps.json"),
            *sweep,
            "--publish-configmap",
            configmap,
            "--publish-namespace",
            namespace,
            *FAST,
        ]
    )


def _read(api: Any, namespace: str, name: str) -> Any:
    cm = client.CoreV1Api(api).read_namespaced_config_map(name, namespace)
    return read_result(cm.data, cm.binary_data)


def test_publish_success_then_operator_fits(
    k8s_api: Any, kubeconfig: Path, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    _empty_configmap(k8s_api, namespace, "run-1")
    with running_sim(seed=11) as url:
        rc = _run_published(url, tmp_path, "run-1", namespace, "--batch-size", "1", "2", "4")
    assert rc == 0
    result = _read(k8s_api, namespace, "run-1")
    assert result.status == "succeeded"
    assert result.progress == "3/3"
    # Sorted: a round measured again (a rise, a clock cap) comes after the others; on a
    # loaded CI host bs=1 once came last.
    assert sorted(r["batch_size_per_rank"] for r in result.rounds) == [1, 2, 4]
    assert len(result.manifest["fingerprint"]) == 16
    assert result.manifest["server"]["mode"] == "static"
    fitted = fit_from_rounds(result.rounds, kind=TableKind.DIAGONAL)
    assert fitted.table.to_json().startswith('{"sample_batch_tokens":[8,')


def test_publish_failure_with_message(
    k8s_api: Any,
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    _empty_configmap(k8s_api, namespace, "run-2")
    with running_sim(env={"SGLANG_RAGGED_VERIFY_MODE": "compact"}, verify_all_bug="on") as url:
        rc = _run_published(
            url, tmp_path, "run-2", namespace, "--batch-size", "2", "4", "--fracs", "0.25", "1.0"
        )
    assert rc == 1
    result = _read(k8s_api, namespace, "run-2")
    assert result.status == "failed"
    assert "verify-all shortcut" in result.message
    assert result.rounds == []


def test_publish_to_a_missing_configmap_fails_clearly(
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    with running_sim(seed=12) as url:
        rc = _run_published(url, tmp_path, "absent", namespace, "--batch-size", "1")
    assert rc == 1
    assert "Not Found" in capsys.readouterr().err


def test_large_rounds_travel_gzipped_through_the_api(
    k8s_api: Any, kubeconfig: Path, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import random

    from sps_operator.profiler.publish import ConfigMapPublisher, PublishError

    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    _empty_configmap(k8s_api, namespace, "run-3")
    rng = random.Random(3)
    measured = [
        {"batch_size_per_rank": i, "batch_tokens": i * 4, "steps_per_sec": 1.0 / (0.01 + i * 1e-4)}
        for i in range(1, 601)
    ]
    # Fields the operator does not read travel too, and are dropped when it reads them.
    rounds = [{**r, "noise": [rng.random() for _ in range(40)]} for r in measured]
    publisher = ConfigMapPublisher("run-3", namespace)
    publisher.publish(status="running", progress="1/2", rounds=rounds[:2])
    publisher.publish(status="succeeded", progress="2/2", rounds=rounds)
    cm = client.CoreV1Api(k8s_api).read_namespaced_config_map("run-3", namespace)
    assert "rounds.jsonl" not in (cm.data or {})  # the inline copy was replaced
    assert "rounds.jsonl.gz" in (cm.binary_data or {})
    result = read_result(cm.data, cm.binary_data)
    assert result.status == "succeeded" and result.rounds == measured
    huge = [{"x": "".join(rng.choice("0123456789abcdef") for _ in range(4000))} for _ in range(400)]
    with pytest.raises(PublishError, match="ConfigMap limit"):
        publisher.publish(status="succeeded", rounds=huge)
