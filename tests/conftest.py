"""Root conftest: Hypothesis profiles.

The cluster fixtures come from the test bed's pytest plugins, registered by installing
`testbed/` (entry points): `k8s_cluster`, `kubeconfig`, `k8s_api`, `kubectl`, `namespace`,
`impersonate` (the control plane alone, sps_testbed/controlplane_fixtures.py) and
`realnode_cluster`, ... (with real nodes, sps_testbed/pytest_plugin.py); docs/dev-cluster.md.
A cluster starts only when a test asks for it.
"""

import os

from hypothesis import HealthCheck, settings

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
