"""The ConfigMaps that server containers read env from: a cache bounded by what the
Deployments reference, keyed by namespace.

A pass needs them to know what a server really runs (`--model-path $(MODEL)` with MODEL
from a ConfigMap key: `podenv`). They are not the operator's objects, so the operator's
own caches (by its label) do not hold them, and caching every ConfigMap of the cluster
would cost memory in proportion to what anyone creates. This cache holds only what a pass
asked for or a watch event showed to be referenced by a Deployment of the same namespace,
each reduced to `podenv.ConfigMapEnv` (bounded), and at most `max_entries` of them
holding at most `MAX_CHARS` characters in all:

* a pass reads through it: a name it does not hold is read from the API once (a GET) and
  kept, found or not;
* a watch event on a ConfigMap it holds, or that a Deployment of its namespace references,
  updates it; the caller then wakes the profiles that select those Deployments.

Keys are (namespace, name) and a pass reads only its own namespace: a pod can only take
env from a ConfigMap of its namespace, and so can only this cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from sps_operator.controller.kube.client import KubeApi
from sps_operator.controller.policies import workloads
from sps_operator.controller.sglang.podenv import ConfigMapEnv, env_config_maps

MAX_ENTRIES = 10_000
# Characters kept in all (keys and values): 10,000 entries of up to 256 keys of 1 KiB would
# be 2.5 GiB, which a tenant's ConfigMaps at 0 replicas could fill past the pod's limit.
MAX_CHARS = 64 * 2**20


def _chars(value: ConfigMapEnv | None) -> int:
    if value is None:
        return 0
    return sum(len(k) + len(v) for k, v in value.values.items()) + sum(map(len, value.too_long))


def referenced_config_maps(deployments: Iterable[Mapping[str, Any]]) -> set[str]:
    """The ConfigMaps the pod templates of `deployments` read env from."""
    names: set[str] = set()
    for dep in deployments:
        for _, template in workloads.templates(dep):
            names |= env_config_maps(template.get("spec") or {})
    return names


class EnvSources:
    """(namespace, name) -> ConfigMapEnv (None: the ConfigMap does not exist). Safe to use
    from the event loop and from the passes' threads at once."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._entries: OrderedDict[tuple[str, str], ConfigMapEnv | None] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_entries
        self._chars = 0

    def __len__(self) -> int:
        return len(self._entries)

    def read(
        self, kube: KubeApi, namespace: str, names: Iterable[str]
    ) -> dict[str, ConfigMapEnv | None]:
        """The ConfigMaps `names` of `namespace`, reading from the API what is not held. A
        watch event that lands while a GET is under way wins over the GET's answer."""
        out: dict[str, ConfigMapEnv | None] = {}
        for name in sorted(set(names)):
            key = (namespace, name)
            with self._lock:
                if key in self._entries:
                    out[name] = self._entries[key]
                    continue
            fetched = ConfigMapEnv.of(kube.get("ConfigMap", namespace, name))
            with self._lock:
                if key not in self._entries:
                    self._put(key, fetched)
                out[name] = self._entries[key]
                self._trim()
        return out

    def observe(
        self, namespace: str, name: str, body: Mapping[str, Any] | None, referenced: bool
    ) -> bool:
        """A watch event (`body` None: deleted). Kept when held already or `referenced` by a
        Deployment of the namespace; True when what a pass would read changed."""
        key = (namespace, name)
        with self._lock:
            if key not in self._entries and not referenced:
                return False  # before parsing: every ConfigMap event of the cluster comes here
        value = ConfigMapEnv.of(body)
        with self._lock:
            changed = key not in self._entries or self._entries[key] != value
            self._put(key, value)
            self._trim()
        return changed

    def _put(self, key: tuple[str, str], value: ConfigMapEnv | None) -> None:
        self._chars += _chars(value) - _chars(self._entries.get(key))
        self._entries[key] = value

    def _trim(self) -> None:
        while len(self._entries) > self._max or self._chars > MAX_CHARS:
            _, value = self._entries.popitem(last=False)  # read again from the API when needed
            self._chars -= _chars(value)


def read_env_config_maps(
    kube: KubeApi,
    namespace: str,
    deployments: Iterable[Mapping[str, Any]],
    cache: EnvSources | None = None,
) -> dict[str, ConfigMapEnv | None]:
    """What a pass needs: the ConfigMaps its Deployments read env from, through `cache`
    (or straight from the API)."""
    names = referenced_config_maps(deployments)
    if not names:
        return {}
    if cache is None:
        return {n: ConfigMapEnv.of(kube.get("ConfigMap", namespace, n)) for n in sorted(names)}
    return cache.read(kube, namespace, names)
