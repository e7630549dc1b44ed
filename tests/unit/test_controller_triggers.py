"""Trigger decisions and the schedule, with an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sps_operator.api.spec import SpsProfileSpec
from sps_operator.api.status import FailureRecord, TableRef
from sps_operator.controller.policies import triggers
from sps_operator.controller.policies.triggers import TargetView, decide_run, schedule_state

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
H100, H200 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"


def spec(**refresh: Any) -> SpsProfileSpec:
    return SpsProfileSpec.model_validate(
        {"selector": {"matchLabels": {"a": "b"}}, "refresh": refresh}
    )


def table(gpu: str, fp: str, refresh_count: int | None = None) -> TableRef:
    return TableRef(
        gpu_product=gpu, fingerprint=fp, kind="Diagonal", config_map=f"t-{gpu}-{fp}",
        hash="h", profiled_at="2026-03-01T10:00:00Z", refresh_count=refresh_count,
    )  # fmt: skip


def decide(
    targets: list[TargetView],
    tables: list[TableRef],
    s: SpsProfileSpec | None = None,
    refresh_count: int = 0,
    failure: FailureRecord | None = None,
    now: datetime = NOW,
) -> triggers.RunRequest | None:
    return decide_run(s or spec(), targets, tables, refresh_count, "RefreshToken", failure, now)


def test_no_table_triggers_a_first_run() -> None:
    req = decide([TargetView("d", H100, "fp1")], [])
    assert req is not None
    assert (req.trigger, req.gpu_product, req.fingerprint, req.attempt) == (
        "NoTable",
        H100,
        "fp1",
        1,
    )


def test_unplaced_targets_wait_and_existing_tables_are_reused() -> None:
    assert decide([TargetView("d", None, "fp1")], []) is None
    assert decide([TargetView("d", H100, "fp1")], [table(H100, "fp1")]) is None


def test_gpu_change_profiles_the_new_product_unless_disabled() -> None:
    h100 = table(H100, "fp1")
    moved = TargetView("d", H200, "fp1", running=h100)
    req = decide([moved], [h100])
    assert req is not None and req.trigger == "GpuChanged" and req.gpu_product == H200
    assert decide([moved], [h100], spec(onGpuChange=False)) is None


def test_server_change_reprofiles_or_only_marks_stale() -> None:
    old = table(H100, "fp1")
    changed = TargetView("d", H100, "fp2", running=old)
    req = decide([changed], [old])
    assert req is not None and req.trigger == "ServerChanged"
    assert decide([changed], [old], spec(onServerChange=False)) is None


def test_a_server_never_served_is_profiled_whatever_the_other_tables() -> None:
    """Another model on the same GPU product is not a 'server change': it never had a
    table, and onServerChange/onGpuChange do not apply to it."""
    others = [table(H100, "fp1"), table(H200, "fp1")]
    quiet = spec(onServerChange=False, onGpuChange=False)
    req = decide([TargetView("other-model", H100, "fp9")], others, quiet)
    assert req is not None and req.trigger == "NoTable" and req.fingerprint == "fp9"


def test_refresh_request_reprofiles_tables_whose_run_started_before_it() -> None:
    d = [TargetView("d", H100, "fp1")]
    req = decide(d, [table(H100, "fp1", refresh_count=1)], refresh_count=2)
    assert req is not None and req.trigger == "RefreshToken"
    assert req.trigger_key == f"{H100}/fp1/refresh#2"
    assert decide(d, [table(H100, "fp1", refresh_count=2)], refresh_count=2) is None
    # Tables from before the counter (none recorded) answer no request but the zeroth.
    assert decide(d, [table(H100, "fp1")], refresh_count=0) is None
    assert decide(d, [table(H100, "fp1")], refresh_count=1) is not None


def test_suspend_starts_nothing() -> None:
    assert decide([TargetView("d", H100, "fp1")], [], spec_suspended()) is None


def spec_suspended() -> SpsProfileSpec:
    return SpsProfileSpec.model_validate({"selector": {"matchLabels": {"a": "b"}}, "suspend": True})


def failure(attempts: int, at: datetime, retryable: bool = True) -> FailureRecord:
    return FailureRecord(
        run="r", reason="ProfilingFailed", message="m", at=at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        attempts=attempts, trigger_key=f"{H100}/fp1/table", retryable=retryable,
    )  # fmt: skip


def test_failures_back_off_then_retry_with_a_new_attempt_and_give_up() -> None:
    targets = [TargetView("d", H100, "fp1")]
    assert decide(targets, [], failure=failure(1, NOW - timedelta(seconds=10))) is None
    req = decide(targets, [], failure=failure(1, NOW - timedelta(seconds=31)))
    assert req is not None and req.attempt == 2
    first = decide(targets, [])
    assert first is not None and req.nonce != first.nonce
    assert decide(targets, [], failure=failure(3, NOW - timedelta(hours=2))) is None
    assert (
        decide(targets, [], failure=failure(1, NOW - timedelta(hours=2), retryable=False)) is None
    )
    assert triggers.backoff_seconds(1) == 30 and triggers.backoff_seconds(20) == 3600


def test_schedule_due_after_the_next_cron_time() -> None:
    state = schedule_state("0 * * * *", "2026-03-01T11:00:00Z", None, NOW)
    assert state.due and state.next_time == NOW + timedelta(hours=1)
    state = schedule_state("0 * * * *", "2026-03-01T12:00:00Z", None, NOW + timedelta(minutes=5))
    assert not state.due and state.next_time == NOW + timedelta(hours=1)
    state = schedule_state("0 3 * * *", None, "2026-03-01T11:30:00Z", NOW)
    assert not state.due and state.next_time == datetime(2026, 3, 2, 3, tzinfo=UTC)
    assert schedule_state(None, None, None, NOW) == triggers.ScheduleState(False, None)


# --- each trigger policy on its own ----------------------------------------------------------


def pair(
    target: TargetView,
    table_ref: TableRef | None = None,
    s: SpsProfileSpec | None = None,
    refresh_count: int = 0,
    refresh_reason: str | None = None,
) -> triggers.TriggerInput:
    assert target.gpu_product is not None
    return triggers.TriggerInput(
        s or spec(),
        target,
        target.gpu_product,
        target.fingerprint,
        table_ref,
        refresh_count,
        refresh_reason,
    )


def test_refresh_requested_fires_for_a_table_measured_before_the_request() -> None:
    measured = table(H100, "fp1", refresh_count=1)
    trigger = triggers.refresh_requested(
        pair(TargetView("d", H100, "fp1"), measured, refresh_count=2, refresh_reason="Schedule")
    )
    assert trigger == triggers.Trigger("Schedule", f"{H100}/fp1/refresh#2")
    fresh = pair(TargetView("d", H100, "fp1"), measured, refresh_count=1)
    assert triggers.refresh_requested(fresh) is None
    assert triggers.refresh_requested(pair(TargetView("d", H100, "fp1"), refresh_count=2)) is None


def test_never_served_fires_only_without_a_table_and_without_one_running() -> None:
    new = pair(TargetView("d", H100, "fp1"))
    assert triggers.never_served(new) == triggers.Trigger("NoTable", f"{H100}/fp1/table")
    h100 = table(H100, "fp0")
    assert triggers.never_served(pair(TargetView("d", H100, "fp1", running=h100))) is None
    assert triggers.never_served(pair(TargetView("d", H100, "fp1"), table(H100, "fp1"))) is None


def test_gpu_changed_fires_for_a_table_of_another_product_unless_disabled() -> None:
    moved = TargetView("d", H200, "fp1", running=table(H100, "fp1"))
    assert triggers.gpu_changed(pair(moved)) == triggers.Trigger("GpuChanged", f"{H200}/fp1/table")
    assert triggers.gpu_changed(pair(moved, s=spec(onGpuChange=False))) is None
    assert triggers.gpu_changed(pair(moved, table(H200, "fp1"))) is None
    stayed = TargetView("d", H100, "fp2", running=table(H100, "fp1"))
    assert triggers.gpu_changed(pair(stayed)) is None


def test_server_changed_fires_for_a_table_of_another_server_unless_disabled() -> None:
    changed = TargetView("d", H100, "fp2", running=table(H100, "fp1"))
    expected = triggers.Trigger("ServerChanged", f"{H100}/fp2/table")
    assert triggers.server_changed(pair(changed)) == expected
    assert triggers.server_changed(pair(changed, s=spec(onServerChange=False))) is None
    assert triggers.server_changed(pair(changed, table(H100, "fp2"))) is None
    moved = TargetView("d", H200, "fp2", running=table(H100, "fp1"))
    assert triggers.server_changed(pair(moved, s=spec(onGpuChange=False))) is None


def test_the_first_policy_that_fires_wins() -> None:
    def fires(reason: str) -> triggers.TriggerPolicy:
        return lambda _pair: triggers.Trigger(reason, reason)

    new = pair(TargetView("d", H100, "fp1"))
    chain = (triggers.refresh_requested, fires("First"), fires("Second"))
    assert triggers.first_trigger(chain, new) == triggers.Trigger("First", "First")
    assert triggers.first_trigger(triggers.TRIGGER_POLICIES[:1], new) is None


def test_placed_pairs_skip_unplaced_targets_and_repeats_in_order() -> None:
    a, b = TargetView("a", H100, "fp1"), TargetView("b", H100, "fp1")
    c, d = TargetView("c", None, "fp1"), TargetView("d", H200, "fp1")
    assert triggers.placed_pairs([c, a, b, d]) == [(a, H100, "fp1"), (d, H200, "fp1")]
