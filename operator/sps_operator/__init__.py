"""sps-operator: keeps SGLang DSpark SPS cost tables current on Kubernetes."""

from __future__ import annotations

import functools


# The one version source is pyproject.toml; the installed distribution's metadata carries
# it (the chart's version and appVersion are checked equal to it by tests/ship). Read on
# first use (PEP 562): importlib.metadata costs ~30 ms at import, and every simulated
# server and profiling Job imports this package for its shared contracts.
@functools.cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sps-operator")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return "0+unknown"


def __getattr__(name: str) -> str:
    if name == "__version__":
        return _version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
