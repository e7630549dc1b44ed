"""The committed CRD and API docs are generated from the models and must not drift."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from sps_operator.api.crd import build_crd, render_crd, render_crd_template
from sps_operator.api.docs import render_api_docs
from sps_operator.api.spec import MAX_CONCURRENT_COUNT, MSG_MAX_CONCURRENT, RolloutSpec
from sps_operator.api.validation import full_match

ROOT = Path(__file__).resolve().parents[2]


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        found.append((path, node))
        for key, value in node.items():
            found += _walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _walk(value, f"{path}/{i}")
    return found


def test_committed_crd_matches_models() -> None:
    committed = (ROOT / "crds" / "sps.dev_spsprofiles.yaml").read_text()
    assert committed == render_crd(), (
        "run: .venv/bin/sps-operator crd > crds/sps.dev_spsprofiles.yaml"
    )


def test_chart_crd_template_matches_models() -> None:
    committed = ROOT / "charts" / "sps-operator" / "templates" / "crd-spsprofiles.yaml"
    assert committed.read_text() == render_crd_template(), (
        "run: .venv/bin/sps-operator crd --helm > "
        "charts/sps-operator/templates/crd-spsprofiles.yaml (or `make crds`)"
    )


def test_committed_api_docs_match_models() -> None:
    committed = (ROOT / "docs" / "api.md").read_text()
    assert committed == render_api_docs(), "run: .venv/bin/sps-operator crd --docs > docs/api.md"


def test_api_docs_link_only_to_sections_they_have() -> None:
    # Every model a field refers to has its own section, and every type is resolved (a model
    # defined after the one using it once rendered as "ForwardRef('...')").
    text = render_api_docs()
    assert "ForwardRef" not in text
    anchors = {line[4:].strip().lower() for line in text.splitlines() if line.startswith("### ")}
    links = set(re.findall(r"\]\(#([a-z0-9-]+)\)", text))
    assert links, "no links found: the test no longer reads the docs"
    assert links <= anchors, f"links without a section: {sorted(links - anchors)}"


def test_schema_is_structural() -> None:
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        if path.endswith("/x-kubernetes-validations") or "/x-kubernetes-validations/" in path:
            continue
        if path.endswith("/properties") or (path.endswith("/additionalProperties") and not node):
            continue
        assert "$ref" not in node and "anyOf" not in node and "title" not in node, path
        if "properties" in node or "items" in node:
            assert node.get("type") in ("object", "array"), path
        if node.get("additionalProperties") is False:
            raise AssertionError(f"additionalProperties: false at {path}")
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True, path


def test_names_printer_columns_and_status_subresource() -> None:
    crd = yaml.safe_load(render_crd())
    assert crd["metadata"]["name"] == "spsprofiles.sps.dev"
    names = crd["spec"]["names"]
    assert names["shortNames"] == ["sps"] and "sglang" in names["categories"]
    assert crd["spec"]["scope"] == "Namespaced"
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Reason"] == '.status.conditions[?(@.type=="Ready")].reason'
    assert set(columns) == {"GPU", "Table", "Ready", "Reason", "Age", "Message"}
    # Message only with `-o wide` (priority 1): the default view stays one short line.
    priority = {c["name"]: c.get("priority", 0) for c in version["additionalPrinterColumns"]}
    assert priority == {"GPU": 0, "Table": 0, "Ready": 0, "Reason": 0, "Age": 0, "Message": 1}
    assert columns["Message"] == '.status.conditions[?(@.type=="Ready")].message'


def test_every_list_is_typed() -> None:
    """A list without x-kubernetes-list-type merges by guess under server-side apply."""
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    lists = {path: node for path, node in _walk(schema) if node.get("type") == "array"}
    assert len(lists) >= 8
    for path, node in lists.items():
        assert node.get("x-kubernetes-list-type") in ("atomic", "map", "set"), path
    conditions = [n for p, n in lists.items() if p.endswith("conditions")]
    assert [n["x-kubernetes-list-type"] for n in conditions] == ["map"]


def test_cel_rules_name_the_field_they_refuse_and_a_reason() -> None:
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    located: dict[str, list[str]] = {}
    for path, node in _walk(schema):
        for rule in node.get("x-kubernetes-validations", []):
            assert rule["reason"] == "FieldValueInvalid", (path, rule)
            if "fieldPath" in rule:
                # The API server refuses a fieldPath that is not a field of the node.
                assert rule["fieldPath"][1:] in node["properties"], (path, rule)
                located.setdefault(path.replace("/properties/", "."), []).append(rule["fieldPath"])
    assert ".image" in located[".spec.job"]
    assert ".schedule" in located[".spec.refresh"]
    assert ".maxBatchSize" in located[".spec.table.sweep"]
    # A rule over two fields (source and url) is about the object, not one of them.
    server = dict(_walk(schema))["/properties/spec/properties/server"]
    assert all("fieldPath" not in r for r in server["x-kubernetes-validations"])


def test_cel_rules_carry_messages() -> None:
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rules = [
        rule
        for _, node in _walk(schema)
        for rule in node.get("x-kubernetes-validations", [])
        if isinstance(node.get("x-kubernetes-validations"), list)
    ]
    messages = " ".join(r["message"] for r in rules)
    for needle in ("fracs", "server.url", "cron", "selector must not be empty", "tableConfigMap"):
        assert needle in messages
    assert all(r["rule"] and r["message"] for r in rules)


def test_conditions_are_a_map_list_keyed_by_type() -> None:
    status = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    conditions = status["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert set(conditions["items"]["required"]) >= {
        "type",
        "status",
        "reason",
        "lastTransitionTime",
    }


def test_every_spec_string_list_and_map_is_bounded() -> None:
    """A 32 KiB string (or a list or map of thousands) anywhere in the spec is refused by the
    schema itself, before any rule or the operator sees it."""
    spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    unbounded = []
    for path, node in _walk(spec):
        if "/x-kubernetes-validations" in path:
            continue
        kind = node.get("type")
        if kind == "string" and "maxLength" not in node and "enum" not in node:
            unbounded.append(path)
        # An int-or-string's text (a map's quantities: by the map's CEL rule on their size)
        text = node.get("x-kubernetes-int-or-string") and "maxLength" not in node
        if text and not path.endswith("/additionalProperties"):
            unbounded.append(path)
        if kind == "array" and "maxItems" not in node:
            unbounded.append(path)
        if kind == "object" and "additionalProperties" in node and "maxProperties" not in node:
            unbounded.append(path)
    assert not unbounded


def test_status_text_written_from_jobs_is_bounded() -> None:
    status = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "status"
    ]["properties"]
    assert status["currentRun"]["properties"]["progress"]["maxLength"] == 256
    assert status["lastFailure"]["properties"]["message"]["maxLength"] == 4096
    assert status["tables"]["items"]["properties"]["message"]["maxLength"] == 4096
    assert status["rejectedTable"]["properties"]["message"]["maxLength"] == 4096


def test_the_name_rule_sits_at_the_root_where_cel_may_read_metadata_name() -> None:
    root = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rules = root["x-kubernetes-validations"]
    assert rules == [
        {
            "rule": "size(self.metadata.name) <= 40",
            "message": rules[0]["message"],
            "reason": "FieldValueInvalid",
            "fieldPath": ".metadata",
        }
    ]
    assert "at most 40 characters" in rules[0]["message"]


# ----------------------------------------------------------------------- rollout.maxConcurrent


@functools.cache
def _max_concurrent_rule() -> tuple[dict[str, Any], dict[str, Any]]:
    """(the CRD's schema of rollout.maxConcurrent, the rule that checks it)."""
    spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rollout = spec["properties"]["rollout"]
    (rule,) = [r for r in rollout["x-kubernetes-validations"] if r["message"] == MSG_MAX_CONCURRENT]
    return rollout["properties"]["maxConcurrent"], rule


def test_max_concurrent_is_checked_at_admission_where_it_is() -> None:
    """Before, only the operator refused `maxConcurrent: "0%"` (a condition after the
    fact): the CRD had no rule for it, and no bound on its text."""
    schema, rule = _max_concurrent_rule()
    assert schema["x-kubernetes-int-or-string"] and schema["maxLength"] == 4
    assert (rule["fieldPath"], rule["reason"]) == (".maxConcurrent", "FieldValueInvalid")
    assert "type(self.maxConcurrent) == string ?" in rule["rule"]
    count_test = f"self.maxConcurrent >= 1 && self.maxConcurrent <= {MAX_CONCURRENT_COUNT}"
    assert rule["rule"].endswith(count_test + ")")


def _admitted(value: Any) -> bool:
    try:
        RolloutSpec.model_validate({"maxConcurrent": value})
    except ValidationError as exc:
        assert MSG_MAX_CONCURRENT in str(exc), exc
        return False
    return True


def _share_by_hand(text: str) -> bool:
    """1 to 3 ASCII digits and '%', their number 1 to 100."""
    digits = text[:-1]
    return (
        text.endswith("%")
        and 1 <= len(digits) <= 3
        and all(c in "0123456789" for c in digits)
        and 1 <= int(digits) <= 100
    )


@given(
    st.one_of(
        st.from_regex(r"\A[0-9]{0,4}%\Z"),
        st.text(max_size=6),
        st.sampled_from(["1%", "100%", "007%", "0%", "101%", "²%", "١%", "5%\n", "25"]),
    )
)
def test_the_crd_rule_and_pydantic_refuse_the_same_texts(text: str) -> None:
    """The CEL rule's pattern, as the API server reads it, admits exactly the text that
    pydantic admits, and that is what the field means by hand."""
    schema, rule = _max_concurrent_rule()
    pattern = re.search(r"self\.maxConcurrent\.matches\(r'([^']*)'\)", rule["rule"])
    assert pattern is not None, rule
    by_api = len(text) <= schema["maxLength"] and full_match(pattern.group(1), text)
    assert _admitted(text) == by_api == _share_by_hand(text), text


@pytest.mark.parametrize(
    ("count", "admitted"),
    # A JSON 3.0 passes the schema's type, then the API server refuses it (the CEL rule
    # reads no int-or-string): so does pydantic, which would read it as 3.
    [(1, True), (100_000, True), (0, False), (-3, False), (100_001, False), (3.0, False),
     (True, False)],
)  # fmt: skip
def test_a_count_is_admitted_from_1_to_100000_written_as_an_integer(
    count: int, admitted: bool
) -> None:
    assert _admitted(count) == admitted
