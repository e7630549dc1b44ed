"""Pod volumes as files (pure): what each ConfigMap/Secret/projected/downwardAPI volume holds.

The pod worker writes the result under the pod's state directory and bind-mounts it at
each `mountPath`; fetching objects and tokens is injected so this stays testable.
"""

from __future__ import annotations

import base64
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .envvars import EnvError, field_ref_value

ObjectLookup = Callable[[str], Mapping[str, Any] | None]  # name -> API object (dict) or None
TokenSource = Callable[[str | None, int], str]  # (audience, expirationSeconds) -> token


class VolumeError(Exception):
    """A volume cannot be set up (yet): the pod waits in ContainerCreating."""


@dataclass
class VolumeFiles:
    """A directory volume: relative path -> (content, mode)."""

    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    read_only: bool = True

    def add(self, path: str, content: bytes, mode: int) -> None:
        clean = posixpath.normpath(path)
        if clean.startswith("..") or clean.startswith("/") or clean == ".":
            raise VolumeError(f"invalid volume item path {path!r}")
        self.files[clean] = (content, mode)


@dataclass(frozen=True)
class EmptyDir:
    pass


@dataclass(frozen=True)
class HostPath:
    path: str
    type: str


Volume = VolumeFiles | EmptyDir | HostPath


def object_data(obj: Mapping[str, Any], secret: bool) -> dict[str, bytes]:
    """A ConfigMap's data+binaryData or a Secret's (base64) data as bytes."""
    out: dict[str, bytes] = {}
    if secret:
        for k, v in (obj.get("data") or {}).items():
            out[k] = base64.b64decode(v)
        for k, v in (obj.get("stringData") or {}).items():
            out[k] = v.encode()
    else:
        for k, v in (obj.get("data") or {}).items():
            out[k] = v.encode()
        for k, v in (obj.get("binaryData") or {}).items():
            out[k] = base64.b64decode(v)
    return out


def _project_keys(
    target: VolumeFiles,
    source: Mapping[str, Any],
    lookup: ObjectLookup,
    kind: str,
    default_mode: int,
) -> None:
    name = source.get("name", "")
    optional = bool(source.get("optional"))
    obj = lookup(name)
    if obj is None:
        if optional:
            return
        raise VolumeError(f'{kind} "{name}" not found')
    data = object_data(obj, secret=kind == "secret")
    items = source.get("items")
    if not items:
        for key, content in data.items():
            target.add(key, content, default_mode)
        return
    for item in items:
        if item["key"] not in data:
            if optional:
                continue
            raise VolumeError(f'configuration key "{item["key"]}" not found in {kind} "{name}"')
        target.add(item["path"], data[item["key"]], int(item.get("mode", default_mode)))


def _downward_items(
    target: VolumeFiles, items: list[Mapping[str, Any]], pod: Mapping[str, Any], mode: int
) -> None:
    for item in items:
        if "fieldRef" not in item:
            raise VolumeError(f"downwardAPI item {item.get('path')!r}: only fieldRef is supported")
        try:
            value = field_ref_value(pod, item["fieldRef"]["fieldPath"])
        except EnvError as exc:
            raise VolumeError(str(exc)) from None
        target.add(item["path"], value.encode(), int(item.get("mode", mode)))


def build_volume(
    volume: Mapping[str, Any],
    pod: Mapping[str, Any],
    *,
    configmaps: ObjectLookup,
    secrets: ObjectLookup,
    token: TokenSource,
) -> Volume:
    """What one entry of `spec.volumes` holds."""
    if "emptyDir" in volume:
        return EmptyDir()
    if "hostPath" in volume:
        hp = volume["hostPath"]
        return HostPath(path=hp["path"], type=hp.get("type", ""))
    if "configMap" in volume or "secret" in volume:
        kind = "configmap" if "configMap" in volume else "secret"
        src = dict(volume.get("configMap") or volume.get("secret") or {})
        if kind == "secret":
            src["name"] = src.pop("secretName", "")
        files = VolumeFiles()
        lookup = configmaps if kind == "configmap" else secrets
        _project_keys(files, src, lookup, kind, int(src.get("defaultMode", 0o644)))
        return files
    if "downwardAPI" in volume:
        dapi = volume["downwardAPI"]
        files = VolumeFiles()
        _downward_items(files, dapi.get("items") or [], pod, int(dapi.get("defaultMode", 0o644)))
        return files
    if "projected" in volume:
        proj = volume["projected"]
        mode = int(proj.get("defaultMode", 0o644))
        files = VolumeFiles()
        for source in proj.get("sources") or []:
            if "serviceAccountToken" in source:
                sat = source["serviceAccountToken"]
                tok = token(sat.get("audience"), int(sat.get("expirationSeconds", 3600)))
                files.add(sat["path"], tok.encode(), mode)
            elif "configMap" in source:
                _project_keys(files, source["configMap"], configmaps, "configmap", mode)
            elif "secret" in source:
                _project_keys(files, source["secret"], secrets, "secret", mode)
            elif "downwardAPI" in source:
                _downward_items(files, source["downwardAPI"].get("items") or [], pod, mode)
            else:
                raise VolumeError(f"projected source {sorted(source)} is not supported")
        return files
    kinds = sorted(set(volume) - {"name"})
    raise VolumeError(f"volume {volume.get('name')!r}: type {kinds} is not supported here")


@dataclass(frozen=True)
class MountPlan:
    """One bind mount inside a container's mount namespace."""

    source: str
    target: str
    read_only: bool


def mount_plans(
    container: Mapping[str, Any], volume_dirs: Mapping[str, str], read_only_volumes: set[str]
) -> list[MountPlan]:
    """Bind mounts for the container's volumeMounts (subPath honoured), in order."""
    plans: list[MountPlan] = []
    for vm in container.get("volumeMounts") or []:
        name = vm["name"]
        if name not in volume_dirs:
            raise VolumeError(f"volumeMount {name!r} names no volume of the pod")
        source = volume_dirs[name]
        sub = vm.get("subPath") or ""
        if sub:
            clean = posixpath.normpath(sub)
            if clean.startswith("..") or clean.startswith("/"):
                raise VolumeError(f"invalid subPath {sub!r}")
            source = posixpath.join(source, clean)
        read_only = bool(vm.get("readOnly")) or name in read_only_volumes
        plans.append(MountPlan(source=source, target=vm["mountPath"], read_only=read_only))
    return plans
