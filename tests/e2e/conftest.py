"""Fixtures of the end-to-end tests: the real-node test bed (once per session, shared with
tests/realnode), the CRD and a namespace for the operator's releases once per module, and
an `Env` (the chart's release, not yet installed, watching a fresh namespace) per test."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_cluster import E2eCluster
from e2e_env import Env, OperatorRelease, install_crd
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
def operator_namespace(e2e_cluster: E2eCluster) -> Iterator[str]:
    """The CRD, and the namespace the tests' operator releases are installed in."""
    install_crd(e2e_cluster)
    ns = e2e_cluster.create_namespace(f"sps-system-{secrets.token_hex(3)}")
    try:
        yield ns
    finally:
        e2e_cluster.delete_namespace(ns)


@pytest.fixture
def env(
    e2e_cluster: E2eCluster,
    e2e_api: ApiClient,
    realnode_namespace: str,
    operator_namespace: str,
    tmp_path: Path,
) -> Iterator[Env]:
    operator = OperatorRelease(e2e_cluster, operator_namespace, realnode_namespace,
                               tmp_path / "clock")  # fmt: skip
    e = Env(e2e_cluster, e2e_api, realnode_namespace, operator)
    try:
        yield e
    finally:
        # Shown by pytest only when the test fails.
        print(e.diagnostics())
        operator.uninstall()
