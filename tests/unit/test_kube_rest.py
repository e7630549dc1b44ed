"""The one bare-ApiClient request (`sps_operator/kube_rest.py`) the operator, `kubectl sps`
and the profiler's publisher share: the size cap on every answer, the one exception type,
the JSON parse of whatever an API server (or a proxy in front of it) sends."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import urllib3
from fakerest import FakeRest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.client import ApiClient, Configuration, rest
from kubernetes.client.exceptions import ApiException, ServiceException

from sps_operator import kube_rest
from sps_operator.kube_rest import AnswerRefused, parse_object, send

PATH = "/api/v1/namespaces/ns/configmaps/x"


class CountingBody(io.RawIOBase):
    """An endless answer that counts what the client read of it."""

    def __init__(self) -> None:
        self.served = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        view[:] = b"a" * len(view)
        self.served += len(view)
        return len(view)


def _streaming(status: int, body: io.RawIOBase) -> ApiClient:
    api = ApiClient(Configuration(host="https://api.test"))

    def answer(*_: Any, **__: Any) -> rest.RESTResponse:
        streamed = urllib3.HTTPResponse(body=body, status=status, preload_content=False)
        return rest.RESTResponse(streamed)

    api.rest_client.request = answer  # type: ignore[method-assign]
    return api


def test_an_answer_over_the_cap_is_refused_without_reading_the_rest() -> None:
    endless = CountingBody()
    with pytest.raises(AnswerRefused) as refused:
        send(_streaming(200, endless), "GET", PATH, cap=1 << 20)
    exc = refused.value
    assert str(exc) == f"{PATH}: the API server's answer is over the 1 MiB cap (refused)"
    assert exc.status == 200 and isinstance(exc, ApiException)
    # At most the cap and one read's buffer past it, of an answer that never ends.
    assert endless.served <= (1 << 20) + 64 * 1024, endless.served


def test_an_answer_at_the_cap_is_taken_and_one_byte_more_is_not() -> None:
    at_cap = {"data": "x" * 100}
    size = len(json.dumps(at_cap))
    fake = FakeRest(lambda sent: (200, at_cap))
    assert parse_object(send(fake.api, "GET", PATH, cap=size), PATH) == at_cap
    with pytest.raises(AnswerRefused, match=f"over the {size - 1} bytes cap"):
        send(fake.api, "GET", PATH, cap=size - 1)


def test_a_preloaded_answer_is_held_to_the_cap_too() -> None:
    """A REST layer that read the answer already (an older client's, the start benchmark's
    stand-in) gives no stream: the body in memory is measured instead."""
    api = ApiClient(Configuration(host="https://api.test"))
    whole = urllib3.HTTPResponse(body=b'{"a": "' + b"b" * 5000 + b'"}', status=200)
    api.rest_client.request = lambda *_, **__: rest.RESTResponse(whole)  # type: ignore[method-assign]
    with pytest.raises(AnswerRefused, match="over the 4096 bytes cap"):
        send(api, "GET", PATH, cap=4096)
    assert send(api, "GET", PATH, cap=8192).startswith(b'{"a": "bbb')


def test_a_refusal_keeps_its_status_and_a_cut_body() -> None:
    """A non-2xx answer is the typed client's exception, whatever its size: its status is
    what callers act on, its body read only up to ERROR_BODY_CAP."""
    endless = CountingBody()
    with pytest.raises(ServiceException) as raised:
        send(_streaming(503, endless), "GET", PATH)
    assert raised.value.status == 503
    assert len(raised.value.body or "") == kube_rest.ERROR_BODY_CAP
    assert endless.served <= kube_rest.ERROR_BODY_CAP + 64 * 1024
    status = {"kind": "Status", "code": 409, "message": "the object changed"}
    with pytest.raises(ApiException) as conflict:
        send(FakeRest(lambda sent: (409, status)).api, "PUT", PATH, body={})
    assert conflict.value.status == 409 and json.loads(conflict.value.body or "") == status


def test_the_body_goes_as_json_with_its_content_type_and_the_query_as_given() -> None:
    fake = FakeRest(lambda sent: (200, {}))
    send(fake.api, "PATCH", PATH, query=[("fieldManager", "m")], body={"a": 1},
         content_type=kube_rest.STRATEGIC_MERGE_PATCH)  # fmt: skip
    (sent,) = fake.sent
    assert (sent.method, sent.path, sent.query, sent.body) == ("PATCH", PATH, {"fieldManager": "m"},
                                                              {"a": 1})  # fmt: skip
    assert sent.headers["Content-Type"] == "application/strategic-merge-patch+json"
    assert sent.headers["Accept"] == "application/json"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"<html>a proxy</html>", "the API server answered no JSON"),
        (b"\xff\xfe\xfd", "the API server answered no JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "the API server answered no JSON"),
        (b'[{"metadata": {}}]', "the API server answered no JSON object"),
        (b"7", "the API server answered no JSON object"),
    ],
)
def test_what_is_no_json_object_is_refused_by_name(raw: bytes, reason: str) -> None:
    with pytest.raises(AnswerRefused) as refused:
        parse_object(raw, PATH)
    assert (refused.value.reason, refused.value.path, refused.value.status) == (reason, PATH, 200)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=20,
)


@given(
    st.one_of(
        st.binary(max_size=300),
        JSON_VALUES.map(lambda v: json.dumps(v).encode()),
        st.text(max_size=100).map(lambda t: t.encode("utf-16")),
    )
)
def test_any_bytes_parse_to_an_object_or_the_one_refusal(raw: bytes) -> None:
    try:
        parsed = parse_object(raw, PATH)
    except AnswerRefused as exc:
        assert exc.reason.startswith("the API server answered no JSON")
    else:
        assert isinstance(parsed, dict)
