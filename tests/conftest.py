"""Root conftest: the local-control-plane fixtures for every test directory.

The fixtures (`k8s_cluster`, `kubeconfig`, `k8s_api`, `kubectl`, `namespace`,
`impersonate`) are documented in sps_operator/devcluster/pytest_plugin.py
and docs/dev-cluster.md. The cluster starts only when a test asks for it.
"""

import os

from hypothesis import HealthCheck, settings

pytest_plugins = ["sps_operator.devcluster.pytest_plugin"]

# Property-based tests: a fixed seed and budget in `make test` (reproducible, bounded);
# `HYPOTHESIS_PROFILE=long` searches much longer and randomly, for a fuzzing session.
settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long", max_examples=20_000, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
