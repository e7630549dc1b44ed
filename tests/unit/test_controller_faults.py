"""The test-only fault hook (`--pause-before-write`): it stops a real pass exactly at the
named write, and nothing is written after it."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from controller_harness import Harness
from test_controller_capacity import BORROW, harness, start_waiting

from sps_operator.api import labels as L
from sps_operator.controller.main import parse_args
from sps_operator.controller.process.faults import (
    MARKER,
    parse_point,
    pause_before_write,
    write_kind,
)


class Paused(BaseException):
    """Raised by the test's `block`: a BaseException, so no handler of the pass eats it
    (the real block never returns)."""


def block() -> None:
    raise Paused


@pytest.mark.parametrize(
    ("method", "args", "kind"),
    [
        ("patch_metadata", ("Deployment", "ns", "d", {"metadata": {"annotations": {
            L.ANNOTATION_BORROWED: "{}"}, "resourceVersion": "1"}}), "borrow-record"),
        ("patch_metadata", ("Deployment", "ns", "d", {"metadata": {"annotations": {
            L.ANNOTATION_BORROWED: None}}}), "borrow-return"),
        ("patch_metadata", ("Deployment", "ns", "d", {"metadata": {"annotations": {
            L.ANNOTATION_OWNER: "p"}}}), "claim"),
        ("patch_metadata", ("Deployment", "ns", "d", {"metadata": {"annotations": {
            L.ANNOTATION_OWNER: None}}}), "unclaim"),
        ("patch_metadata", ("ConfigMap", "ns", "t", {"metadata": {"labels": {}}}),
         "patch-configmap"),
        ("apply", ({"kind": "Deployment", "metadata": {}},), "apply-deployment"),
        ("create", ({"kind": "Job", "metadata": {}},), "create-job"),
        ("delete", ("RoleBinding", "ns", "r"), "delete-rolebinding"),
        ("patch_lender", ("ns", "d", {"metadata": {"annotations": {
            L.ANNOTATION_BORROWED: "{}"}}, "spec": {"replicas": 1}}), "borrow-record"),
        ("patch_lender", ("ns", "d", {"metadata": {"annotations": {
            L.ANNOTATION_BORROWED: None}}, "spec": {"replicas": 2}}), "borrow-return"),
        ("create", ({"kind": "Lease", "metadata": {}},), "create-lease"),
        ("patch_status", ("ns", "p", {}), "status"),
    ],
)  # fmt: skip
def test_each_write_has_a_kind_a_point_can_name(
    method: str, args: tuple[Any, ...], kind: str
) -> None:
    assert write_kind(method, args) == kind
    assert parse_point(kind) == (kind, None)


def test_an_unknown_point_is_refused_with_the_known_ones() -> None:
    assert parse_point("status@borrow-record") == ("status", "borrow-record")
    with pytest.raises(ValueError, match=r"unknown write 'scal'.*borrow-record"):
        parse_point("status@scal")
    with pytest.raises(SystemExit):
        parse_args(["--pause-before-write=borrow"], testing=True)
    assert parse_args(["--pause-before-write=claim"], testing=True).pause_before_write == "claim"
    assert parse_args([]).pause_before_write is None


def borrowing() -> Harness:
    """A run waiting for GPUs whose next pass borrows a replica of two."""
    h = harness(**BORROW)
    start_waiting(h)
    h.tick(30)
    return h


def test_a_pass_stops_before_the_borrow_which_writes_record_and_scale_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = borrowing()
    pause = pause_before_write(h.kube, "borrow-record", block)
    with caplog.at_level(logging.WARNING), pytest.raises(Paused):
        h.run_pass()
    assert pause.paused
    dep = h.kube.obj("Deployment", "server")
    # One write carries both: stopped before it, neither the record nor the scale is there.
    assert L.ANNOTATION_BORROWED not in (dep["metadata"].get("annotations") or {})
    assert dep["spec"]["replicas"] == 2 and not h.kube.scales
    assert "borrow" not in h.status()["currentRun"]
    (line,) = [r.getMessage() for r in caplog.records if MARKER in r.getMessage()]
    assert "borrow-record" in line and "patch_lender serving server" in line
    # From now on every write blocks; reads go on.
    assert h.kube.get("Deployment", "serving", "server") is not None
    with pytest.raises(Paused):
        h.kube.patch_status("serving", "p", {})
    with pytest.raises(Paused):
        h.kube.event({}, "Normal", "R", "m", h.now)


def test_a_point_after_a_write_that_never_comes_never_pauses() -> None:
    h = borrowing()
    pause = pause_before_write(h.kube, "status@apply-deployment", block)
    status = h.run_pass()  # borrows: pool Lease, record and scale, status; no apply
    assert not pause.paused
    assert status["currentRun"]["borrow"]["replicas"] == 2
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 1


def test_the_status_write_after_the_borrow_is_a_point() -> None:
    h = borrowing()
    pause_before_write(h.kube, "status@borrow-record", block)
    with pytest.raises(Paused):
        h.run_pass()
    dep = h.kube.obj("Deployment", "server")
    assert dep["spec"]["replicas"] == 1 and L.ANNOTATION_BORROWED in dep["metadata"]["annotations"]
    assert "borrow" not in h.status()["currentRun"]  # the status of the borrow never went


def test_a_pass_stops_after_the_rollouts_apply_before_its_status() -> None:
    h = Harness.with_finished_job()
    pause_before_write(h.kube, "status@apply-deployment", block)
    h.tick()
    with pytest.raises(Paused):
        h.run_pass()
    assert h.running_hash() is not None  # the template was rolled ...
    assert not h.status().get("tables")  # ... and status never heard of the table


@pytest.mark.parametrize("flag", ["--pause-before-write=claim", "--clock-offset-file=/tmp/x"])
def test_the_production_command_refuses_the_test_hooks(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `sps-operator run` does not know them: only the test entry point does.
    with pytest.raises(SystemExit):
        parse_args([flag])
    assert "unrecognized arguments" in capsys.readouterr().err
    from sps_operator.controller.testing_main import main as testing_main

    with pytest.raises(SystemExit) as exit_:
        testing_main(["run", flag, "--help"])
    assert exit_.value.code == 0
    assert flag.split("=")[0] in capsys.readouterr().out
