"""Fixtures of the end-to-end tests: the chart's RBAC once per module, and an `Env` (the
operator process, not yet started, in a fresh namespace) per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_env import (
    Env,
    OperatorAccount,
    OperatorProcess,
    install_operator_rbac,
    uninstall_operator_rbac,
)
from kubernetes.client import ApiClient

from sps_operator.devcluster.pytest_plugin import K8sCluster, NodeAgent


@pytest.fixture(scope="module")
def operator_account(k8s_cluster: K8sCluster) -> Iterator[OperatorAccount]:
    """The chart's RBAC in cluster mode."""
    account = install_operator_rbac(k8s_cluster, [])
    try:
        yield account
    finally:
        uninstall_operator_rbac(k8s_cluster, account)


@pytest.fixture
def env(
    k8s_cluster: K8sCluster,
    node_agent: NodeAgent,
    k8s_api: ApiClient,
    namespace: str,
    operator_account: OperatorAccount,
    tmp_path: Path,
) -> Iterator[Env]:
    kubeconfig = k8s_cluster.service_account_kubeconfig(
        operator_account.service_account,
        operator_account.namespace,
        tmp_path / "operator.kubeconfig",
    )
    clock = tmp_path / "clock-offset"
    clock.write_text("0")
    operator = OperatorProcess(kubeconfig, namespace, tmp_path / "operator.log", clock)
    e = Env(k8s_cluster, node_agent, k8s_api, namespace, operator, operator_account)
    try:
        yield e
    finally:
        # Shown by pytest only when the test fails.
        print(e.diagnostics())
        for process in [operator, *e.others]:
            process.stop()
