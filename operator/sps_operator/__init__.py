"""sps-operator: keeps SGLang DSpark SPS cost tables current on Kubernetes."""

__version__ = "0.1.0"
