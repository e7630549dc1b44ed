"""Root conftest: the local-control-plane fixtures for every test directory.

The fixtures (`k8s_cluster`, `kubeconfig`, `k8s_api`, `kubectl`, `namespace`,
`impersonate`, `node_agent`) are documented in sps_operator/devcluster/pytest_plugin.py
and docs/dev-cluster.md. The cluster starts only when a test asks for it.
"""

pytest_plugins = ["sps_operator.devcluster.pytest_plugin"]
