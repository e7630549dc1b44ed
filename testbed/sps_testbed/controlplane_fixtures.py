"""pytest fixtures for tests against the local control plane.

Registered through the `pytest11` entry point of sps-testbed (installing it is enough).

- `k8s_cluster` (session): one control plane for the whole run, started the first
  time a test asks for it. A missing binary is built with build.sh; if that or the
  start fails, every test that needs the cluster FAILS (never skips).
- `kubeconfig`, `k8s_api` (admin `kubernetes.client.ApiClient`), `kubectl(*args)`.
- `namespace`: a fresh namespace per test, deleted afterwards.
- `impersonate(service_account, namespace)`: an ApiClient acting as that service
  account (Impersonate-User), so a test runs with the RBAC a chart grants, not as admin.

Pods need nodes: tests that run pods use the real-node test bed (`sps_testbed`'s
`realnode_cluster`), which runs this control plane with kubelets beside it.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shlex
import subprocess
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sps_testbed.accounts import service_account_kubeconfig
from sps_testbed.binaries import Binaries, BinariesError, find_binaries
from sps_testbed.controlplane import ControlPlane, ControlPlaneError
from sps_testbed.processes import log_tail

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


class KubectlError(RuntimeError):
    """kubectl exited non-zero; `stderr` says why."""

    def __init__(self, args: Sequence[str], returncode: int, stdout: str, stderr: str) -> None:
        super().__init__(
            f"kubectl {shlex.join(args)} exited {returncode}: {stderr.strip() or stdout.strip()}"
        )
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


@dataclass
class K8sCluster:
    """A running local control plane, as the tests see it."""

    control_plane: ControlPlane
    binaries: Binaries
    started_in_seconds: float
    _clients: list[ApiClient] = field(default_factory=list)

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig

    @property
    def state_dir(self) -> Path:
        return self.control_plane.state_dir

    def env(self) -> dict[str, str]:
        """Environment for subprocesses: this cluster's KUBECONFIG, kubectl and helm on PATH."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        dirs = [str(d) for d in self.binaries.path_dirs()]
        env["PATH"] = os.pathsep.join([*dirs, env.get("PATH", "")])
        return env

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        kubeconfig: Path | None = None,
    ) -> str:
        """Run kubectl against this cluster (as admin unless `kubeconfig` says otherwise).

        Returns stdout; raises KubectlError (with stderr) on a non-zero exit when `check`.
        """
        config = kubeconfig or self.kubeconfig
        argv = [str(self.binaries.kubectl), f"--kubeconfig={config}", *args]
        proc = subprocess.run(
            argv, input=input, capture_output=True, text=True, check=False, timeout=120
        )
        if check and proc.returncode != 0:
            raise KubectlError(args, proc.returncode, proc.stdout, proc.stderr)
        return proc.stdout

    def api_client(self, impersonate_user: str | None = None) -> ApiClient:
        from kubernetes import config

        client = config.new_client_from_config(config_file=str(self.kubeconfig))
        if impersonate_user is not None:
            client.set_default_header("Impersonate-User", impersonate_user)
        self._clients.append(client)
        return client

    def impersonate(self, service_account: str, namespace: str) -> ApiClient:
        """An ApiClient acting as `system:serviceaccount:<namespace>:<service_account>`.

        The API server adds the service-account groups itself, exactly as for a token.
        """
        return self.api_client(f"system:serviceaccount:{namespace}:{service_account}")

    def service_account_kubeconfig(
        self, service_account: str, namespace: str, path: Path, expiration_seconds: int = 3600
    ) -> Path:
        """A kubeconfig with a real token of the service account (sps_testbed.accounts)."""
        return service_account_kubeconfig(
            self.kubectl, self.kubeconfig, service_account, namespace, path, expiration_seconds
        )

    def create_namespace(self, name: str, timeout: float = 60.0) -> str:
        """Create `name` and wait until pods can be created in it (default SA exists)."""
        self.kubectl("create", "namespace", name)
        deadline = time.monotonic() + timeout
        path = f"/api/v1/namespaces/{name}/serviceaccounts/default"
        while self.control_plane.get(path) is None:
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"namespace {name}: no default service account in time")
            time.sleep(0.1)
        return name

    def delete_namespace(self, name: str) -> None:
        self.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)

    def close(self) -> None:
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()
        self._clients.clear()


# Start-up times of this session's cluster, shown in the terminal summary.
_timings: dict[str, float] = {}


def _state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    override = os.environ.get("SPS_TEST_CLUSTER_DIR")
    if override:
        return Path(override)
    return tmp_path_factory.mktemp("k8s-cluster")


@pytest.fixture(scope="session")
def k8s_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[K8sCluster]:
    started = time.monotonic()
    try:
        binaries = find_binaries(build=True)
    except BinariesError as err:
        pytest.fail(f"control-plane binaries unavailable: {err}", pytrace=False)
    if time.monotonic() - started > 1.0:
        _timings["binaries (build)"] = time.monotonic() - started
        started = time.monotonic()
    cp = ControlPlane(_state_dir(tmp_path_factory), binaries=binaries)
    try:
        cp.start()
    except (ControlPlaneError, OSError) as err:
        cp.stop()
        pytest.fail(f"local control plane did not start: {err}", pytrace=False)
    cluster = K8sCluster(cp, binaries, time.monotonic() - started)
    _timings["control plane"] = cluster.started_in_seconds
    try:
        yield cluster
    finally:
        cluster.close()
        cp.stop()


@pytest.fixture(scope="session")
def kubeconfig(k8s_cluster: K8sCluster) -> Path:
    return k8s_cluster.kubeconfig


@pytest.fixture(scope="session")
def k8s_api(k8s_cluster: K8sCluster) -> ApiClient:
    return k8s_cluster.api_client()


@pytest.fixture(scope="session")
def kubectl(k8s_cluster: K8sCluster) -> Callable[..., str]:
    return k8s_cluster.kubectl


def namespace_name(nodeid: str) -> str:
    """A fresh namespace name for a test: its name, shortened, and a random suffix."""
    test = nodeid.rsplit("::", 1)[-1]
    base = re.sub(r"[^a-z0-9-]+", "-", test.lower()).strip("-")[:40].strip("-") or "t"
    return f"{base}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(k8s_cluster: K8sCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = k8s_cluster.create_namespace(namespace_name(request.node.nodeid))
    try:
        yield name
    finally:
        k8s_cluster.delete_namespace(name)


@pytest.fixture
def impersonate(k8s_cluster: K8sCluster) -> Callable[[str, str], ApiClient]:
    return k8s_cluster.impersonate


def _failure_sections(item: pytest.Item) -> list[tuple[str, str]]:
    funcargs: dict[str, Any] = getattr(item, "funcargs", {})
    cluster = funcargs.get("k8s_cluster")
    ns = funcargs.get("namespace")
    ns = ns if isinstance(ns, str) else None
    sections: list[tuple[str, str]] = []
    if isinstance(cluster, K8sCluster):
        cp = cluster.control_plane
        for name, alive in cp.running_components().items():
            if not alive:  # a crashed component explains every later failure: show why
                sections.append((f"{name} is not running", log_tail(cp.logs_dir / f"{name}.log")))
    if isinstance(cluster, K8sCluster) and ns:
        with contextlib.suppress(Exception):
            events = cluster.kubectl(
                "get", "events", "-n", ns, "--sort-by=.lastTimestamp", check=False
            )
            sections.append((f"events ({ns})", events or "(none)"))
    return sections


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" and report.failed:
        for title, text in _failure_sections(item):
            report.sections.append((title, text))
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A test that needs the cluster is a k8s test, whether or not its file says so,
    # so `-m "not k8s"` reliably leaves the control plane alone.
    for item in items:
        if "k8s_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.k8s)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _timings:
        parts = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in _timings.items())
        terminalreporter.write_line(f"local Kubernetes start-up: {parts}")
