"""Container environment and `$(VAR)` expansion, kubelet's rules."""

from __future__ import annotations

from typing import Any

import pytest

from sps_operator.devcluster.nodeagent.envvars import (
    EnvError,
    expand,
    field_ref_value,
    parse_quantity,
    resolve_env,
    service_env,
)

VARS = {"VAR_A": "A", "VAR_B": "B", "EMPTY": ""}


@pytest.mark.parametrize(
    ("text", "expected"),
    [  # the cases of Kubernetes' third_party/forked/golang/expansion tests
        ("$(VAR_A)", "A"),
        ("___$(VAR_B)___", "___B___"),
        ("$(VAR_A)-$(VAR_A)", "A-A"),
        ("$(VAR_A)$(VAR_B)", "AB"),
        ("$$(VAR_A)", "$(VAR_A)"),
        ("$$$(VAR_A)", "$A"),
        ("$$$$(VAR_A)", "$$(VAR_A)"),
        ("$(VAR_A", "$(VAR_A"),
        ("$VAR_A", "$VAR_A"),
        ("$(UNKNOWN)", "$(UNKNOWN)"),
        ("$(VAR_A)$", "A$"),
        ("$$", "$"),
        ("$", "$"),
        ("$(EMPTY)x", "x"),
        ("no vars", "no vars"),
    ],
)
def test_expand(text: str, expected: str) -> None:
    assert expand(text, VARS.get) == expected


POD: dict[str, Any] = {
    "metadata": {
        "name": "p",
        "namespace": "ns",
        "uid": "u-1",
        "labels": {"app": "x", "tier": "y"},
        "annotations": {"a/b": "c"},
    },
    "spec": {"nodeName": "gpu-0", "serviceAccountName": "sa"},
    "status": {"podIP": "10.244.1.5", "podIPs": [{"ip": "10.244.1.5"}], "hostIP": "10.244.1.1"},
}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("metadata.name", "p"),
        ("metadata.namespace", "ns"),
        ("metadata.uid", "u-1"),
        ("spec.nodeName", "gpu-0"),
        ("spec.serviceAccountName", "sa"),
        ("status.podIP", "10.244.1.5"),
        ("status.podIPs", "10.244.1.5"),
        ("status.hostIP", "10.244.1.1"),
        ("metadata.labels['tier']", "y"),
        ("metadata.annotations['a/b']", "c"),
        ("metadata.labels", 'app="x"\ntier="y"'),
    ],
)
def test_field_ref_value(path: str, value: str) -> None:
    assert field_ref_value(POD, path) == value


def test_field_ref_unsupported() -> None:
    with pytest.raises(EnvError, match="unsupported fieldRef"):
        field_ref_value(POD, "spec.containers")


CONFIGMAPS = {"cm": {"color": "blue", "size": "xl"}}
SECRETS = {"sec": {"password": "s3cret"}}


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return resolve_env(
        POD,
        container,
        configmaps=CONFIGMAPS.get,
        secrets=SECRETS.get,
        service_env=service_env("10.244.1.1", 6443),
        node_allocatable={"cpu": "64", "memory": "512Gi"},
    )


def test_resolve_env_order_and_sources() -> None:
    env = env_of(
        {
            "envFrom": [
                {"configMapRef": {"name": "cm"}, "prefix": "CM_"},
                {"secretRef": {"name": "sec"}},
            ],
            "env": [
                {"name": "CM_color", "value": "overridden"},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "URL", "value": "http://$(IP):$(KUBERNETES_SERVICE_PORT)/$(LATER)"},
                {"name": "LATER", "value": "late"},
                {"name": "SIZE", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "size"}}},
                {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "password"}}},
                {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            ],
            "resources": {"limits": {"memory": "1Gi"}},
        }
    )
    assert (
        env["CM_color"] == "overridden" and env["CM_size"] == "xl" and env["password"] == "s3cret"
    )
    # $(VAR) sees only what is defined before it
    assert env["URL"] == "http://10.244.1.5:6443/$(LATER)"
    assert (env["SIZE"], env["PW"], env["CPU"]) == ("xl", "s3cret", "64")
    assert env["KUBERNETES_SERVICE_HOST"] == "10.244.1.1"
    assert env["KUBERNETES_PORT_6443_TCP_ADDR"] == "10.244.1.1"


def test_resolve_env_optional_and_missing_refs() -> None:
    env = env_of(
        {
            "envFrom": [{"configMapRef": {"name": "absent", "optional": True}}],
            "env": [
                {
                    "name": "A",
                    "valueFrom": {
                        "configMapKeyRef": {"name": "absent", "key": "k", "optional": True}
                    },
                },
                {
                    "name": "B",
                    "valueFrom": {
                        "configMapKeyRef": {"name": "cm", "key": "nokey", "optional": True}
                    },
                },
            ],
        }
    )
    assert "A" not in env and "B" not in env
    with pytest.raises(EnvError, match='configmap "absent" not found'):
        env_of(
            {
                "env": [
                    {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}}
                ]
            }
        )
    with pytest.raises(EnvError, match="couldn't find key nokey"):
        env_of(
            {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "nokey"}}}]}
        )
    with pytest.raises(EnvError, match='secret "gone" not found'):
        env_of({"envFrom": [{"secretRef": {"name": "gone"}}]})


def test_resource_field_ref_divisor_and_requests() -> None:
    container = {
        "resources": {"requests": {"memory": "512Mi", "cpu": "250m"}},
        "env": [
            {
                "name": "MEM_MI",
                "valueFrom": {
                    "resourceFieldRef": {"resource": "requests.memory", "divisor": "1Mi"}
                },
            },
            {
                "name": "CPU_M",
                "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}},
            },
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu"}}},
        ],
    }
    env = env_of(container)
    assert (env["MEM_MI"], env["CPU_M"], env["CPU"]) == ("512", "250", "1")  # cores round up


def test_parse_quantity() -> None:
    assert parse_quantity("1Gi") == 2**30
    assert parse_quantity("100m") == pytest.approx(0.1)
    assert parse_quantity("2k") == 2000
    with pytest.raises(EnvError):
        parse_quantity("lots")
