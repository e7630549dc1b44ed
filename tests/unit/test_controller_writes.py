"""Every write to a Deployment is conditional on what was read (issue 18, item 11).

The operator's Inject apply repeats the container's args as it read them (SSA's `args` is
an atomic list it must co-own) and forces field ownership. Without a precondition, a pass
that read the Deployment before someone's edit would write the old args back: the edit
silently reverted. The apply body and every metadata patch carry the resourceVersion they
were decided on; a 409 is retried from the new version, never forced over it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from controller_harness import NS, Harness, rounds
from kubernetes.client.rest import ApiException

from sps_operator.api import labels as L
from sps_operator.api.result import build_patch
from sps_operator.controller.finalizer import release

USER_FLAG = ["--max-running-requests", "64"]


def server_args(h: Harness) -> list[str]:
    return list(h.template()["spec"]["containers"][0]["args"])


def add_user_flag(dep: dict[str, Any]) -> None:
    """`kubectl edit`: the user adds a flag to the server's args."""
    dep["spec"]["template"]["spec"]["containers"][0]["args"] += USER_FLAG


def before_next(h: Harness, method: str, change: Callable[[], None]) -> None:
    """Run `change` (someone else's write) once, right before the next call of `method`:
    between the pass's read and its write."""
    original = getattr(h.kube, method)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        setattr(h.kube, method, original)
        change()
        return original(*args, **kwargs)

    setattr(h.kube, method, wrapped)


def live_with_new_table() -> Harness:
    """A live table, then a reprofile whose (different) table is ready to roll."""
    h = Harness.one_target(refresh={"token": "a"})
    h.profile_once()
    assert h.status()["targets"][0]["state"] == "Live"
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    h.tick()
    assert h.run_pass()["currentRun"]
    h.finish(result=build_patch(status="succeeded", rounds=rounds(scale=1.3)))
    return h


def test_an_edit_between_the_read_and_the_apply_is_never_reverted() -> None:
    h = live_with_new_table()
    before_next(h, "apply", lambda: h.kube.edit("Deployment", "server", add_user_flag))
    h.tick()
    status = h.run_pass()
    # The apply carried the args as read: refused, not forced over the user's edit.
    assert server_args(h)[-2:] == USER_FLAG
    assert "changed since this pass read it" in status["targets"][0]["message"]
    assert status.get("lastFailure") is None
    # The next pass starts from the edit: a new cost flag is another server (a new run,
    # no table rolled meanwhile), and the edit is still there.
    status = h.settle()
    assert server_args(h)[-2:] == USER_FLAG
    assert status["targets"][0]["state"] != "Live" and status["currentRun"]


def test_an_edit_of_an_unrelated_field_is_kept_and_the_table_rolls_next_pass() -> None:
    h = live_with_new_table()

    def add_env(dep: dict[str, Any]) -> None:
        container = dep["spec"]["template"]["spec"]["containers"][0]
        container["env"] = [{"name": "HF_HOME", "value": "/cache"}]

    before_next(h, "apply", lambda: h.kube.edit("Deployment", "server", add_env))
    h.tick()
    h.run_pass()
    status = h.settle()
    new_table = status["tables"][0]["configMap"]
    assert status["targets"][0]["state"] == "Live" and status["targets"][0]["table"] == new_table
    assert h.template()["spec"]["containers"][0]["env"] == [{"name": "HF_HOME", "value": "/cache"}]


def test_a_claim_and_its_apply_happen_in_one_pass() -> None:
    """The claim changes the Deployment (its owner record); the apply that follows is
    conditional on the object the claim returned, so it is not refused by the claim."""
    h = Harness.with_finished_job()
    h.tick()
    status = h.run_pass()
    annotations = h.kube.obj("Deployment", "server")["metadata"]["annotations"]
    assert annotations[L.ANNOTATION_OWNER] == "p"
    assert h.running_hash() == status["tables"][0]["hash"]
    assert status["targets"][0]["state"] == "Rolling" and not status["targets"][0].get("message")
    assert h.settle()["targets"][0]["state"] == "Live"


def test_releasing_never_removes_an_owner_record_written_after_the_read() -> None:
    """Deleting profile p: between the finalizer's list and its patch, profile q claims
    the Deployment. p's release is refused (409, the finalizer retries) and q's record
    stays."""
    h = Harness.one_target()
    h.profile_once()
    uid = h.kube.obj("SpsProfile", "p")["metadata"]["uid"]

    def q_claims(dep: dict[str, Any]) -> None:
        dep["metadata"]["annotations"][L.ANNOTATION_OWNER] = "q"

    before_deployment_patch(h, lambda: h.kube.edit("Deployment", "server", q_claims))
    with pytest.raises(ApiException) as conflict:
        release(h.kube, NS, "p", uid)
    assert conflict.value.status == 409
    annotations = h.kube.obj("Deployment", "server")["metadata"]["annotations"]
    assert annotations[L.ANNOTATION_OWNER] == "q"


def before_deployment_patch(h: Harness, change: Callable[[], None]) -> None:
    """Like `before_next`, for the next metadata patch of a Deployment only."""
    original = h.kube.patch_metadata

    def wrapped(kind: str, *args: Any) -> Any:
        if kind == "Deployment":
            h.kube.patch_metadata = original  # type: ignore[method-assign]
            change()
        return original(kind, *args)

    h.kube.patch_metadata = wrapped  # type: ignore[method-assign]
