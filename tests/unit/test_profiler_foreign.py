"""A profiler pointed at a server that is not a DSpark server (issue 18, item 22): what it
answers never reaches a message (status, the pod log), and no connection is kept to a
metadata or link-local address. Network traffic: loopback only."""

from __future__ import annotations

import http.server
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopback import serving
from sps_operator.profiler import client as client_module
from sps_operator.profiler.cli import main
from sps_operator.profiler.client import DsparkClient, ServerResponseError, ServerUnavailableError
from sps_operator.profiler.server_info import ServerCheckError, server_context_from_info
from sps_operator.profiler.session import Session
from sps_operator.profiler.untrusted import shown

SECRET = "AKIAIOSFODNN7EXAMPLE-instance-role-token"


class _Foreign(http.server.BaseHTTPRequestHandler):
    """Answers like some internal service: its own bodies, which carry a secret."""

    answers: ClassVar[dict[str, tuple[int, str, str]]] = {}
    seen: ClassVar[list[str]] = []

    def _answer(self) -> None:
        self.seen.append(self.path)
        status, media, body = self.answers.get(self.path, (200, "text/plain", SECRET))
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", media)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def foreign() -> Iterator[str]:
    _Foreign.answers, _Foreign.seen = {}, []
    with serving(_Foreign) as url:
        yield url


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ((200, "text/html", f"<html>{SECRET}</html>"), ("not JSON", "HTTP 200, text/html")),
        ((403, "application/json", json.dumps({"token": SECRET})), ("HTTP 403",)),
        ((500, f"text/{SECRET}", SECRET), ("HTTP 500", "another media type")),
    ],
)
def test_an_answer_is_described_never_quoted(
    foreign: str, answer: tuple[int, str, str], words: tuple[str, ...]
) -> None:
    _Foreign.answers["/server_info"] = answer
    with DsparkClient(foreign) as client, pytest.raises(ServerResponseError) as info:
        client.server_info()
    message = str(info.value)
    assert SECRET not in message
    for word in words:
        assert word in message, message
    assert f"{len(answer[2])} bytes" in message


def test_set_internal_state_and_abort_say_yes_or_no_never_what_the_server_wrote(
    foreign: str, caplog: pytest.LogCaptureFixture
) -> None:
    refusal = json.dumps([{"updated": False, "message": SECRET}, True])
    _Foreign.answers["/set_internal_state"] = (200, "application/json", refusal)
    _Foreign.answers["/abort_request"] = (500, "text/plain", SECRET)
    with DsparkClient(foreign) as client:
        ok, answer = client.set_internal_state({"dspark_force_budget_frac": 0.5})
        assert not ok and answer == "accepted per rank: no, yes"
        _Foreign.answers["/set_internal_state"] = (400, "text/html", SECRET)
        ok, answer = client.set_internal_state({"dspark_force_budget_frac": 0.5})
        assert not ok and SECRET not in answer and "HTTP 400" in answer
        with pytest.raises(ServerResponseError) as info:
            client.abort_all()
        assert SECRET not in str(info.value)
        session = Session(client, context=None, vocab_size=1000, temperature=0.0)  # type: ignore[arg-type]
        session.pinned = 0.5
        with caplog.at_level(logging.WARNING):
            session.reset_pin()
            session.clear_records()
    assert caplog.records and SECRET not in caplog.text


def test_the_profiler_says_nothing_of_a_foreign_answer_in_its_log_or_result(
    foreign: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The whole profiler against a service that is not DSpark: it fails, and neither its
    stderr (the pod log) nor its log records (the result's message) carry the answer."""
    _Foreign.answers["/health"] = (200, "text/plain", SECRET)
    args = ["run", "--base-url", foreign, "--out", str(tmp_path / "t.json"), "--batch-size", "1"]
    with caplog.at_level(logging.DEBUG):
        assert main(args) == 1
    err = capsys.readouterr().err
    assert "/server_info" in err and "not JSON" in err
    assert SECRET not in err and SECRET not in caplog.text


def test_a_connection_to_a_forbidden_peer_is_refused_before_a_request_is_sent(
    foreign: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check is on the socket actually connected (after DNS): here loopback is made
    forbidden to show the server never sees the request."""
    monkeypatch.setattr(
        client_module,
        "forbidden_peer",
        lambda ip: f"{ip} is forbidden" if ip == "127.0.0.1" else None,
    )
    with DsparkClient(foreign) as client, pytest.raises(ServerUnavailableError) as info:
        client.server_info()
    assert "refused to talk to 127.0.0.1 is forbidden" in str(info.value)
    assert not client.health()
    assert _Foreign.seen == []


def _dspark_info(where: str, key: str, value: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "mode": "static",
        "verify_num_draft_tokens": 8,
        "components": ["core", "step_cpu_time"],
        "simulate_acc_len": 1.0,
    }
    decode: dict[str, Any] = {"bs": [1, 2]}
    state = {"dspark_info_record": payload, "cuda_graph_config": {"decode": decode}}
    info: dict[str, Any] = {"speculative_algorithm": "DSPARK", "internal_states": [state]}
    {"info": info, "record": payload, "decode": decode}[where][key] = value
    return info


@pytest.mark.parametrize(
    ("where", "key", "value", "described"),
    [
        ("info", "speculative_algorithm", SECRET, "a text of 40 characters"),
        ("record", "mode", SECRET, "a text of 40 characters"),
        ("record", "components", SECRET, "a text of 40 characters"),
        ("record", "simulate_acc_len", SECRET, "a text of 40 characters"),
        ("decode", "bs", [SECRET], "a text of 40 characters"),
        ("decode", "max_bs", {"k": SECRET}, "an object of 1 keys"),
    ],
)
def test_server_info_values_are_described_not_quoted(
    where: str, key: str, value: Any, described: str
) -> None:
    """What /server_info says is quoted only when it is a number or a word SGLang uses."""
    info = _dspark_info(where, key, value)
    if key == "max_bs":
        del info["internal_states"][0]["cuda_graph_config"]["decode"]["bs"]
    with pytest.raises(ServerCheckError) as raised:
        server_context_from_info(info, base_url="http://x", offdiagonal=False)
    message = str(raised.value)
    assert SECRET not in message and described in message, message


JSON = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
SHOWN = re.compile(
    r"None|True|False|[-+0-9.e]+|inf|-inf|nan|'(static|compact)'"
    r"|a text of \d+ characters|a list of \d+ items|an object of \d+ keys"
)


@given(JSON)
def test_shown_is_a_number_a_known_word_or_a_size(value: Any) -> None:
    assert SHOWN.fullmatch(shown(value, ("static", "compact"))), shown(value)
