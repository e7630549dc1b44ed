"""One set of bounds for the API and the profiler (api/limits.py): the contract.

Every boundary value goes to both the pydantic model (what the API admits; the CRD carries
the same numbers, checked against the real API server in tests/k8s) and the profiler
CLI's own check, and both must agree.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from sps_operator.api import limits as L
from sps_operator.api.crd import build_crd
from sps_operator.api.spec import DEFAULT_ADDITIVE_FRACS, SweepSpec, TableSpec
from sps_operator.api.validation import MSG_SWEEP_CELLS
from sps_operator.profiler import cli
from sps_operator.profiler import sweep as sw

TWO = [1, 2]


def api_ok(sweep: dict[str, Any]) -> bool:
    kind = "Additive" if "fracs" in sweep else "Diagonal"
    try:
        TableSpec.model_validate({"kind": kind, "sweep": sweep})
    except ValidationError:
        return False
    return True


_FLAGS = {
    "batchSizes": "--batch-size",
    "maxBatchSize": "--max-batch-size",
    "fracs": "--fracs",
    "inputLen": "--input-len",
    "contextLen": "--context-len",
    "repeats": "--repeats",
    "ciRelWidth": "--ci-rel-width",
    "minSteadySteps": "--min-steady-steps",
    "minSteadySeconds": "--min-steady-seconds",
    "vocabSize": "--vocab-size",
    "roundTimeoutSeconds": "--round-timeout",
}


def cli_argv(sweep: dict[str, Any]) -> list[str]:
    """The profiler command line for a sweep, as the operator passes it."""
    argv = ["run", "--base-url", "http://sglang:30000"]
    for key, value in sweep.items():
        values = value if isinstance(value, list) else [value]
        argv += [_FLAGS[key], *(repr(v) for v in values)]
    return argv


def cli_ok(sweep: dict[str, Any]) -> bool:
    args = cli.build_parser().parse_args(cli_argv(sweep))
    try:
        cli.check_limits(args)
    except ValueError:
        return False
    return True


# (spec field, lowest, highest, a step past each end): each bound and its neighbour.
RANGES: list[tuple[str, float, float, float]] = [
    ("repeats", L.REPEATS_MIN, L.REPEATS_MAX, 1),
    ("inputLen", L.INPUT_LEN_MIN, L.INPUT_LEN_MAX, 1),
    ("contextLen", L.CONTEXT_LEN_MIN, L.CONTEXT_LEN_MAX, 1),
    ("ciRelWidth", L.CI_REL_WIDTH_MIN, L.CI_REL_WIDTH_MAX, 0.0001),
    ("vocabSize", L.VOCAB_SIZE_MIN, L.VOCAB_SIZE_MAX, 1),
    ("minSteadySteps", L.MIN_STEADY_STEPS_MIN, L.MIN_STEADY_STEPS_MAX, 1),
    ("minSteadySeconds", L.MIN_STEADY_SECONDS_MIN, L.MIN_STEADY_SECONDS_MAX, 0.5),
    ("roundTimeoutSeconds", L.ROUND_TIMEOUT_SECONDS_MIN, L.ROUND_TIMEOUT_SECONDS_MAX, 0.5),
]


def _boundaries(field: str, low: float, high: float, step: float) -> list[tuple[str, Any, bool]]:
    cast = int if isinstance(step, int) else float
    points = [(low - step, False), (low, True), (high, True), (high + step, False)]
    return [(f"{field}={cast(v)}", cast(v), ok) for v, ok in points]


CASES: list[tuple[str, dict[str, Any], bool]] = [
    *(
        (name, {"batchSizes": TWO, field: value}, ok)
        for field, *bounds in RANGES
        for name, value, ok in _boundaries(field, *bounds)
    ),
    *(
        (name, {"batchSizes": [value, 2]}, ok)
        for name, value, ok in _boundaries("batchSizes[0]", L.BATCH_SIZE_MIN, L.BATCH_SIZE_MAX, 1)
    ),
    ("maxBatchSize=max", {"maxBatchSize": L.MAX_BATCH_SIZE_MAX}, True),
    ("maxBatchSize=max+1", {"maxBatchSize": L.MAX_BATCH_SIZE_MAX + 1}, False),
    ("maxBatchSize=0", {"maxBatchSize": 0}, False),
    ("64 batch sizes", {"batchSizes": list(range(1, L.BATCH_SIZES_MAX_COUNT + 1))}, True),
    ("65 batch sizes", {"batchSizes": list(range(1, L.BATCH_SIZES_MAX_COUNT + 2))}, False),
    ("32 fracs", {"batchSizes": TWO, "fracs": [0.5] * L.FRACS_MAX_COUNT}, True),
    ("33 fracs", {"batchSizes": TWO, "fracs": [0.5] * (L.FRACS_MAX_COUNT + 1)}, False),
    ("frac 1.0", {"batchSizes": TWO, "fracs": [L.FRAC_MAX]}, True),
    ("frac 0", {"batchSizes": TWO, "fracs": [L.FRAC_MIN_EXCLUSIVE]}, False),
    ("frac 1.0001", {"batchSizes": TWO, "fracs": [1.0001]}, False),
    # Sweep cells: batch sizes x fracs x repeats <= MAX_SWEEP_CELLS.
    ("64 x 1 x 4 cells", {"batchSizes": list(range(1, 65)), "repeats": 4}, True),
    ("64 x 1 x 5 cells", {"batchSizes": list(range(1, 65)), "repeats": 5}, False),
    (
        "16 x 4 x 4 cells",
        {"batchSizes": list(range(1, 17)), "fracs": [0.25] * 4, "repeats": 4},
        True,
    ),
    (
        "16 x 4 x 5 cells",
        {"batchSizes": list(range(1, 17)), "fracs": [0.25] * 4, "repeats": 5},
        False,
    ),
    ("tapered 4096 x 3", {"maxBatchSize": 4096, "repeats": 3}, True),  # 79 sizes
    ("tapered 4096 x 4", {"maxBatchSize": 4096, "repeats": 4}, False),
    ("tapered 320 x 2 x 6", {"maxBatchSize": 320, "fracs": [0.5, 1.0], "repeats": 6}, True),
    ("tapered 320 x 2 x 7", {"maxBatchSize": 320, "fracs": [0.5, 1.0], "repeats": 7}, False),
    # The sweep: 18 x 8 x 10 overflowed a 1 MiB ConfigMap.
    ("18 x 8 x 10", {"batchSizes": list(range(1, 19)), "fracs": [0.125] * 8, "repeats": 10}, False),
]


@pytest.mark.parametrize(
    ("sweep", "expected"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES]
)
def test_api_and_profiler_agree_on_every_boundary(sweep: dict[str, Any], expected: bool) -> None:
    assert api_ok(sweep) is expected, "API"
    assert cli_ok(sweep) is expected, "profiler CLI"


def test_the_one_documented_difference_is_the_two_probe_minimum() -> None:
    """A profile must be able to produce a table SGLang uses (>= 2 probes); `sps-profiler run`
    may still measure one cell (debugging, --resume), the fit refuses such a table."""
    for sweep in ({"batchSizes": [8]}, {"batchSizes": [8, 8]}, {"maxBatchSize": 1}):
        assert not api_ok(sweep)
        assert cli_ok(sweep)


def test_the_cli_refuses_with_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["run", "--batch-size", "1", "2", "--repeats", "17"])
    assert info.value.code == 2
    assert "--repeats must be in [1, 16], got 17." in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(
            [
                "run",
                "--batch-size",
                *map(str, range(1, 19)),
                "--fracs",
                *["0.5"] * 8,
                "--repeats",
                "10",
            ]
        )
    assert "1440 cells" in capsys.readouterr().err


def test_tapered_sweep_size_is_the_profilers() -> None:
    for m in range(1, L.MAX_BATCH_SIZE_MAX + 1):
        assert L.tapered_sweep_size(m) == len(sw.build_request_count_sweep(m)), m
    assert list(L.TAPERED_SWEEP_BELOW_256) == [
        v for v in sw.build_request_count_sweep(255) if v < 255
    ]


def test_defaults_are_shared() -> None:
    assert L.DEFAULT_MAX_BATCH_SIZE == sw.DEFAULT_MAX_BATCH_SIZE
    assert len(DEFAULT_ADDITIVE_FRACS) == L.DEFAULT_ADDITIVE_FRAC_COUNT
    assert L.VOCAB_SIZE_MIN == sw.RANDOM_TOKEN_LOW + sw.RANDOM_TOKEN_HIGH_MARGIN + 1
    defaults = SweepSpec()
    assert defaults.ci_rel_width == sw.DEFAULT_CI_REL_WIDTH
    assert defaults.input_len is None  # the profiler sizes prompts to the context
    assert defaults.context_len == sw.DEFAULT_CONTEXT_LEN
    assert defaults.round_timeout_seconds == sw.DEFAULT_ROUND_TIMEOUT_SECONDS


def test_the_crd_carries_the_same_numbers() -> None:
    spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    sweep = spec["properties"]["table"]["properties"]["sweep"]["properties"]
    assert (sweep["repeats"]["minimum"], sweep["repeats"]["maximum"]) == (
        L.REPEATS_MIN,
        L.REPEATS_MAX,
    )
    assert sweep["ciRelWidth"]["maximum"] == L.CI_REL_WIDTH_MAX
    assert sweep["vocabSize"]["minimum"] == L.VOCAB_SIZE_MIN
    assert sweep["batchSizes"]["maxItems"] == L.BATCH_SIZES_MAX_COUNT
    assert sweep["batchSizes"]["items"]["maximum"] == L.BATCH_SIZE_MAX
    assert sweep["fracs"]["maxItems"] == L.FRACS_MAX_COUNT
    assert sweep["roundTimeoutSeconds"]["maximum"] == L.ROUND_TIMEOUT_SECONDS_MAX
    table_rules = spec["properties"]["table"]["x-kubernetes-validations"]
    cells = next(r for r in table_rules if r["message"] == MSG_SWEEP_CELLS)
    assert f"<= {L.MAX_SWEEP_CELLS}" in cells["rule"]
    assert str(list(L.TAPERED_SWEEP_BELOW_256)) in cells["rule"]
