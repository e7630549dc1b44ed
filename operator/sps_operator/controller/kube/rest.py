"""The operator's requests to the API server: where each kind lives (`RESOURCES`) and one
`request` (JSON in, a plain camelCase dict out), on the bare `ApiClient` through
`sps_operator.kube_rest` (shared with `kubectl sps` and the profiler's publisher; why no
typed API is there).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes.client import ApiClient

from sps_operator.api.labels import KUEUE_GROUP, KUEUE_VERSIONS
from sps_operator.constants import API_GROUP, API_VERSION, PLURAL
from sps_operator.controller.policies import workloads
from sps_operator.kube_rest import OBJECT_CAP, Timeout, parse_object, segment, send

Obj = dict[str, Any]

# (connect, read) seconds of each request. Connect: a reachable API server accepts in
# milliseconds; 10 s leaves room for a few lost SYNs (retransmitted after 1 s, then 3 s)
# and no more. Read (each read off the socket, the wait for the headers above all): the
# API server ends a request it has not answered at its own `--request-timeout`, 60 s by
# default, with a 504 that says so; 70 s lets that answer arrive first, while a server that
# hangs, or a proxy that accepts and never answers, frees the handler's thread. The whole
# answer, connect to last byte, has their sum (80 s, `kube_rest.whole_deadline`): a LIST
# of a large namespace takes seconds, and the server's timeout covers writing it too. The
# wait for a token of the operator's rate limit counts against it (at most the pass
# threads over --kube-qps: well under a second with the defaults).
# The Lease's requests have much shorter ones (`process/leader.py`).
REQUEST_TIMEOUT: tuple[float, float] = (10.0, 70.0)


@dataclass(frozen=True)
class Resource:
    """A namespaced kind's coordinates: API group ("" for the core API), version, plural."""

    group: str
    version: str
    plural: str

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def collection(self, namespace: str) -> str:
        return f"{self.prefix}/namespaces/{segment(namespace)}/{self.plural}"

    def object(self, namespace: str, name: str) -> str:
        return f"{self.collection(namespace)}/{segment(name)}"


def _workload(kind: str) -> Resource:
    found = workloads.KINDS[kind]
    return Resource(found.group, found.version, found.plural)


# Every kind the operator reads or writes. Kueue's are at the first version it may serve;
# `Kube` uses the version its last LIST of Workloads found.
RESOURCES: dict[str, Resource] = {
    **{kind: _workload(kind) for kind in workloads.KINDS},
    "Job": Resource("batch", "v1", "jobs"),
    "ConfigMap": Resource("", "v1", "configmaps"),
    "ServiceAccount": Resource("", "v1", "serviceaccounts"),
    "Service": Resource("", "v1", "services"),
    "Event": Resource("", "v1", "events"),
    "Role": Resource("rbac.authorization.k8s.io", "v1", "roles"),
    "RoleBinding": Resource("rbac.authorization.k8s.io", "v1", "rolebindings"),
    "Lease": Resource("coordination.k8s.io", "v1", "leases"),
    "PodDisruptionBudget": Resource("policy", "v1", "poddisruptionbudgets"),
    "HorizontalPodAutoscaler": Resource("autoscaling", "v2", "horizontalpodautoscalers"),
    "SpsProfile": Resource(API_GROUP, API_VERSION, PLURAL),
    "LocalQueue": Resource(KUEUE_GROUP, KUEUE_VERSIONS[0], "localqueues"),
    "Workload": Resource(KUEUE_GROUP, KUEUE_VERSIONS[0], "workloads"),
}


def request(
    api: ApiClient,
    method: str,
    path: str,
    *,
    query: Iterable[tuple[str, Any]] = (),
    body: Any = None,
    content_type: str | None = None,
    cap: int = OBJECT_CAP,
    timeout: Timeout = REQUEST_TIMEOUT,
) -> Obj:
    """One request; the answer's JSON object ({} when empty), at most `cap` bytes
    (`kube_rest.LIST_CAP` for a LIST). A non-2xx answer raises `ApiException` (its typed
    subclass, NotFoundException for a 404, ...) with the status, reason and body as the
    typed client raised it: callers compare `exc.status`. A 2xx answer over the cap or not
    a JSON object raises `kube_rest.AnswerRefused`, an `ApiException` whose 2xx status no
    caller's branch takes for a 404 or a 409. Bounded by `timeout` ((connect, read), and
    their sum for the whole answer): past it, urllib3's timeout error or
    `kube_rest.AnswerTooSlow`, both transient (`kube.client.is_transient`)."""
    data = send(
        api, method, path, query=query, body=body, content_type=content_type, cap=cap,
        timeout=timeout,
    )  # fmt: skip
    return parse_object(data, path) if data else {}
