"""Container environment and `$(VAR)` expansion, as kubelet computes them (pure)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

Lookup = Callable[[str], Mapping[str, str] | None]  # object name -> its data, None if absent


class EnvError(Exception):
    """A referenced ConfigMap/Secret/key is missing: CreateContainerConfigError."""


def expand(text: str, lookup: Callable[[str], str | None]) -> str:
    """Kubernetes' `$(VAR)` expansion: `$$` escapes, unknown references stay as written."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "$" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            close = text.find(")", i + 2)
            if close == -1:
                out.append("$(")
                i += 2
                continue
            name = text[i + 2 : close]
            value = lookup(name)
            out.append(f"$({name})" if value is None else value)
            i = close + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


def expand_all(items: list[str], env: Mapping[str, str]) -> list[str]:
    return [expand(s, env.get) for s in items]


_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")


def field_ref_value(pod: Mapping[str, Any], field_path: str) -> str:
    """The downward-API value of `field_path` for this pod."""
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": status.get("hostIP", ""),
        "status.podIP": status.get("podIP", ""),
        "status.hostIPs": ",".join(a["ip"] for a in status.get("hostIPs") or []),
        "status.podIPs": ",".join(a["ip"] for a in status.get("podIPs") or []),
    }
    if field_path in simple:
        return str(simple[field_path])
    m = _SUBSCRIPT.match(field_path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    if field_path in ("metadata.labels", "metadata.annotations"):
        values = meta.get(field_path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
    raise EnvError(f"unsupported fieldRef fieldPath {field_path!r}")


_SUFFIX = {
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "P": 1e15, "E": 1e18, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40,
    "Pi": 2.0**50, "Ei": 2.0**60,
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?\d+)?)([a-zA-Z]*)$")


def parse_quantity(text: str | int | float) -> float:
    m = _QUANTITY.match(str(text).strip())
    if not m or m.group(2) not in _SUFFIX:
        raise EnvError(f"invalid resource quantity {text!r}")
    return float(m.group(1)) * _SUFFIX[m.group(2)]


def resource_field_value(
    container: Mapping[str, Any], ref: Mapping[str, Any], node_allocatable: Mapping[str, str]
) -> str:
    """resourceFieldRef: limits fall back to the node's allocatable, as kubelet does."""
    kind, _, name = str(ref.get("resource", "")).partition(".")
    if kind not in ("limits", "requests") or not name:
        raise EnvError(f"unsupported resourceFieldRef resource {ref.get('resource')!r}")
    resources = container.get("resources") or {}
    value = (resources.get(kind) or {}).get(name)
    if value is None and kind == "requests":
        value = (resources.get("limits") or {}).get(name)
    if value is None:
        value = node_allocatable.get(name, "0")
    divisor = parse_quantity(ref.get("divisor") or "1")
    return str(math.ceil(parse_quantity(value) / divisor))


def resolve_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    configmaps: Lookup,
    secrets: Lookup,
    service_env: Mapping[str, str],
    node_allocatable: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The container's environment: service variables, then envFrom, then env (later wins).

    `value`s expand `$(VAR)` against what is defined so far, as kubelet does.
    """
    env: dict[str, str] = dict(service_env)
    alloc = node_allocatable or {}

    def source(kind: str, name: str, optional: bool) -> Mapping[str, str] | None:
        data = (configmaps if kind == "configmap" else secrets)(name)
        if data is None and not optional:
            raise EnvError(f'{kind} "{name}" not found')
        return data

    for src in container.get("envFrom") or []:
        prefix = src.get("prefix", "")
        for key, ref in (("configmap", src.get("configMapRef")), ("secret", src.get("secretRef"))):
            if ref is None:
                continue
            data = source(key, ref.get("name", ""), bool(ref.get("optional")))
            for k, v in (data or {}).items():
                env[prefix + k] = v
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var or var.get("value"):
            env[name] = expand(var.get("value", ""), env.get)
            continue
        vf = var["valueFrom"]
        if "fieldRef" in vf:
            env[name] = field_ref_value(pod, vf["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in vf:
            env[name] = resource_field_value(container, vf["resourceFieldRef"], alloc)
        elif "configMapKeyRef" in vf or "secretKeyRef" in vf:
            kind = "configmap" if "configMapKeyRef" in vf else "secret"
            ref = vf.get("configMapKeyRef") or vf.get("secretKeyRef")
            optional = bool(ref.get("optional"))
            data = source(kind, ref.get("name", ""), optional)
            if data is None:
                continue
            if ref["key"] not in data:
                if optional:
                    continue
                raise EnvError(f'couldn\'t find key {ref["key"]} in {kind} "{ref.get("name")}"')
            env[name] = data[ref["key"]]
        else:
            raise EnvError(f"env {name}: unsupported valueFrom {sorted(vf)}")
    return env


def service_env(host: str, port: int) -> dict[str, str]:
    """The `kubernetes` Service variables every pod gets (there is no kube-proxy here,
    so they name the API server directly)."""
    return {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": str(port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
        "KUBERNETES_PORT": f"tcp://{host}:{port}",
        f"KUBERNETES_PORT_{port}_TCP": f"tcp://{host}:{port}",
        f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
        f"KUBERNETES_PORT_{port}_TCP_PORT": str(port),
        f"KUBERNETES_PORT_{port}_TCP_ADDR": host,
    }
