"""The version-1 twins in status.tables (api/legacy_tables.py): what this operator writes
for 0.1.0 (re-keyed tables and tables it measured for a server a version-1 key stands
for alone) and takes out again when it reads."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sps_operator.api.legacy_tables import (
    is_v1,
    v1_key,
    v1_servers,
    with_v1_twins,
    without_v1_twins,
)
from sps_operator.api.models import SpsProfileStatus
from sps_operator.plugin.view import table_for_gpu

V1 = "0e6fbe948838263a"
V2 = "v2-9960f1ca88d1abd5"


def entry(fingerprint: str = V2, **extra: Any) -> dict[str, Any]:
    return {
        "gpuProduct": "NVIDIA-H100-80GB-HBM3",
        "fingerprint": fingerprint,
        "kind": "Diagonal",
        "configMap": "p-table-1",
        "hash": "fbdcec77591bb3ba",
        "profiledAt": "2026-03-01T12:00:00Z",
        "refreshCount": 1,
        **extra,
    }


def test_a_re_keyed_table_is_written_under_its_version_1_key_after_the_others() -> None:
    adopted = entry(adoptedFrom=V1, previousHash="0123456789abcdef", gpuSeconds=3.0)
    measured = entry("v2-00000000000000aa", configMap="p-table-2", hash="aa" * 8)
    written = with_v1_twins([adopted, measured])
    assert written[:2] == [adopted, measured]
    # Only what 0.1.0 knows; the same ConfigMap, hash and refresh count (no refresh due).
    assert written[2] == {**entry(V1)}
    assert without_v1_twins(written) == [adopted, measured]


def test_0_1_0s_rewrite_loses_adopted_from_and_the_twin_gives_it_back() -> None:
    rewritten = [entry(), entry(V1)]  # 0.1.0 drops the fields it does not know
    assert without_v1_twins(rewritten) == [entry(adoptedFrom=V1)]


def test_a_version_1_entry_of_its_own_is_a_table_0_1_0_stored_and_is_kept() -> None:
    stored = [entry(V1), entry(V2, configMap="p-table-2")]
    assert without_v1_twins(stored) == stored
    # Same ConfigMap but another hash (or GPU): not a twin either.
    other = [entry(V2), entry(V1, hash="ff" * 8)]
    assert without_v1_twins(other) == other


def test_the_status_model_and_kubectl_sps_never_see_a_twin() -> None:
    written = with_v1_twins([entry(adoptedFrom=V1)])
    status = SpsProfileStatus.model_validate({"tables": written, "liveTable": "p-table-1"})
    assert [(t.fingerprint, t.adopted_from) for t in status.tables] == [(V2, V1)]
    profile = {"metadata": {"name": "p"}, "status": {"tables": written}}
    assert table_for_gpu(profile, None)["fingerprint"] == V2


OTHER = "v2-00000000000000bb"  # another server by the current fingerprint, same version-1 key


def test_a_measured_table_gets_the_version_1_key_of_a_server_it_alone_has() -> None:
    servers = v1_servers([(V2, V1), (V2, V1), ("", V1), (OTHER, ""), (OTHER, "not-v1")])
    assert servers == {V1: frozenset({V2})}
    assert v1_key(V2, V1, servers) == V1
    assert v1_key(V2, V1, {}) == V1  # no target has it (yet): nothing to confuse
    # Another server with the same version-1 key: 0.1.0 would give it this table.
    assert v1_key(V2, V1, v1_servers([(V2, V1), (OTHER, V1)])) is None
    assert v1_key(V2, "", servers) is None and v1_key(V2, V2, servers) is None


def test_no_twin_for_a_key_another_server_has_now() -> None:
    table = entry(adoptedFrom=V1)
    assert with_v1_twins([table], v1_servers([(V2, V1)]))[1:] == [entry(V1)]
    assert with_v1_twins([table], v1_servers([(V2, V1), (OTHER, V1)])) == [table]
    assert with_v1_twins([table], {}) == with_v1_twins([table]) == [table, entry(V1)]


def test_no_twin_for_a_key_two_tables_claim() -> None:
    """A server that changed in an input version 1 does not read keeps its old table in
    the history: 0.1.0 would take the first twin, the old table. With the targets, the
    old one's twin goes (its key is the new server's now); without, neither is written."""
    old = entry(adoptedFrom=V1)
    new = entry(OTHER, adoptedFrom=V1, configMap="p-table-2", hash="bb" * 8)
    assert with_v1_twins([old, new]) == [old, new]
    written = with_v1_twins([old, new], v1_servers([(OTHER, V1)]))
    assert written[2:] == [entry(V1, configMap="p-table-2", hash="bb" * 8)]
    # Another GPU product is another key to 0.1.0.
    h200 = entry(OTHER, adoptedFrom=V1, gpuProduct="NVIDIA-H200")
    assert len(with_v1_twins([old, h200])) == 4


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
FINGERPRINT = st.sampled_from([V1, V2, "ffffffffffffffff", "v2-aa", ""])
ENTRY = st.fixed_dictionaries(
    {
        "gpuProduct": st.sampled_from(["A", "B"]),
        "fingerprint": FINGERPRINT,
        "configMap": st.sampled_from(["t1", "t2"]),
        "hash": st.sampled_from(["h1", "h2"]),
    },
    optional={"adoptedFrom": FINGERPRINT, "kind": st.just("Diagonal")},
)


@given(st.lists(JSON | ENTRY, max_size=8))
def test_reading_any_stored_list_never_raises_and_never_adds(stored: list[Any]) -> None:
    kept = without_v1_twins(stored)
    assert len(kept) <= len(stored)


CURRENT = st.sampled_from([V2, OTHER, "v2-aa"])
TARGETS = st.lists(st.tuples(CURRENT | st.just(""), FINGERPRINT | st.text(max_size=17)))


@given(
    st.lists(ENTRY.filter(lambda e: not is_v1(e["fingerprint"])), max_size=6),
    st.none() | TARGETS,
)
def test_what_this_operator_writes_it_reads_back_unchanged(
    tables: list[dict[str, Any]], targets: list[tuple[str, str]] | None
) -> None:
    servers = None if targets is None else v1_servers(targets)
    assert without_v1_twins(with_v1_twins(tables, servers)) == tables


@given(st.lists(ENTRY.filter(lambda e: not is_v1(e["fingerprint"])), max_size=6), TARGETS)
def test_a_twin_never_names_a_table_for_another_server(
    tables: list[dict[str, Any]], targets: list[tuple[str, str]]
) -> None:
    """What 0.1.0 would do with the written list: for each (GPU product, version-1 key)
    the first entry; that table was measured for every current target with that key."""
    written = with_v1_twins(tables, v1_servers(targets))
    twins = written[len(tables) :]
    keys = [(t["gpuProduct"], t["fingerprint"]) for t in twins]
    assert len(keys) == len(set(keys))
    for twin in twins:
        (source,) = [
            t for t in tables
            if t.get("adoptedFrom") == twin["fingerprint"]
            and (t["gpuProduct"], t["configMap"], t["hash"])
            == (twin["gpuProduct"], twin["configMap"], twin["hash"])
        ]  # fmt: skip
        assert all(
            current == source["fingerprint"]
            for current, legacy in targets
            if current and legacy == twin["fingerprint"]
        )
