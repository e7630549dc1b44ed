"""A local Kubernetes control plane with simulated GPU nodes, for tests and the demo."""
