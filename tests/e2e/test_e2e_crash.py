"""Crash points (issue 18, item 13): the operator SIGKILLed at each write of a borrow and
of a rollout, restarted, and what is left is as if it had never crashed.

One run of a BorrowReplica profile (`allowDowntime`, so nothing but the run's own record
stops a second borrow) on the full pool (e2e_pool.POOL) reaches the writes in the order of
CRASH_POINTS (`controller/process/faults.py` names them). The operator starts with
`--pause-before-write` at the first: when that write is about to be sent it logs a marker
and writes nothing more; the test kills it through containerd (SIGKILL, as a node failure
or an OOM kill would) and starts it again paused at the next point, and so on; the last
restart runs free. A replica taken away drains (a preStop hook) until the operator
restarted after the scale-down has looked, so the run still waits for GPUs then. Then:
exactly one replica was ever lent (the Deployment went 2 → 1 → 2, never to 0), one table
was published, and the template changed exactly once.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e_env import GROUP, PLURAL, VERSION, Env, sps_profile, wait_ready
from e2e_pool import BORROWED, POOL_MARKS, borrow_tag, full_pool_deployment, wait_serving
from e2e_tenants import Background, Passes
from kubernetes import client, watch

from sps_operator.controller.process.faults import MARKER
from waiting import wait_for

# Beside the other shared tests, after the capacity tests on the same pool (one group).
pytestmark = POOL_MARKS

# (point, where the operator dies), in the order one borrowed run reaches them.
CRASH_POINTS = [
    ("create-lease", "before the run claims the GPU pool's Lease"),
    ("borrow-record", "after the pool claim, before the borrow record and the scale-down"),
    ("status@borrow-record", "after the record and the scale-down, before status has them"),
    ("claim", "before the rollout claims the Deployment"),
    ("apply-deployment", "after the claim, before the template is applied"),
    ("status@apply-deployment", "after the apply, before status records the rollout"),
]


class History(Background):
    """Every version of one Deployment from a watch: its replicas and borrow records."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str) -> None:
        super().__init__("history", self._follow)
        self.api, self.namespace, self.name = api, namespace, name
        self.replicas: list[int] = []
        self.tags: list[tuple[Any, ...]] = []

    def _follow(self, stopped: threading.Event) -> None:
        apps = client.AppsV1Api(self.api)
        selector = f"metadata.name={self.name}"
        version = ""
        while not stopped.is_set():
            stream = watch.Watch().stream(
                apps.list_namespaced_deployment, self.namespace, field_selector=selector,
                resource_version=version, timeout_seconds=5,
            )  # fmt: skip
            try:
                for event in stream:
                    dep: Any = event["object"]
                    version = dep.metadata.resource_version
                    self._seen(dep.spec.replicas, (dep.metadata.annotations or {}))
            except Exception:  # an expired watch starts again from a list
                version = ""

    def _seen(self, replicas: int, annotations: dict[str, str]) -> None:
        if not self.replicas or self.replicas[-1] != replicas:
            self.replicas.append(replicas)
        text = annotations.get(BORROWED)
        if text:
            # A record written again for the same borrow (a new time) is the same borrow.
            tag = json.loads(text)
            key = (tag.get("profile_uid"), tag.get("run"), tag.get("replicas"))
            if key not in self.tags:
                self.tags.append(key)


DRAIN_MOUNT = "/var/run/e2e-drain"


@dataclass
class Drain:
    """Replicas that drain until the test says so: a preStop hook waits while a file on
    the host exists (a server finishing its requests), so a replica taken away keeps its
    GPUs and the run's Job cannot start on them meanwhile."""

    directory: Path

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o755)

    def add_to(self, deployment: dict[str, Any]) -> None:
        pod = deployment["spec"]["template"]["spec"]
        pod["terminationGracePeriodSeconds"] = 300
        pod["volumes"] = [{"name": "drain", "hostPath": {"path": str(self.directory),
                                                         "type": "Directory"}}]  # fmt: skip
        container = pod["containers"][0]
        container["volumeMounts"] = [{"name": "drain", "mountPath": DRAIN_MOUNT}]
        wait = f"while [ -e {DRAIN_MOUNT}/hold ]; do sleep 0.2; done"
        container["lifecycle"] = {"preStop": {"exec": {"command": ["sh", "-c", wait]}}}

    def hold(self) -> None:
        (self.directory / "hold").touch()

    def release(self) -> None:
        (self.directory / "hold").unlink(missing_ok=True)


def restart(env: Env, point: str | None) -> None:
    """Start the operator (again), paused before `point` (None: not paused)."""
    env.operator.extra_args = [f"--pause-before-write={point}"] if point else []
    if env.operator.installed:
        env.operator.upgrade()
    env.operator.start()


def test_e2e_killed_at_every_write_of_a_borrow_and_a_rollout_it_borrows_once_and_rolls_once(
    env: Env, tmp_path: Path
) -> None:
    # A replica taken away drains for as long as the test says: an operator restarted
    # right after the scale-down still sees the run waiting for GPUs (where a second
    # borrow would come from).
    drain = Drain(tmp_path / "drain")
    full_pool_deployment(env, change=drain.add_to)
    drain.hold()
    history = History(env.api, env.namespace, "server")
    history.start()
    crashes: list[str] = []
    try:
        capacity = {"mode": "BorrowReplica", "borrowAfterSeconds": 0, "allowDowntime": True}
        profile = sps_profile(capacity=capacity)
        env.custom.create_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, profile)
        for point, where in CRASH_POINTS:
            restart(env, point)
            if point == "claim":
                # Restarted after the scale-down, before the status of the borrow: its
                # passes see the Job still waiting; then the drained replica goes.
                Passes(env.api, env.operator).settle([(env.namespace, "sps")])
                drain.release()
            line = env.operator.wait_log(f"{MARKER} {point} ", timeout=240)
            crashes.append(f"{point} ({where}): {line.split(MARKER, 1)[1].strip()}")
            env.operator.kill()
        restart(env, None)
        wait_ready(env, timeout=300)
        wait_for("the borrow given back", lambda: borrow_tag(env.deployment()) is None)
    finally:
        drain.release()
        history.stop()
    print("\n".join(["killed:", *crashes]))
    # Exactly one borrow: one record of one run, one replica lent, and given back.
    seen = f"borrow records {history.tags}, replicas {history.replicas}"
    assert (len(history.tags), history.replicas) == (1, [2, 1, 2]), seen
    wait_serving(env, 2, "both replicas serving", timeout=240)
    # One run, one Job, one table, and the template changed once (revision 1 → 2).
    status = env.profile()["status"]
    (table,) = status["tables"]
    (job,) = env.jobs()
    assert job["metadata"]["name"] == table["run"]
    dep = env.deployment()
    assert dep["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    template = dep["spec"]["template"]["metadata"]["annotations"]
    assert template["sps.dev/table-hash"] == table["hash"]
    for reason in ("RolloutApplied", "ReplicaBorrowed"):
        events = env.core.list_namespaced_event(
            env.namespace, field_selector=f"involvedObject.kind=SpsProfile,reason={reason}"
        ).items
        assert len(events) <= 1, [e.message for e in events]
