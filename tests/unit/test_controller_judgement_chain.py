"""The judgement of a run's result as a chain of links (`controller/policies/acceptance.py`): each
link refuses the input that should trigger it and passes the one that should not, and the
clock ramp is corrected once per judgement."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from test_controller_acceptance import diagonal_round, spec
from test_tables_clockramp import STEP, probe_and_anchor, ramp, ramp_round_line, ramp_rounds

from sps_operator.api.kinds import TableKind
from sps_operator.api.reasons import (
    CHANGE_GATE_FAILED,
    DOUBTFUL_MEASUREMENT,
    FIT_FAILED,
    INCOMPLETE_SWEEP,
    SELF_CHECK_FAILED,
    SWEEP_MISMATCH,
)
from sps_operator.api.result import validate_rounds
from sps_operator.api.spec import SpsProfileSpec
from sps_operator.controller.policies.acceptance import (
    JUDGEMENT_CHAIN,
    TABLE_CHAIN,
    Judgement,
    Verdict,
    check_plausibility,
    correct_ramp,
    cover_sweep,
    fit_table,
    judge,
    match_sweep,
    pass_gates,
    ramp_models,
    run_chain,
    self_check_table,
)
from sps_operator.tables import clockramp
from sps_operator.tables.formats import SpsCostTable

BATCHES = [1, 2, 4, 8]


def spec_with(**fields: Any) -> SpsProfileSpec:
    table = {"kind": "Diagonal", "sweep": fields.pop("sweep")}
    return SpsProfileSpec.model_validate(
        {"selector": {"matchLabels": {"app": "sglang"}}, "table": table, **fields}
    )


def whole(batches: list[int] = BATCHES) -> list[dict[str, Any]]:
    return validate_rounds([diagonal_round(bs) for bs in batches])


def judgement(rounds: list[dict[str, Any]], **sweep: Any) -> Judgement:
    return Judgement(rounds, spec({"batchSizes": BATCHES, **sweep}), TableKind.DIAGONAL)


def passed(outcome: Verdict | Judgement) -> Judgement:
    assert isinstance(outcome, Judgement), outcome
    return outcome


def refused(outcome: Verdict | Judgement, reason: str) -> Verdict:
    assert isinstance(outcome, Verdict) and outcome.reason == reason, outcome
    return outcome


def on_ramp(batches: list[int]) -> list[dict[str, Any]]:
    """An honest run on a +50 % clock ramp: raw medians fall with the batch size."""
    probe, anchor, now = probe_and_anchor(3.0, noise=0.01, amplitude=0.5, tau=5.0)
    rounds = []
    for bs in batches[1:]:
        slow = sum(ramp(now + 2.6 * k / 99, 0.5, 5.0) for k in range(100)) / 100
        seconds = STEP * (1 + 0.002 * bs) * slow
        rounds.append(ramp_round_line(bs, seconds, (now, now + 2.6), clock_on_ramp=True))
        now += 2.7
    record = {"probe": [list(c) for c in probe], "anchor": [list(c) for c in anchor]}
    rounds.append(ramp_round_line(batches[0], STEP * 1.002, (40.0, 42.6), clock_ramp=record))
    return validate_rounds(rounds)


def ramped(rounds: list[dict[str, Any]], batches: list[int]) -> Judgement:
    return passed(ramp_models(Judgement(rounds, spec({"batchSizes": batches}), TableKind.DIAGONAL)))


def test_match_sweep_refuses_a_batch_size_not_asked_for() -> None:
    extra = whole([*BATCHES, 3])
    verdict = refused(match_sweep(judgement(extra)), SWEEP_MISMATCH)
    assert "batch size 3 is not in spec.table.sweep's batchSizes" in verdict.message
    honest = judgement(whole())
    assert match_sweep(honest) is honest


def test_ramp_models_refuses_a_ramp_record_that_is_no_object() -> None:
    rounds = ramp_rounds()
    rounds[3]["clock_ramp"] = ["not", "an", "object"]
    verdict = refused(ramp_models(judgement(rounds)), FIT_FAILED)
    assert "clock_ramp" in verdict.message
    models = passed(ramp_models(judgement(ramp_rounds())))
    assert list(models.ramps) == [None] and models.stranded == frozenset()


def test_ramp_models_finds_the_rounds_stranded_on_a_ramp() -> None:
    rounds = ramp_rounds()
    cut = [dict(r, clock_run="cut", clock_on_ramp=True) for r in rounds[:2]]
    models = passed(ramp_models(judgement([*cut, *rounds])))
    assert models.stranded == frozenset({0, 1})


def test_cover_sweep_refuses_a_missing_cell_and_skips_stranded_rounds() -> None:
    verdict = refused(cover_sweep(judgement(whole()[:-1])), INCOMPLETE_SWEEP)
    assert "missing: repeat 0 bs 8" in verdict.message
    complete = judgement(whole())
    assert cover_sweep(complete) is complete
    # bs 8 twice, once stranded: the stranded copy is no duplicate.
    twice = dataclasses.replace(judgement([*whole(), *whole()[-1:]]), stranded=frozenset({4}))
    assert cover_sweep(twice) is twice
    refused(cover_sweep(dataclasses.replace(twice, stranded=frozenset())), SWEEP_MISMATCH)


def test_correct_ramp_corrects_once_and_refuses_a_window_inside_the_warm_up() -> None:
    batches = [1, 2, 4, 8, 16]
    corrected = passed(correct_ramp(ramped(on_ramp(batches), batches)))
    assert corrected.clock_ramp is not None and corrected.clock_ramp.fits
    assert all("clock_factor" in r for r in corrected.usable[:-1])
    assert all("clock_factor" not in r for r in corrected.rounds)  # the input is kept
    crafted = on_ramp(batches)
    crafted[0]["clock_s"] = [0.0, 0.5]
    verdict = refused(correct_ramp(ramped(crafted, batches)), FIT_FAILED)
    assert "before its run's warm-up ended" in verdict.message


def test_check_plausibility_judges_the_rounds_as_corrected() -> None:
    batches = [1, 2, 4, 8, 16]
    rounds = on_ramp(batches)
    raw = dataclasses.replace(ramped(rounds, batches), usable=rounds)
    refused(check_plausibility(raw), DOUBTFUL_MEASUREMENT)
    corrected = passed(correct_ramp(ramped(rounds, batches)))
    assert check_plausibility(corrected) is corrected


def test_fit_table_fits_the_corrected_rounds_and_records_their_ramp() -> None:
    batches = [1, 2, 4, 8, 16]
    corrected = passed(correct_ramp(ramped(on_ramp(batches), batches)))
    fitted = passed(fit_table(corrected)).fitted()
    assert corrected.clock_ramp is not None
    assert fitted.clock_ramp == corrected.clock_ramp.to_dict()
    # Fitted from the corrected medians: nearly flat, as the truth (+3 % from bs 1 to 16).
    sps = fitted.table.to_dict()["sample_steps_per_sec"]
    assert max(sps) <= min(sps) * 1.06, sps
    one_probe = dataclasses.replace(corrected, usable=whole([4]))
    verdict = refused(fit_table(one_probe), FIT_FAILED)
    assert "single probe" in verdict.message


def test_self_check_table_refuses_a_table_of_seconds_written_as_milliseconds() -> None:
    fitted = passed(fit_table(dataclasses.replace(judgement([]), usable=whole())))
    checked = passed(self_check_table(fitted))
    assert checked.table_json == fitted.fitted().table.to_json()
    fast = SpsCostTable([8, 16], [95_000.0, 90_000.0], 16)
    bad = dataclasses.replace(fitted, fit=dataclasses.replace(fitted.fitted(), table=fast))
    verdict = refused(self_check_table(bad), SELF_CHECK_FAILED)
    assert verdict.fit is not None and verdict.table_json is None


def test_pass_gates_refuses_a_table_far_from_the_live_one() -> None:
    fitted = passed(fit_table(dataclasses.replace(judgement([]), usable=whole())))
    checked = passed(self_check_table(fitted))
    table = checked.fitted().table
    assert isinstance(table, SpsCostTable)
    gates = {"maxChange": 0.05}
    gated = dataclasses.replace(checked, spec=spec_with(gates=gates, sweep={"batchSizes": BATCHES}))
    same = dataclasses.replace(gated, live=table)
    assert pass_gates(same) is same
    slower = SpsCostTable(
        table.sample_batch_tokens,
        [sps / 2 for sps in table.sample_steps_per_sec],
        table.max_batch_tokens,
    )
    verdict = refused(pass_gates(dataclasses.replace(gated, live=slower)), CHANGE_GATE_FAILED)
    assert verdict.table_json == checked.table_json  # a refused table is kept for inspection


def test_the_first_refusal_wins_and_a_judgement_through_every_link_is_accepted() -> None:
    def refuse(reason: str) -> Any:
        return lambda _judgement: Verdict(reason, reason)

    chain = (match_sweep, refuse("First"), refuse("Second"))
    assert run_chain(chain, judgement(whole())).reason == "First"
    assert run_chain(chain, judgement(whole([*BATCHES, 3]))).reason == SWEEP_MISMATCH
    accepted = run_chain(JUDGEMENT_CHAIN, judgement(whole()))
    assert accepted.accepted and accepted.table_json is not None
    assert JUDGEMENT_CHAIN[: len(TABLE_CHAIN)] == TABLE_CHAIN


def test_a_judgement_models_and_corrects_the_clock_ramp_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The fit used to correct the rounds again (and fit the ramp models again) after the
    # plausibility check had: twice the work, and two places that had to agree.
    calls = {"fit_ramp": 0, "correct_rounds": 0}

    def counted(name: str) -> Any:
        original = getattr(clockramp, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return original(*args, **kwargs)

        return wrapper

    for name in calls:
        monkeypatch.setattr(clockramp, name, counted(name))
    batches = [1, 2, 4, 8, 16]
    verdict = judge(on_ramp(batches), spec({"batchSizes": batches}), kind=TableKind.DIAGONAL)
    assert verdict.accepted, verdict.message
    assert verdict.fit is not None and verdict.fit.clock_ramp is not None
    assert calls == {"fit_ramp": 1, "correct_rounds": 1}
