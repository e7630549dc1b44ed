"""Root conftest: Hypothesis profiles.

The cluster fixtures come from the test bed's pytest plugins, registered by installing
`testbed/` (entry points): `k8s_cluster`, `kubeconfig`, `k8s_api`, `kubectl`, `namespace`,
`impersonate` (the control plane alone, sps_testbed/controlplane_fixtures.py) and
`realnode_cluster`, ... (with real nodes, sps_testbed/pytest_plugin.py); docs/dev-cluster.md.
A cluster starts only when a test asks for it.
"""

import os

import pytest
from hypothesis import HealthCheck, settings

from bed_durations import load, longest_first

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


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`--dist loadgroup` (the shared bed tests, tests/run-all.sh): the work units longest
    first (`longest_first`), and on pytest 9.2 the `@group` suffix on the node ids that
    xdist's scheduler groups by. xdist 3.8 still writes `item._nodeid`, which pytest 9.2's
    structured node ids ignore, so every `xdist_group` mark was silently dropped
    (pytest-dev/pytest-xdist#1386, fix proposed in #1388): the capacity tests then ran on
    two workers at once on the one pool. Runs after xdist's own hook in a worker; does
    nothing once an id already carries the suffix (a fixed xdist, an older pytest)."""
    if not getattr(config.option, "loadgroup", False):
        return
    _group_suffix(items)
    items[:] = longest_first(items, load(), lambda item: _group(item) or item.nodeid)


def _group(item: pytest.Item) -> str | None:
    names = sorted(
        str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for mark in item.iter_markers("xdist_group")
    )
    return "_".join(names) if names else None


def _group_suffix(items: list[pytest.Item]) -> None:
    for item in items:
        group = _group(item)
        if group and "@" not in item.nodeid:
            from _pytest.nodeid import NodeId  # pytest >= 9.2, where the suffix is lost

            item._id = NodeId.parse(f"{item.nodeid}@{group}")
