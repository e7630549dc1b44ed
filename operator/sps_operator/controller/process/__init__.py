"""The operator process's own plumbing, beside the reconcile logic: leader election on a
Lease (`leader`), the liveness endpoint (`health`), Prometheus metrics (`metrics`) and
test-only fault injection at a chosen write (`faults`).

May import `policies`, `server` and `kube`; never `steps` or the kopf wiring."""
