"""A real `kubernetes.client.ApiClient` whose HTTP is answered in the test: everything of the
operator's request path runs (`controller/kube/rest.py`, the rate limit on the REST
client's `request`) down to the socket, which is never opened."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import urllib3
from kubernetes.client import ApiClient, Configuration, rest


@dataclass(frozen=True)
class Sent:
    """One request as it went out."""

    method: str
    path: str  # unquoted
    raw_path: str  # as sent
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


# (status, body) for a request; a dict body is sent as JSON, bytes as they are.
Answer = Callable[[Sent], tuple[int, Any]]


@dataclass
class FakeRest:
    answer: Answer
    sent: list[Sent] = field(default_factory=list)
    api: ApiClient = field(init=False)

    def __post_init__(self) -> None:
        self.api = ApiClient(Configuration(host="https://api.test"))
        rest_client: Any = self.api.rest_client
        rest_client.request = self._request

    def _request(self, method: str, url: str, headers: Any = None, body: Any = None,
                 **_: Any) -> rest.RESTResponse:  # fmt: skip
        parts = urlsplit(url)
        sent = Sent(method, unquote(parts.path), parts.path, dict(parse_qsl(parts.query)),
                    dict(headers or {}), json.loads(json.dumps(body)))  # fmt: skip
        self.sent.append(sent)
        status, answer = self.answer(sent)
        data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        reason = "OK" if 200 <= status <= 299 else "Refused"
        # Streamed, as the client's REST layer returns it (`preload_content=False`).
        streamed = urllib3.HTTPResponse(
            body=io.BytesIO(data), status=status, reason=reason, preload_content=False
        )
        return rest.RESTResponse(streamed)
