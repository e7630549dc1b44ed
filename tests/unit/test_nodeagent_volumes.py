"""What ConfigMap/Secret/projected/downwardAPI volumes hold, and bind-mount plans."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from sps_operator.devcluster.nodeagent.podworker import merge_conditions, write_files
from sps_operator.devcluster.nodeagent.volumes import (
    EmptyDir,
    HostPath,
    MountPlan,
    VolumeError,
    VolumeFiles,
    build_volume,
    mount_plans,
)

POD = {"metadata": {"name": "p", "namespace": "ns", "labels": {"a": "1"}}, "spec": {}, "status": {}}
OBJECTS: dict[str, dict[str, Any]] = {
    "cm": {
        "data": {"table.json": "{}", "meta.json": "[]"},
        "binaryData": {"bin": base64.b64encode(b"\x00\x01").decode()},
    },
    "kube-root-ca.crt": {"data": {"ca.crt": "PEM"}},
}
SECRETS = {"s": {"data": {"password": base64.b64encode(b"s3cret").decode()}}}
tokens: list[tuple[str | None, int]] = []


def token(audience: str | None, seconds: int) -> str:
    tokens.append((audience, seconds))
    return "a.b.c"


def build(volume: dict[str, Any]) -> Any:
    return build_volume(volume, POD, configmaps=OBJECTS.get, secrets=SECRETS.get, token=token)


def test_configmap_all_keys_and_items() -> None:
    vol = build({"name": "v", "configMap": {"name": "cm"}})
    assert isinstance(vol, VolumeFiles) and vol.read_only
    assert vol.files == {
        "table.json": (b"{}", 0o644),
        "meta.json": (b"[]", 0o644),
        "bin": (b"\x00\x01", 0o644),
    }
    items = [{"key": "table.json", "path": "sub/t.json", "mode": 0o444}]
    vol = build({"name": "v", "configMap": {"name": "cm", "defaultMode": 0o600, "items": items}})
    assert vol.files == {"sub/t.json": (b"{}", 0o444)}


def test_missing_objects_and_keys() -> None:
    with pytest.raises(VolumeError, match='configmap "gone" not found'):
        build({"name": "v", "configMap": {"name": "gone"}})
    assert build({"name": "v", "configMap": {"name": "gone", "optional": True}}).files == {}
    with pytest.raises(VolumeError, match='key "nope" not found'):
        build({"name": "v", "configMap": {"name": "cm", "items": [{"key": "nope", "path": "x"}]}})


def test_secret_is_decoded() -> None:
    vol = build({"name": "v", "secret": {"secretName": "s"}})
    assert vol.files == {"password": (b"s3cret", 0o644)}


def test_projected_service_account_volume() -> None:
    tokens.clear()
    vol = build(
        {
            "name": "kube-api-access-x",
            "projected": {
                "defaultMode": 0o420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {
                        "configMap": {
                            "name": "kube-root-ca.crt",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                        }
                    },
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "path": "namespace",
                                    "fieldRef": {"fieldPath": "metadata.namespace"},
                                }
                            ]
                        }
                    },
                ],
            },
        }
    )
    assert vol.files == {
        "token": (b"a.b.c", 0o420),
        "ca.crt": (b"PEM", 0o420),
        "namespace": (b"ns", 0o420),
    }
    assert tokens == [(None, 3607)]


def test_other_volume_kinds() -> None:
    assert isinstance(build({"name": "v", "emptyDir": {"medium": "Memory"}}), EmptyDir)
    assert build(
        {"name": "v", "hostPath": {"path": "/data", "type": "DirectoryOrCreate"}}
    ) == HostPath("/data", "DirectoryOrCreate")
    with pytest.raises(VolumeError, match="not supported"):
        build({"name": "v", "persistentVolumeClaim": {"claimName": "c"}})


def test_item_paths_cannot_escape() -> None:
    with pytest.raises(VolumeError, match="invalid volume item path"):
        build(
            {
                "name": "v",
                "configMap": {"name": "cm", "items": [{"key": "table.json", "path": "../x"}]},
            }
        )


def test_mount_plans() -> None:
    container = {
        "volumeMounts": [
            {"name": "cfg", "mountPath": "/etc/sps"},
            {"name": "data", "mountPath": "/data/one", "subPath": "one"},
            {"name": "data", "mountPath": "/data/ro", "readOnly": True},
        ]
    }
    plans = mount_plans(container, {"cfg": "/s/cfg", "data": "/s/data"}, {"cfg"})
    assert plans == [
        MountPlan("/s/cfg", "/etc/sps", True),
        MountPlan("/s/data/one", "/data/one", False),
        MountPlan("/s/data", "/data/ro", True),
    ]
    with pytest.raises(VolumeError, match="names no volume"):
        mount_plans({"volumeMounts": [{"name": "x", "mountPath": "/x"}]}, {}, set())
    with pytest.raises(VolumeError, match="invalid subPath"):
        mount_plans(
            {"volumeMounts": [{"name": "cfg", "mountPath": "/x", "subPath": "../.."}]},
            {"cfg": "/s"},
            set(),
        )


def test_write_files_replaces_content(tmp_path: Path) -> None:
    vol = VolumeFiles()
    vol.add("a/b.txt", b"one", 0o600)
    write_files(tmp_path, vol)
    vol.add("a/b.txt", b"two", 0o644)
    write_files(tmp_path, vol)
    path = tmp_path / "a" / "b.txt"
    assert path.read_bytes() == b"two" and path.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in path.parent.iterdir()) == ["b.txt"]  # no temp files left


def test_merge_conditions_keeps_foreign_types() -> None:
    observed = [
        {"type": "PodScheduled", "status": "True"},
        {"type": "DisruptionTarget", "status": "True"},
    ]
    ours = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "t"},
        {"type": "Ready", "status": "False"},
    ]
    merged = merge_conditions(observed, ours)
    assert [c["type"] for c in merged] == ["PodScheduled", "DisruptionTarget", "Ready"]
    assert merged[0]["lastTransitionTime"] == "t"
