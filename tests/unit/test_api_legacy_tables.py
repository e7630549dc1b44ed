"""The version-1 twins of re-keyed tables in status.tables (api/legacy_tables.py): what
this operator writes for 0.1.0 and takes out again when it reads."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sps_operator.api.legacy_tables import is_v1, with_v1_twins, without_v1_twins
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


@given(st.lists(ENTRY.filter(lambda e: not is_v1(e["fingerprint"])), max_size=6))
def test_what_this_operator_writes_it_reads_back_unchanged(tables: list[dict[str, Any]]) -> None:
    assert without_v1_twins(with_v1_twins(tables)) == tables
