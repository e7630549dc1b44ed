"""The client-side rate limit: a token bucket, with an injected clock."""

from __future__ import annotations

import pytest

from sps_operator.controller.kube.ratelimit import TokenBucket


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_burst_is_free_then_requests_are_spaced_at_the_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock, sleep=clock.sleep)
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == pytest.approx(0.1)
    assert bucket.take() == pytest.approx(0.1)
    clock.now += 10  # idle: the bucket refills, up to the burst only
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == pytest.approx(0.1)


def test_nonsense_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        TokenBucket(qps=0, burst=1)
    with pytest.raises(ValueError):
        TokenBucket(qps=1, burst=0)


def test_every_request_of_the_operators_client_takes_a_token() -> None:
    from typing import Any

    import urllib3
    from kubernetes import client
    from kubernetes.client import rest

    from sps_operator.controller.kube.client import Kube

    api: Any = client.ApiClient()
    sent: list[str] = []

    def answer(method: str, url: str, **_: Any) -> rest.RESTResponse:
        sent.append(f"{method} {url}")
        return rest.RESTResponse(urllib3.HTTPResponse(body=b'{"items": []}', status=200))

    api.rest_client.request = answer
    clock = FakeClock()
    kube = Kube(api, TokenBucket(qps=1, burst=1, clock=clock, sleep=clock.sleep))
    kube.list_jobs("ns", "a=b")
    kube.list_config_maps("ns", "a=b")
    assert len(sent) == 2 and clock.slept == [pytest.approx(1.0)]
