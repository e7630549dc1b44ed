"""Selectors and table paths: the regexes the CRD's CEL rules and pydantic share, against a
regex-free reading of Kubernetes' rules (Hypothesis). Any input either validates, and then
is something the API server and the operator can use, or fails with a message that says
what to fix. The CEL side: tests/k8s/test_k8s_controlplane_crd.py."""

from __future__ import annotations

import string
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sps_operator.api.label_selector import LabelSelector, LabelSelectorRequirement
from sps_operator.api.spec import RolloutSpec
from sps_operator.api.validation import (
    MAX_TABLE_PATH,
    MSG_EXPRESSION_KEY,
    MSG_EXPRESSION_VALUE,
    MSG_EXPRESSION_VALUES_FORBIDDEN,
    MSG_EXPRESSION_VALUES_REQUIRED,
    MSG_MATCH_LABELS_KEY,
    MSG_MATCH_LABELS_VALUE,
    MSG_SELECTOR_EMPTY,
    MSG_TABLE_PATH,
    MSG_TABLE_PATH_DOTS,
    SYSTEM_DIRECTORIES,
)

ALNUM = set(string.ascii_letters + string.digits)
LOWER_ALNUM = set(string.ascii_lowercase + string.digits)


def dns_subdomain(text: str) -> bool:
    if not 0 < len(text) <= 253:
        return False
    for label in text.split("."):
        if not label or not set(label) <= LOWER_ALNUM | {"-"}:
            return False
        if label[0] == "-" or label[-1] == "-":
            return False
    return True


def label_name(text: str) -> bool:
    return (
        0 < len(text) <= 63
        and set(text) <= ALNUM | set("-_.")
        and text[0] in ALNUM
        and text[-1] in ALNUM
    )


def label_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and not dns_subdomain(prefix):
        return False
    return label_name(name)


def label_value(value: str) -> bool:
    return value == "" or label_name(value)


def requirement_ok(req: dict[str, Any]) -> bool:
    """Kubernetes' ValidateLabelSelectorRequirement, read directly, plus non-empty values
    (an empty one cannot be written in the `key in (a,b)` form the operator lists with)."""
    values = req.get("values") or []
    if req["operator"] in ("In", "NotIn"):
        shape = bool(values)
    elif req["operator"] in ("Exists", "DoesNotExist"):
        shape = not values
    else:
        return False
    return (
        shape
        and label_key(req["key"])
        and len(values) <= 64
        and all(v and label_value(v) for v in values)
    )


SELECTOR_MESSAGES = (
    MSG_EXPRESSION_KEY,
    MSG_EXPRESSION_VALUES_REQUIRED,
    MSG_EXPRESSION_VALUES_FORBIDDEN,
    MSG_EXPRESSION_VALUE,
    MSG_MATCH_LABELS_KEY,
    MSG_MATCH_LABELS_VALUE,
    MSG_SELECTOR_EMPTY,
)

_LABELISH = st.one_of(
    st.from_regex(
        r"[a-z0-9]([-a-z0-9.]{0,10}[a-z0-9])?(/[A-Za-z0-9][-A-Za-z0-9_.]{0,8})?", fullmatch=True
    ),
    st.sampled_from(["app", "app.kubernetes.io/name", "a/b/c", "-app", "app-", "a..b/x", "x/"]),
    st.sampled_from(["a" * 63, "a" * 64, "p" * 253 + "/n", "p" * 254 + "/n", "", "A/b", "a b"]),
    st.text(max_size=12),
)
_VALUES = st.one_of(st.none(), st.lists(_LABELISH, max_size=3))
_OPERATORS = st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "in", "Equals"])


def _fails_with(exc: ValidationError, messages: tuple[str, ...]) -> bool:
    """Our message, or one of pydantic's bound messages ("String should have at most 63
    characters", "Input should be 'In', ..."): either way it says what to fix."""
    text = str(exc)
    return any(m in text for m in messages) or " should " in text


@settings(max_examples=400, derandomize=True, deadline=None)
@given(key=_LABELISH, operator=_OPERATORS, values=_VALUES)
def test_any_requirement_validates_as_kubernetes_would_or_says_why(
    key: str, operator: str, values: list[str] | None
) -> None:
    req: dict[str, Any] = {"key": key, "operator": operator}
    if values is not None:
        req["values"] = values
    try:
        parsed = LabelSelectorRequirement.model_validate(req)
    except ValidationError as exc:
        assert not requirement_ok(req)
        assert _fails_with(exc, SELECTOR_MESSAGES), str(exc)
        return
    assert requirement_ok(req), req
    # What passes can be written in the selector string the operator lists with.
    for value in parsed.values or []:
        assert "," not in value and " " not in value and ")" not in value


@settings(max_examples=300, derandomize=True, deadline=None)
@given(labels=st.dictionaries(_LABELISH, _LABELISH, max_size=3))
def test_any_match_labels_validate_as_kubernetes_would_or_say_why(labels: dict[str, str]) -> None:
    expected = bool(labels) and all(label_key(k) and label_value(v) for k, v in labels.items())
    expected = expected and all(len(v) <= 63 for v in labels.values())
    try:
        LabelSelector.model_validate({"matchLabels": labels})
    except ValidationError as exc:
        assert not expected
        assert _fails_with(exc, SELECTOR_MESSAGES), str(exc)
        return
    assert expected, labels


SAFE = set(string.ascii_letters + string.digits + "._-")


def table_path_ok(path: str) -> bool:
    if not path.startswith("/") or len(path) > MAX_TABLE_PATH:
        return False
    segments = path[1:].split("/")
    if not all(segments) or not all(set(s) <= SAFE for s in segments):
        return False
    if any(s in (".", "..") for s in segments):
        return False
    directory = "/" + "/".join(segments[:-1])
    return directory not in SYSTEM_DIRECTORIES


TABLE_PATH_MESSAGES = (
    MSG_TABLE_PATH,
    MSG_TABLE_PATH_DOTS,
    "rollout.tablePath: the table's ConfigMap volume would be mounted on",
)
_SEGMENT = st.one_of(
    st.sampled_from(["etc", "usr", "local", "bin", "lib", "sps", "table", "..", ".", "", "t.json"]),
    st.text(alphabet="abc._-/ $", max_size=6),
)
_PATHS = st.one_of(
    st.lists(_SEGMENT, min_size=1, max_size=4).map(lambda s: "/" + "/".join(s)),
    st.lists(_SEGMENT, min_size=1, max_size=3).map("/".join),
    st.text(max_size=20),
)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(_PATHS)
def test_any_table_path_is_a_safe_mount_or_says_why(path: str) -> None:
    try:
        RolloutSpec(table_path=path)
    except ValidationError as exc:
        assert not table_path_ok(path), path
        assert _fails_with(exc, TABLE_PATH_MESSAGES), str(exc)
        return
    assert table_path_ok(path), path
