"""Fixtures of the end-to-end tests: the chart's RBAC once per module, and an `Env` (the
operator process, not yet started, in a fresh namespace) per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_env import Env, OperatorProcess, install_operator_rbac, uninstall_operator_rbac
from kubernetes.client import ApiClient

from sps_operator.devcluster.pytest_plugin import K8sCluster, NodeAgent


@pytest.fixture(scope="module")
def operator_account(k8s_cluster: K8sCluster) -> Iterator[tuple[str, str]]:
    """The chart's RBAC in cluster mode; yields (namespace, service account)."""
    ns, account, rendered = install_operator_rbac(k8s_cluster, [])
    try:
        yield ns, account
    finally:
        uninstall_operator_rbac(k8s_cluster, ns, rendered)


@pytest.fixture
def env(
    k8s_cluster: K8sCluster,
    node_agent: NodeAgent,
    k8s_api: ApiClient,
    namespace: str,
    operator_account: tuple[str, str],
    tmp_path: Path,
) -> Iterator[Env]:
    op_ns, account = operator_account
    kubeconfig = k8s_cluster.service_account_kubeconfig(
        account, op_ns, tmp_path / "operator.kubeconfig"
    )
    clock = tmp_path / "clock-offset"
    clock.write_text("0")
    operator = OperatorProcess(kubeconfig, namespace, tmp_path / "operator.log", clock)
    e = Env(k8s_cluster, node_agent, k8s_api, namespace, operator)
    try:
        yield e
    finally:
        # Shown by pytest only when the test fails.
        print(e.diagnostics())
        operator.stop()
