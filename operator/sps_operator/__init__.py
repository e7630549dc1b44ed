"""sps-operator: keeps SGLang DSpark SPS cost tables current on Kubernetes."""

from importlib.metadata import PackageNotFoundError, version

# The one version source is pyproject.toml; the installed distribution's metadata carries
# it (the chart's version and appVersion are checked equal to it by tests/ship).
try:
    __version__ = version("sps-operator")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
