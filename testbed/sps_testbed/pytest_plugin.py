"""pytest fixtures for the real-node test bed (registered through the `pytest11` entry
point of sps-testbed, so installing the package is enough).

| fixture             | scope    | what                                                        |
| ------------------- | -------- | ----------------------------------------------------------- |
| `realnode_cluster`  | session  | a started RealNodeCluster (TEST_NODES: 2 H100, 2 H200, 2 RTX) |
| `realnode_kubectl`  | session  | `kubectl(*args, input=, check=) -> stdout` against the bed  |
| `realnode_api`      | session  | an admin `kubernetes.client.ApiClient`                      |
| `realnode_namespace`| function | a fresh namespace (its default SA exists), deleted afterwards |
| `realnode_kueue`    | session  | Kueue installed on that bed (sps_testbed.kueue): KueueSetup  |
| `realnode_kueue_namespace` | function | a fresh namespace, its LocalQueue `gpu` -> CQ `gpu` |
| `realnode_lws`      | session  | LeaderWorkerSet on that bed (sps_testbed.lws): LwsSetup     |

A test that uses any of them gets the `realnode` marker. If the bed cannot be built or
started, the test fails with the reason (it never skips). `SPS_TESTBED_TEST_DIR` fixes the
state directory (to look at logs after a run); `SPS_TESTBED_NODES` overrides the nodes
(`name=PRODUCT:GPUS,...`). `SPS_TESTBED_ATTACH=<state dir>` uses the bed running there
instead of starting one, and leaves it running: what `sps-testbed run -- pytest ...`
sets, so that several pytest processes (pytest-xdist's workers) share one bed.

Kueue and LeaderWorkerSet (the add-ons) are each installed the first time a test asks for
it. The modules of the tests that use one run after every other test that uses the bed
(addon_modules_last), so the bed stops right after them; should a bed test still follow (a
reordering plugin), the add-ons are removed after the last test that uses one, so that test
sees a bed without them. Their tests must not be marked `bed_shared`: one process installs
each.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sps_testbed.artifacts import ArtifactError
from sps_testbed.cluster import NodeSpec, RealNodeCluster, TestbedError
from sps_testbed.controlplane import TEST_NODES
from sps_testbed.controlplane_fixtures import namespace_name
from sps_testbed.kueue import KueueError, KueueSetup, create_local_queue
from sps_testbed.lws import LwsError, LwsSetup

FIXTURES = ("realnode_cluster", "realnode_kubectl", "realnode_api", "realnode_namespace")
Kubectl = Callable[..., str]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "realnode: runs on the real-node test bed (kubelets, containerd); fails if it cannot start",
    )


def _uses_kueue(item: pytest.Item) -> bool:
    return "realnode_kueue" in getattr(item, "fixturenames", ())


def _uses_lws(item: pytest.Item) -> bool:
    return "realnode_lws" in getattr(item, "fixturenames", ())


def _uses_bed(item: pytest.Item) -> bool:
    return any(f in getattr(item, "fixturenames", ()) for f in FIXTURES)


def addon_modules_last(items: list[pytest.Item]) -> list[pytest.Item]:
    """`items` with every module that has a test using an add-on (Kueue, LWS) moved, whole
    and in order, to just after the last other test that uses the bed: the bed then stops
    right after them, and an add-on's removal (half a minute) is never needed."""
    modules = {item.nodeid.split("::")[0] for item in items if _uses_kueue(item) or _uses_lws(item)}
    moved = [item for item in items if item.nodeid.split("::")[0] in modules]
    rest = [item for item in items if item.nodeid.split("::")[0] not in modules]
    after = max((i + 1 for i, item in enumerate(rest) if _uses_bed(item)), default=0)
    return [*rest[:after], *moved, *rest[after:]]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items[:] = addon_modules_last(items)
    _holder.last = None
    _holder.last_addon = None
    for item in items:
        if _uses_bed(item):
            item.add_marker("realnode")
            # Like every test that starts a cluster: `-m "not k8s"` leaves it out.
            item.add_marker("k8s")
            _holder.last = item.nodeid
        if _uses_kueue(item) or _uses_lws(item):
            _holder.last_addon = item.nodeid


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    last_bed_user = item.nodeid == _holder.last
    if last_bed_user:
        _holder.kueue = None  # the bed stops next: nothing of the add-ons to remove first
        _holder.lws = None
    yield  # the fixtures' own teardown
    # Four kubelets are not free on two cores: the bed stops after the last test that uses
    # it, not at the end of the whole session; the add-ons go after the last test that uses
    # one (not each after its own: one add-on's tests do not mind the other's presence, as
    # on a real cluster, and removing Kueue takes half a minute).
    # An attached bed is its starter's to stop (`sps-testbed run`).
    if last_bed_user and _holder.bed is not None and not _holder.attached:
        _holder.bed.stop()
    elif item.nodeid == _holder.last_addon:
        _uninstall_kueue()
        _uninstall_lws()


class _BedHolder:
    def __init__(self) -> None:
        self.bed: RealNodeCluster | None = None
        self.attached = False  # started by another process (SPS_TESTBED_ATTACH): not ours to stop
        self.error: str | None = None
        self.tmp: tempfile.TemporaryDirectory[str] | None = None
        self.summary = ""
        self.last: str | None = None
        self.kueue: KueueSetup | None = None
        self.kueue_error: str | None = None
        self.lws: LwsSetup | None = None
        self.lws_error: str | None = None
        self.last_addon: str | None = None


_holder = _BedHolder()


def _nodes() -> list[NodeSpec]:
    env = os.environ.get("SPS_TESTBED_NODES", "").strip()
    if not env:
        return list(TEST_NODES)
    return [NodeSpec.parse(n.strip()) for n in env.split(",") if n.strip()]


def _attach(state: Path) -> RealNodeCluster:
    """The bed another process started in `state` (its binaries found for kubectl, helm)."""
    bed = RealNodeCluster.attach(state)
    if not bed.running() or bed.record().status != "ready":
        raise TestbedError(f"SPS_TESTBED_ATTACH={state}: no ready test bed there")
    bed.build()
    return bed


@pytest.fixture(scope="session")
def realnode_cluster() -> Iterator[RealNodeCluster]:
    if _holder.error is not None:
        pytest.fail(
            f"real-node test bed failed to start earlier in this session:\n{_holder.error}",
            pytrace=False,
        )
    attach = os.environ.get("SPS_TESTBED_ATTACH")
    if attach:
        try:
            _holder.bed, _holder.attached = _attach(Path(attach)), True
        except (TestbedError, ArtifactError, OSError, ValueError) as err:
            _holder.error = str(err)
            pytest.fail(f"real-node test bed not reachable:\n{err}", pytrace=False)
        try:
            yield _holder.bed
        finally:
            _holder.bed = None  # whoever started it stops it
        return
    fixed = os.environ.get("SPS_TESTBED_TEST_DIR")
    if fixed:
        state = Path(fixed)
    else:
        _holder.tmp = tempfile.TemporaryDirectory(prefix="sps-testbed-")
        state = Path(_holder.tmp.name)
    bed = RealNodeCluster(state, nodes=_nodes())
    try:
        bed.build()
        bed.start()
    except (TestbedError, ArtifactError, OSError, ValueError) as err:
        _holder.error = str(err)
        pytest.fail(f"real-node test bed did not start:\n{err}", pytrace=False)
    _holder.bed = bed
    _holder.summary = (
        f"real-node test bed: artifacts checked/built in {bed.build_seconds:.1f}s, "
        f"started in {bed.start_seconds:.1f}s ({bed.record().timings})"
    )
    try:
        yield bed
    finally:
        bed.stop()
        _holder.bed = None
        if _holder.tmp is not None:
            _holder.tmp.cleanup()


@pytest.fixture(scope="session")
def realnode_kubectl(realnode_cluster: RealNodeCluster) -> Kubectl:
    def kubectl(*args: str, input: str | None = None, check: bool = True) -> str:
        return realnode_cluster.kubectl(*args, input=input, check=check)

    return kubectl


@pytest.fixture(scope="session")
def realnode_api(realnode_cluster: RealNodeCluster) -> Any:
    return realnode_cluster.api_client()


@pytest.fixture()
def realnode_namespace(
    realnode_cluster: RealNodeCluster, request: pytest.FixtureRequest
) -> Iterator[str]:
    name = realnode_cluster.create_namespace(namespace_name(request.node.nodeid))
    try:
        yield name
    finally:
        realnode_cluster.delete_namespace(name)


@pytest.fixture(scope="session")
def realnode_kueue(realnode_cluster: RealNodeCluster) -> Iterator[KueueSetup]:
    """Kueue on the session's bed, with the ClusterQueue `gpu` (a flavor per GPU product)."""
    if _holder.kueue_error is not None:
        pytest.fail(f"Kueue failed to install earlier in this session:\n{_holder.kueue_error}")
    try:
        setup = realnode_cluster.install_kueue()
    except (KueueError, TestbedError, OSError) as err:
        _holder.kueue_error = str(err)
        pytest.fail(f"Kueue did not install on the test bed:\n{err}", pytrace=False)
    _holder.kueue = setup
    _holder.summary += (
        f"\nKueue {setup.version}: installed and serving in "
        f"{setup.timings['visibility_available']:.1f}s ({setup.timings})"
    )
    try:
        yield setup
    finally:
        _uninstall_kueue()


def _uninstall_kueue() -> None:
    if _holder.kueue is not None and _holder.bed is not None:
        _holder.kueue = None
        t0 = time.monotonic()
        _holder.bed.uninstall_kueue()
        _holder.summary += f"; removed in {time.monotonic() - t0:.1f}s"


@pytest.fixture(scope="session")
def realnode_lws(realnode_cluster: RealNodeCluster) -> Iterator[LwsSetup]:
    """LeaderWorkerSet on the session's bed, its webhooks serving."""
    if _holder.lws_error is not None:
        pytest.fail(f"LWS failed to install earlier in this session:\n{_holder.lws_error}")
    try:
        setup = realnode_cluster.install_lws()
    except (LwsError, TestbedError, OSError) as err:
        _holder.lws_error = str(err)
        pytest.fail(f"LeaderWorkerSet did not install on the test bed:\n{err}", pytrace=False)
    _holder.lws = setup
    _holder.summary += (
        f"\nLeaderWorkerSet {setup.version}: installed and serving in "
        f"{setup.timings['webhooks_serving']:.1f}s ({setup.timings})"
    )
    try:
        yield setup
    finally:
        _uninstall_lws()


def _uninstall_lws() -> None:
    if _holder.lws is not None and _holder.bed is not None:
        _holder.lws = None
        t0 = time.monotonic()
        _holder.bed.uninstall_lws()
        _holder.summary += f"; LWS removed in {time.monotonic() - t0:.1f}s"


@pytest.fixture()
def realnode_kueue_namespace(
    realnode_cluster: RealNodeCluster, realnode_kueue: KueueSetup, realnode_namespace: str
) -> str:
    """A fresh namespace whose LocalQueue `gpu` points at the ClusterQueue `gpu`."""
    create_local_queue(realnode_cluster, realnode_namespace, realnode_kueue.cluster_queue)
    return realnode_namespace


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    outcome: Any = yield
    report = outcome.get_result()
    bed = _holder.bed
    if report.when != "call" or not report.failed or bed is None:
        return
    if "realnode" not in item.keywords:
        return
    ns = getattr(item, "funcargs", {}).get("realnode_namespace")
    args = ["get", "events", "-A"] if ns is None else ["get", "events", "-n", str(ns)]
    try:
        events = bed.kubectl(*args, check=False)
        pods = bed.kubectl("get", "pods", "-A", "-o", "wide", check=False)
    except Exception as err:  # diagnostics only
        events, pods = f"(unavailable: {err})", ""
    report.sections.append(
        ("test bed", f"state: {bed.state_dir}\n--- pods ---\n{pods}\n--- events ---\n{events}")
    )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _holder.summary:
        terminalreporter.write_line(_holder.summary)
