"""Whether a Job found under a run's name is the Job the operator builds (pure).

A Job is adopted (`ownership.adoption_refusal`) only when every field the operator builds
has the operator's value in it, and it has nothing the operator does not build except what
the API server defaults and what Kueue changes at admission. A Job a tenant created ahead
of the operator under the run's name (names derive from the profile's UID, which is no
secret), with the profile as its controller, would otherwise run its author's command, GPUs
or pods as the profile's run: ahead of others in a shared GPU pool, outside jobPolicy.

What is compared against what. The Job the operator would build NOW, not the one a recorded
run describes: adoption happens only when the create of this very pass found the name
taken, i.e. the status write after an earlier create was lost (a crash in the seconds
between the two), so there is no record to compare with; and a Job a run already records
(a running Job at an operator restart or upgrade, e.g. 0.1.0's in tests/e2e/
test_e2e_upgrade.py) is never compared: it is followed by the UID its status records
(`profiling.run._replaced_job`). Only a crash in that window that is also an upgrade or a
reconfiguration (another profiler image) is refused, with NameTaken saying to delete it.

The rules, for a Job as the API server returns it:
- a field the operator sets must be equal; missing and empty ({} [] "" None) are alike;
  quantities are compared by value ("1000m" == "1", "1Gi" == "1073741824");
- lists of named things (containers, env, volumes, mounts, ports) are matched by name and
  must have the same names: no extra container, init container, volume, variable, mount;
- a field the operator does not set must be absent or empty, unless the API server defaults
  it (and it has the default value) or Kueue sets it at admission (only for a Job the
  operator queued in Kueue: `suspend`, nodeSelector keys, tolerations, scheduling gates);
- an extra resource request is refused, except the request the API server copies from a
  limit the operator sets.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from fnmatch import fnmatchcase
from typing import Any

from sps_operator.api.labels import LABEL_KUEUE_QUEUE

Accept = Callable[[Any], bool]


def _equals(value: Any) -> Accept:
    return lambda v: v == value and isinstance(v, bool) == isinstance(value, bool)


def _one_of(*values: Any) -> Accept:
    return lambda v: isinstance(v, str) and v in values


def _anything(_: Any) -> bool:
    return True


_STR: Accept = lambda v: isinstance(v, str)  # noqa: E731


def _str_map(value: Any) -> bool:
    return isinstance(value, Mapping) and all(isinstance(v, str) for v in value.values())


# What the API server fills in where the operator sets nothing: (shape, field) -> the
# values it may have. A shape is the path with a named list's items as `[]`; "*" matches.
DEFAULTED: dict[str, dict[str, Accept]] = {
    "spec": {
        "completions": _equals(1),
        "parallelism": _equals(1),
        # 6 without backoffLimitPerIndex; the largest int32 (no Job-wide limit) beside it,
        # which is how a group clone's Job comes back (the operator sets only the per-index
        # limit, so a forged 6 there changes nothing: one failed index fails the Job).
        # Accepting 6 alone refused the operator's own group Job as NameTaken.
        "backoffLimit": lambda v: _equals(6)(v) or _equals(2**31 - 1)(v),
        "completionMode": _one_of("NonIndexed"),
        "podReplacementPolicy": _one_of("TerminatingOrFailed", "Failed"),
        "manualSelector": _equals(False),
        "selector": _anything,  # generated from the Job's UID (manualSelector is not true)
        "suspend": _equals(False),
    },
    "spec.template.metadata": {
        "creationTimestamp": _anything,
        "labels": _str_map,
        "annotations": _str_map,
    },
    "spec.template.metadata.labels": {"*": _STR},  # job-name, controller-uid, Kueue's
    "spec.template.metadata.annotations": {"*": _STR},
    "spec.template.spec": {
        "terminationGracePeriodSeconds": _equals(30),
        "dnsPolicy": _one_of("ClusterFirst"),
        "schedulerName": _one_of("default-scheduler"),
        "enableServiceLinks": _equals(True),
        # (priority, preemptionPolicy and overhead are set by admission on pods, never on
        # a Job's template: there they are someone else's)
    },
    "*.containers[]": {
        "terminationMessagePath": _one_of("/dev/termination-log"),
        "terminationMessagePolicy": _one_of("File"),
        "imagePullPolicy": _one_of("Always", "IfNotPresent"),
    },
    "*.ports[]": {"protocol": _one_of("TCP")},
    "*.fieldRef": {"apiVersion": _one_of("v1")},
    "*Probe": {
        "timeoutSeconds": _equals(1),
        "periodSeconds": _equals(10),
        "successThreshold": _equals(1),
        "failureThreshold": _equals(3),
    },
    "*Probe.httpGet": {"scheme": _one_of("HTTP")},
    "*.volumes[].configMap": {"defaultMode": _equals(420)},
    "*.volumes[].secret": {"defaultMode": _equals(420)},
    "*.volumes[].downwardAPI": {"defaultMode": _equals(420)},
    "*.volumes[].projected": {"defaultMode": _equals(420)},
    "*.serviceAccountToken": {"expirationSeconds": _equals(3600)},
    "*.hostPath": {"type": _one_of("")},
}
DEFAULTED["*.initContainers[]"] = DEFAULTED["*.containers[]"]
# What the API server mirrors from a field the operator sets: (shape, field) -> that field.
MIRRORED = {("spec.template.spec", "serviceAccount"): "serviceAccountName"}
# What Kueue changes when it admits a Job the operator queued (a ResourceFlavor's node
# labels and tolerations, topology scheduling gates); `suspend` it flips.
KUEUE_ADMITS: dict[str, dict[str, Accept]] = {
    "spec": {"suspend": _anything},
    "spec.template.spec": {"nodeSelector": _str_map, "schedulingGates": _anything},
    "spec.template.spec.nodeSelector": {"*": _STR},
}
NOT_COMPARED = {("spec", "suspend")}  # set by the operator for Kueue, which flips it

# Lists whose items are matched by a key, not by position.
KEYED_LISTS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
}
QUANTITY_MAPS = ("*.resources.limits", "*.resources.requests")

_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]([+-]?\d{1,3})|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$"
)
_SUFFIX = {
    None: Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18, "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}  # fmt: skip


def parse_quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity ("500m", "8", "1Gi", "1e3") by value (None: not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    match = _QUANTITY.match(str(value)) if len(str(value)) <= 40 else None
    if match is None:
        return None
    try:
        number = Decimal(match.group(1))
    except InvalidOperation:
        return None
    if match.group(2) is not None:
        return number.scaleb(int(match.group(2)))
    return number * _SUFFIX[match.group(3)]


def job_refusal(existing: Mapping[str, Any], built: Mapping[str, Any]) -> str | None:
    """Why the Job `existing` is not the Job `built` (the operator's, as it builds it now)
    with only the API server's defaults and Kueue's admission added (None: it is)."""
    kueue = bool(_mapping(_mapping(built.get("metadata")).get("labels")).get(LABEL_KUEUE_QUEUE))
    walk = _Walk(kueue)
    meta, built_meta = _mapping(existing.get("metadata")), _mapping(built.get("metadata"))
    for field in ("labels", "annotations"):  # others may add theirs (kubectl, tools)
        mine, theirs = _mapping(built_meta.get(field)), _mapping(meta.get(field))
        differ = sorted(k for k, v in mine.items() if theirs.get(k) != v)
        if differ:
            return f"its {field} are not the operator's ({', '.join(differ[:5])})"
    found = walk.differ(built.get("spec"), existing.get("spec"), "spec", "spec")
    if found is not None:
        return f"{found} is not what the operator builds"
    return None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (Mapping, list, str)) and not value)


def _accepts(table: Mapping[str, Mapping[str, Accept]], shape: str, key: str, value: Any) -> bool:
    for pattern, fields in table.items():
        if fnmatchcase(shape, pattern):
            accept = fields.get(key) or fields.get("*")
            if accept is not None and accept(value):
                return True
    return False


class _Walk:
    """Compares a built value (`mine`) with the existing one (`theirs`); returns where they
    differ (a path for people: named items by name) or None."""

    def __init__(self, kueue: bool) -> None:
        self.kueue = kueue

    def extra_allowed(self, shape: str, key: str, value: Any, mine: Mapping[str, Any]) -> bool:
        if _empty(value) or _accepts(DEFAULTED, shape, key, value):
            return True
        alias = MIRRORED.get((shape, key))
        if alias is not None and value == mine.get(alias):
            return True
        return self.kueue and _accepts(KUEUE_ADMITS, shape, key, value)

    def differ(self, mine: Any, theirs: Any, where: str, shape: str) -> str | None:
        if isinstance(mine, Mapping):
            return self._mappings(mine, theirs, where, shape)
        if isinstance(mine, list):
            return self._lists(mine, theirs, where, shape)
        if _empty(mine):
            return None if _empty(theirs) else where
        if _quantity_shape(shape):
            mine_q = parse_quantity(mine)
            if mine_q is not None and mine_q == parse_quantity(theirs):
                return None
        return None if _same_scalar(mine, theirs) else where

    def _mappings(self, mine: Mapping[str, Any], theirs: Any, where: str, shape: str) -> str | None:
        if _empty(theirs):
            theirs = {}
        if not isinstance(theirs, Mapping):
            return where
        if shape.endswith(".resources"):
            return self._resources(mine, theirs, where, shape)
        for key, value in mine.items():
            if (shape, key) in NOT_COMPARED:
                continue
            found = self.differ(value, theirs.get(key), f"{where}.{key}", f"{shape}.{key}")
            if found is not None:
                return found
        for key, value in theirs.items():
            if key not in mine and not self.extra_allowed(shape, str(key), value, mine):
                return f"{where}.{key}"
        return None

    def _lists(self, mine: list[Any], theirs: Any, where: str, shape: str) -> str | None:
        if _empty(theirs):
            theirs = []
        if not isinstance(theirs, list):
            return where
        name = shape.rsplit(".", 1)[-1]
        key = KEYED_LISTS.get(name)
        if key is not None and len({_item_key(item, key) for item in mine}) == len(mine):
            return self._keyed(mine, theirs, key, where, f"{shape}[]")
        if key is not None:  # (a name twice, as env may have): by position
            return self._positional(mine, theirs, where, f"{shape}[]")
        if self.kueue and shape == "spec.template.spec.tolerations":
            # Kueue adds its ResourceFlavor's: each of the operator's must be there.
            for i, item in enumerate(mine):
                if all(self.differ(item, t, where, f"{shape}[]") for t in theirs):
                    return f"{where}[{i}]"
            return None
        return self._positional(mine, theirs, where, f"{shape}[]")

    def _positional(self, mine: list[Any], theirs: list[Any], where: str, items: str) -> str | None:
        if len(mine) != len(theirs):
            return where
        for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            found = self.differ(a, b, f"{where}[{i}]", items)
            if found is not None:
                return found
        return None

    def _keyed(
        self, mine: list[Any], theirs: list[Any], key: str, where: str, shape: str
    ) -> str | None:
        built = {_item_key(item, key): item for item in mine}
        found: dict[str, Any] = {}
        for item in theirs:
            name = _item_key(item, key)
            if name in found or name not in built:  # a duplicate, or one the operator has not
                return f"{where}[{name}]"
            found[name] = item
        for name, item in built.items():
            differ = self.differ(item, found.get(name), f"{where}[{name}]", shape)
            if differ is not None:
                return differ
        return None

    def _resources(
        self, mine: Mapping[str, Any], theirs: Mapping[str, Any], where: str, shape: str
    ) -> str | None:
        """Limits and requests by value, no other resource; a request the API server copied
        from a limit the operator set (it sets none of that name) is the operator's."""
        limits, requests = _mapping(mine.get("limits")), _mapping(mine.get("requests"))
        copied = {
            k: limits[k]
            for k in _mapping(theirs.get("requests"))
            if k not in requests and k in limits
        }
        wanted = {**mine, "requests": {**requests, **copied}}
        return self._plain(wanted, theirs, where, shape)

    def _plain(
        self, mine: Mapping[str, Any], theirs: Mapping[str, Any], where: str, shape: str
    ) -> str | None:
        for key, value in mine.items():
            found = self.differ(value, theirs.get(key), f"{where}.{key}", f"{shape}.{key}")
            if found is not None:
                return found
        extra = [k for k, v in theirs.items() if k not in mine and not _empty(v)]
        return f"{where}.{extra[0]}" if extra else None


def _item_key(item: Any, key: str) -> str:
    return str(_mapping(item).get(key))[:253]


def _quantity_shape(shape: str) -> bool:
    return shape.endswith(".sizeLimit") or any(fnmatchcase(shape, f"{p}.*") for p in QUANTITY_MAPS)


def _same_scalar(mine: Any, theirs: Any) -> bool:
    if isinstance(mine, bool) or isinstance(theirs, bool):
        return isinstance(mine, bool) and isinstance(theirs, bool) and mine == theirs
    if isinstance(mine, (int, float)) and isinstance(theirs, (int, float)):
        return mine == theirs
    return type(mine) is type(theirs) and mine == theirs
