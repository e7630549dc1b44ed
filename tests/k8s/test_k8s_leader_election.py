"""Leader election against the real API server: one leader at a time, failover when it
stops renewing, immediate hand-over on release."""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from sps_operator.controller.process.leader import LeaseElector, Timing

pytestmark = pytest.mark.k8s

FAST = Timing(lease_duration=3, renew_deadline=2, retry_period=0.5)


def elector(api: ApiClient, namespace: str, identity: str) -> LeaseElector:
    return LeaseElector("sps-test", namespace, identity, api, FAST)


def test_k8s_one_leader_failover_and_release(k8s_api: ApiClient, namespace: str) -> None:
    a, b = elector(k8s_api, namespace, "a"), elector(k8s_api, namespace, "b")
    assert a.try_once() and not b.try_once()
    for _ in range(4):  # a renews; b keeps standing by
        time.sleep(FAST.retry_period)
        assert a.try_once() and not b.try_once()
    holder = client.CoordinationV1Api(k8s_api).read_namespaced_lease("sps-test", namespace)
    assert holder.spec.holder_identity == "a" and holder.spec.lease_duration_seconds == 3

    # a dies (stops renewing): b takes over after a whole lease duration, not before.
    started = time.monotonic()
    while not b.try_once():
        assert time.monotonic() - started < FAST.lease_duration + 2 * FAST.retry_period
        time.sleep(FAST.retry_period)
    assert time.monotonic() - started >= FAST.lease_duration - FAST.retry_period
    assert not a.is_leader()  # stepped down before b could take over

    # b releases at shutdown: a takes the Lease at once.
    b.release()
    assert a.try_once()
    lease = client.CoordinationV1Api(k8s_api).read_namespaced_lease("sps-test", namespace)
    assert lease.spec.holder_identity == "a" and lease.spec.lease_transitions == 2
