"""Fixtures of the end-to-end tests: the real-node test bed (once per session, shared with
tests/realnode), the chart's RBAC once per module, and an `Env` (the operator process, not
yet started, in a fresh namespace) per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_cluster import E2eCluster
from e2e_env import (
    Env,
    OperatorAccount,
    OperatorProcess,
    install_operator_rbac,
    uninstall_operator_rbac,
)
from kubernetes.client import ApiClient

from sps_testbed import RealNodeCluster


@pytest.fixture(scope="session")
def e2e_cluster(realnode_cluster: RealNodeCluster) -> E2eCluster:
    return E2eCluster(realnode_cluster)


@pytest.fixture(scope="session")
def e2e_api(realnode_api: Any) -> ApiClient:
    api: ApiClient = realnode_api
    return api


@pytest.fixture(scope="module")
def operator_account(e2e_cluster: E2eCluster) -> Iterator[OperatorAccount]:
    """The chart's RBAC in cluster mode."""
    account = install_operator_rbac(e2e_cluster, [])
    try:
        yield account
    finally:
        uninstall_operator_rbac(e2e_cluster, account)


@pytest.fixture
def env(
    e2e_cluster: E2eCluster,
    e2e_api: ApiClient,
    realnode_namespace: str,
    operator_account: OperatorAccount,
    tmp_path: Path,
) -> Iterator[Env]:
    kubeconfig = e2e_cluster.service_account_kubeconfig(
        operator_account.service_account,
        operator_account.namespace,
        tmp_path / "operator.kubeconfig",
    )
    clock = tmp_path / "clock-offset"
    clock.write_text("0")
    operator = OperatorProcess(kubeconfig, realnode_namespace, tmp_path / "operator.log", clock)
    e = Env(e2e_cluster, e2e_api, realnode_namespace, operator, operator_account)
    try:
        yield e
    finally:
        # Shown by pytest only when the test fails.
        print(e.diagnostics())
        for process in [operator, *e.others]:
            process.stop()
