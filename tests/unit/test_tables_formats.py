"""Test vectors pinning every loader rule of contract section 10 for both table formats."""

from __future__ import annotations

import json

import msgspec
import pytest

from sps_operator.tables.formats import (
    SpsAdditiveCostTable,
    SpsCostTable,
    SpsTableError,
    build_uninitialized_sps_table,
    is_uninitialized_sps_table,
    load_sps_table_text,
    profile_sps_table,
)

DIAG = (
    '{"sample_batch_tokens":[8,16,32,64],"sample_steps_per_sec":[1000.0,950.0,500.0,480.0],'
    '"max_batch_tokens":128}'
)
ADD = (
    '{"bias_seconds":0.0123,"bs_probes":[1,8,16,32],"alpha_seconds":[0.0,0.0011,0.0023,0.0051],'
    '"m_probes":[0,64,128,256],"theta_seconds":[0.0,0.0009,0.0031,0.0087]}'
)

# (name, text, expected error substring or None when the loader accepts it)
VECTORS: list[tuple[str, str, str | None]] = [
    ("diag ok", DIAG, None),
    ("additive ok", ADD, None),
    (
        "int field rejects float",
        '{"sample_batch_tokens":[8.0,16],"sample_steps_per_sec":[1,2],"max_batch_tokens":16}',
        "Expected `int`, got `float` - at `$.sample_batch_tokens[0]`",
    ),
    (
        "int scalar rejects float exponent",
        '{"sample_batch_tokens":[8],"sample_steps_per_sec":[1],"max_batch_tokens":1E1}',
        "Expected `int`, got `float` - at `$.max_batch_tokens`",
    ),
    (
        "int field rejects bool",
        '{"sample_batch_tokens":[true,16],"sample_steps_per_sec":[1,2],"max_batch_tokens":16}',
        "Expected `int`, got `bool` - at `$.sample_batch_tokens[0]`",
    ),
    (
        "float field accepts ints",
        '{"sample_batch_tokens":[8,16],"sample_steps_per_sec":[1,2],"max_batch_tokens":16}',
        None,
    ),
    (
        "float field rejects string",
        '{"sample_batch_tokens":[8,16],"sample_steps_per_sec":[1,"2"],"max_batch_tokens":16}',
        "Expected `float`, got `str` - at `$.sample_steps_per_sec[1]`",
    ),
    (
        "list field rejects null",
        '{"sample_batch_tokens":[8,16],"sample_steps_per_sec":null,"max_batch_tokens":16}',
        "Expected `array`, got `null` - at `$.sample_steps_per_sec`",
    ),
    (
        "unknown keys ignored",
        '{"sample_batch_tokens":[8,16],"sample_steps_per_sec":[1,2],"max_batch_tokens":16,"gpu":"H100"}',
        None,
    ),
    (
        "missing key raises",
        '{"sample_batch_tokens":[8,16],"sample_steps_per_sec":[1,2]}',
        "Object missing required field `max_batch_tokens`",
    ),
    ("top level must be object", "[1]", "Expected `object`, got `array`"),
    ("garbage", "garbage", "JSON is malformed"),
    ("empty", "", "Input data was truncated"),
    (
        "NaN is malformed",
        '{"sample_batch_tokens":[8,16],"sample_steps_per_sec":[1,NaN],"max_batch_tokens":16}',
        "JSON is malformed",
    ),
    (
        "trailing characters",
        '{"sample_batch_tokens":[8],"sample_steps_per_sec":[1],"max_batch_tokens":8} x',
        "JSON is malformed",
    ),
    (
        "float overflow",
        '{"sample_batch_tokens":[8,16],"sample_steps_per_sec":[1,1e400],"max_batch_tokens":16}',
        "Number out of range - at `$.sample_steps_per_sec[1]`",
    ),
    (
        "an integer too large for a double",
        '{"sample_batch_tokens":[8,16],"sample_steps_per_sec":[1,1'
        + "0" * 400
        + '],"max_batch_tokens":16}',
        "Number out of range - at `$.sample_steps_per_sec[1]`",
    ),
    (
        "an integer past the int-string limit",
        '{"sample_batch_tokens":[8,'
        + "1" * 5000
        + '],"sample_steps_per_sec":[1,2],"max_batch_tokens":16}',
        "JSON is malformed: a number has more than 4300 digits",
    ),
    ("nested too deeply", "[" * 100_000 + "]" * 100_000, "JSON is malformed: nested too deeply"),
    (
        "not strictly increasing",
        '{"sample_batch_tokens":[16,8],"sample_steps_per_sec":[1,2],"max_batch_tokens":16}',
        "sample_batch_tokens must be strictly increasing (monotone-sorted invariant), got [16, 8].",
    ),
    (
        "duplicate probe",
        '{"sample_batch_tokens":[8,8],"sample_steps_per_sec":[1,2],"max_batch_tokens":16}',
        "sample_batch_tokens must be strictly increasing",
    ),
    (
        "empty probes",
        '{"sample_batch_tokens":[],"sample_steps_per_sec":[],"max_batch_tokens":16}',
        "SpsCostTable requires at least one probe.",
    ),
    (
        "length mismatch",
        '{"sample_batch_tokens":[8,16],"sample_steps_per_sec":[1],"max_batch_tokens":16}',
        "sample_batch_tokens and sample_steps_per_sec must have equal length, got 2 vs 1.",
    ),
    (
        "max below last probe",
        '{"sample_batch_tokens":[8,16],"sample_steps_per_sec":[1,2],"max_batch_tokens":8}',
        "max_batch_tokens must be >= the largest probe, got 8 < 16.",
    ),
    (
        "duplicate key: last wins",
        '{"sample_batch_tokens":[8,16],"sample_steps_per_sec":[1,2],"max_batch_tokens":16,"max_batch_tokens":4}',
        "max_batch_tokens must be >= the largest probe, got 4 < 16.",
    ),
    (
        "no positivity check on sps",
        '{"sample_batch_tokens":[8],"sample_steps_per_sec":[-1.5],"max_batch_tokens":8}',
        None,
    ),
    (
        "bias must be positive",
        '{"bias_seconds":0,"bs_probes":[1],"alpha_seconds":[0],"m_probes":[1],"theta_seconds":[0]}',
        "bias_seconds must be > 0, got 0.0.",
    ),
    (
        "bias int accepted",
        '{"bias_seconds":1,"bs_probes":[1],"alpha_seconds":[0],"m_probes":[1],"theta_seconds":[0]}',
        None,
    ),
    (
        "alpha/theta may be negative",
        '{"bias_seconds":0.01,"bs_probes":[1,2],"alpha_seconds":[0,-0.001],"m_probes":[0],"theta_seconds":[-1]}',
        None,
    ),
    (
        "bs probes strictly increasing",
        '{"bias_seconds":0.1,"bs_probes":[1,1],"alpha_seconds":[0,0],"m_probes":[1],"theta_seconds":[0]}',
        "bs_probes must be strictly increasing, got [1, 1].",
    ),
    (
        "m probes strictly increasing",
        '{"bias_seconds":0.1,"bs_probes":[1],"alpha_seconds":[0],"m_probes":[64,0],"theta_seconds":[0,0]}',
        "m_probes must be strictly increasing, got [64, 0].",
    ),
    (
        "empty bs probes",
        '{"bias_seconds":0.1,"bs_probes":[],"alpha_seconds":[],"m_probes":[1],"theta_seconds":[0]}',
        "SpsAdditiveCostTable requires bs_probes.",
    ),
    (
        "alpha length",
        '{"bias_seconds":0.1,"bs_probes":[1],"alpha_seconds":[0,1],"m_probes":[1],"theta_seconds":[0]}',
        "bs_probes and its values must have equal length, got 1 vs 2.",
    ),
    (
        "m probes int",
        '{"bias_seconds":0.1,"bs_probes":[1],"alpha_seconds":[0],"m_probes":[1.5],"theta_seconds":[0]}',
        "Expected `int`, got `float` - at `$.m_probes[0]`",
    ),
    (
        "dispatch on substring: diagonal text mentioning bias_seconds decodes as additive",
        '{"sample_batch_tokens":[8],"sample_steps_per_sec":[1],"max_batch_tokens":8,"note":"bias_seconds"}',
        "Object missing required field `bias_seconds`",
    ),
    (
        "dispatch needs the quoted key: bias_seconds without quotes stays diagonal",
        '{"sample_batch_tokens":[8],"sample_steps_per_sec":[1],"max_batch_tokens":8,'
        '"n":"x bias_seconds"}',
        None,
    ),
    (
        "additive text with an extra diagonal key stays additive",
        '{"bias_seconds":0.1,"bs_probes":[1],"alpha_seconds":[0],"m_probes":[1],"theta_seconds":[0],'
        '"max_batch_tokens":3}',
        None,
    ),
]


@pytest.mark.parametrize(("name", "text", "error"), VECTORS, ids=[v[0] for v in VECTORS])
def test_loader_vectors(name: str, text: str, error: str | None) -> None:
    if error is None:
        table = load_sps_table_text(text)
        # What we load, we re-emit in a form that loads to the same table.
        assert load_sps_table_text(table.to_json()) == table
    else:
        with pytest.raises(ValueError) as excinfo:
            load_sps_table_text(text)
        assert isinstance(excinfo.value, SpsTableError)
        assert error in str(excinfo.value)


class _MsgDiag(msgspec.Struct):
    sample_batch_tokens: list[int]
    sample_steps_per_sec: list[float]
    max_batch_tokens: int

    def __post_init__(self) -> None:
        SpsCostTable(self.sample_batch_tokens, self.sample_steps_per_sec, self.max_batch_tokens)


class _MsgAdd(msgspec.Struct):
    bias_seconds: float
    bs_probes: list[int]
    alpha_seconds: list[float]
    m_probes: list[int]
    theta_seconds: list[float]

    def __post_init__(self) -> None:
        SpsAdditiveCostTable(
            self.bias_seconds, self.bs_probes, self.alpha_seconds, self.m_probes, self.theta_seconds
        )


@pytest.mark.parametrize(("name", "text", "error"), VECTORS, ids=[v[0] for v in VECTORS])
def test_vectors_agree_with_msgspec_typed_decode(name: str, text: str, error: str | None) -> None:
    """msgspec decoding into structs of the same field types accepts exactly what we accept."""
    cls: type[msgspec.Struct] = _MsgAdd if '"bias_seconds"' in text else _MsgDiag
    try:
        msgspec.json.decode(text.encode(), type=cls)
        accepted = True
        message = ""
    except (msgspec.DecodeError, ValueError) as exc:
        accepted = False
        message = str(exc)
    assert accepted == (error is None), message
    if error is not None and "JSON is malformed" not in error:
        assert error in message


@pytest.mark.parametrize(("name", "text", "error"), VECTORS, ids=[v[0] for v in VECTORS])
def test_diagonal_only_loader_agrees_with_msgspec(name: str, text: str, error: str | None) -> None:
    """The fork's loader decodes every text as SpsCostTable: an additive one included."""
    try:
        msgspec.json.decode(text.encode(), type=_MsgDiag)
        expected: str | None = None
    except (msgspec.DecodeError, ValueError) as exc:
        expected = str(exc)
    try:
        table = load_sps_table_text(text, diagonal_only=True)
    except SpsTableError as exc:
        assert expected is not None, f"msgspec accepts it: {exc}"
        if "JSON is malformed" not in str(exc):
            assert str(exc) == expected
    else:
        assert expected is None, expected
        assert isinstance(table, SpsCostTable)


def test_to_json_is_compact_with_ints_as_ints() -> None:
    table = SpsCostTable([8, 16], [1000, 2], 16)
    assert table.to_json() == (
        '{"sample_batch_tokens":[8,16],"sample_steps_per_sec":[1000.0,2.0],"max_batch_tokens":16}'
    )
    additive = SpsAdditiveCostTable(0.0123, [1, 8], [0, 0.0011], [0, 64], [0.0, 0.25])
    assert additive.to_json() == (
        '{"bias_seconds":0.0123,"bs_probes":[1,8],"alpha_seconds":[0.0,0.0011],'
        '"m_probes":[0,64],"theta_seconds":[0.0,0.25]}'
    )
    # Decodes under msgspec's strict int rule.
    decoded = msgspec.json.decode(additive.to_json().encode(), type=_MsgAdd)
    assert decoded.m_probes == [0, 64]


def test_to_json_refuses_non_finite() -> None:
    with pytest.raises(SpsTableError, match="finite"):
        SpsCostTable([8], [float("inf")], 8).to_json()
    with pytest.raises(SpsTableError, match="finite"):
        SpsAdditiveCostTable(0.01, [1], [float("nan")], [1], [0.0]).to_json()


def test_diagonal_lookup_is_floor_step_clamped() -> None:
    table = load_sps_table_text(DIAG)
    assert isinstance(table, SpsCostTable)
    assert table.lookup(7) == 1000.0  # below the first probe: first value
    assert table.lookup(8) == 1000.0
    assert table.lookup(15) == 1000.0  # floor, no interpolation
    assert table.lookup(16) == 950.0
    assert table.lookup(63.9) == 500.0
    assert table.lookup(64) == 480.0
    assert table.lookup(10_000) == 480.0  # above the last: last value
    assert table.step_seconds(16) == pytest.approx(1 / 950.0)


def test_additive_step_time_interpolates_and_clamps() -> None:
    table = SpsAdditiveCostTable(0.01, [1, 100], [0.0, 0.05], [1, 200], [0.0, 0.02])
    assert table.step_time(num_reqs=1, budget=0) == pytest.approx(0.01)
    # bs 50.5 is halfway on alpha; M = 50.5 + 49.5 = 100 → theta at (100-1)/199.
    assert table.step_time(num_reqs=50, budget=50) == pytest.approx(
        0.01 + 0.05 * 49 / 99 + 0.02 * 99 / 199
    )
    assert table.step_time(num_reqs=1000, budget=5000) == pytest.approx(0.01 + 0.05 + 0.02)
    assert table.step_time(num_reqs=0, budget=0) == pytest.approx(0.01)
    assert table.step_seconds_at(100, 200) == pytest.approx(0.08)


def test_constructor_invariants_match_loader_messages() -> None:
    with pytest.raises(SpsTableError, match="requires at least one probe"):
        SpsCostTable([], [], 0)
    with pytest.raises(SpsTableError, match=r"got 8 < 16\."):
        SpsCostTable([8, 16], [1.0, 2.0], 8)
    with pytest.raises(SpsTableError, match=r"bias_seconds must be > 0, got -1\.0\."):
        SpsAdditiveCostTable(-1, [1], [0], [1], [0])
    with pytest.raises(SpsTableError, match=r"SpsAdditiveCostTable requires m_probes\."):
        SpsAdditiveCostTable(1, [1], [0], [], [])


def test_uninitialized_tables() -> None:
    flat = build_uninitialized_sps_table(max_batch_tokens=384)
    assert flat.to_json() == (
        '{"sample_batch_tokens":[1],"sample_steps_per_sec":[1.0],"max_batch_tokens":384}'
    )
    assert is_uninitialized_sps_table(flat)
    assert is_uninitialized_sps_table(SpsCostTable([64], [5.0], 64))
    assert not is_uninitialized_sps_table(SpsCostTable([1, 2], [1.0, 1.0], 2))
    assert not is_uninitialized_sps_table(SpsAdditiveCostTable(0.1, [1], [0.0], [1], [0.0]))


def test_profile_sps_table_sorts_and_defaults_max() -> None:
    table = profile_sps_table([(32, 500.0), (8, 1000.0), (16, 950.0)])
    assert table.sample_batch_tokens == (8, 16, 32)
    assert table.sample_steps_per_sec == (1000.0, 950.0, 500.0)
    assert table.max_batch_tokens == 32
    assert profile_sps_table([(8, 1.0)], max_batch_tokens=100).max_batch_tokens == 100
    with pytest.raises(SpsTableError, match="unique batch_tokens"):
        profile_sps_table([(8, 1.0), (8, 2.0)])
    with pytest.raises(SpsTableError, match="batch_tokens >= 1, got 0"):
        profile_sps_table([(0, 1.0)])
    with pytest.raises(SpsTableError, match="at least one probe"):
        profile_sps_table([])


def test_round_trip_preserves_float_values_exactly() -> None:
    values = [0.1 + 0.2, 1e-7, 123456.789, 3.0]
    table = SpsCostTable([1, 2, 3, 4], values, 4)
    assert json.loads(table.to_json())["sample_steps_per_sec"] == values
    assert load_sps_table_text(table.to_json()) == table
