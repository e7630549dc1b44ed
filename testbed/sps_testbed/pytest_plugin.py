"""pytest fixtures for the real-node test bed (registered through the `pytest11` entry
point of sps-testbed, so installing the package is enough).

| fixture             | scope    | what                                                        |
| ------------------- | -------- | ----------------------------------------------------------- |
| `realnode_cluster`  | session  | a started RealNodeCluster (two H100 + two H200 nodes)       |
| `realnode_kubectl`  | session  | `kubectl(*args, input=, check=) -> stdout` against the bed  |
| `realnode_api`      | session  | an admin `kubernetes.client.ApiClient`                      |
| `realnode_namespace`| function | a fresh namespace (its default SA exists), deleted afterwards |

A test that uses any of them gets the `realnode` marker. If the bed cannot be built or
started, the test fails with the reason (it never skips). `SPS_TESTBED_TEST_DIR` fixes the
state directory (to look at logs after a run); `SPS_TESTBED_NODES` overrides the nodes
(`name=PRODUCT:GPUS,...`). `SPS_TESTBED_ATTACH=<state dir>` uses the bed running there
instead of starting one, and leaves it running: what `sps-testbed run -- pytest ...`
sets, so that several pytest processes (pytest-xdist's workers) share one bed.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sps_testbed.artifacts import ArtifactError
from sps_testbed.cluster import DEFAULT_NODES, NodeSpec, RealNodeCluster, TestbedError
from sps_testbed.controlplane_fixtures import namespace_name

FIXTURES = ("realnode_cluster", "realnode_kubectl", "realnode_api", "realnode_namespace")
Kubectl = Callable[..., str]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "realnode: runs on the real-node test bed (kubelets, containerd); fails if it cannot start",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    _holder.last = None
    for item in items:
        if any(f in getattr(item, "fixturenames", ()) for f in FIXTURES):
            item.add_marker("realnode")
            # Like every test that starts a cluster: `-m "not k8s"` leaves it out.
            item.add_marker("k8s")
            _holder.last = item.nodeid


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    # Four kubelets are not free on two cores: the bed stops after the last test that uses
    # it, not at the end of the whole session.
    if item.nodeid == _holder.last and _holder.bed is not None and not _holder.attached:
        _holder.bed.stop()


class _BedHolder:
    def __init__(self) -> None:
        self.bed: RealNodeCluster | None = None
        self.attached = False  # started by another process (SPS_TESTBED_ATTACH): not ours to stop
        self.error: str | None = None
        self.tmp: tempfile.TemporaryDirectory[str] | None = None
        self.summary = ""
        self.last: str | None = None


_holder = _BedHolder()


def _nodes() -> list[NodeSpec]:
    env = os.environ.get("SPS_TESTBED_NODES", "").strip()
    if not env:
        return list(DEFAULT_NODES)
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
        realnode_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


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
