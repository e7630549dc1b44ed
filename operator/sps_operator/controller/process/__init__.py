"""The operator process's own plumbing, beside the reconcile logic: leader election on a
Lease (`leader`), the liveness endpoint (`health`), Prometheus metrics (`metrics`),
test-only fault injection at a chosen write (`faults`), and CPU work in a child process
bounded in time and memory (`bounded`: the fit's judge).

May import `policies`, `sglang` and `kube`; never the pass packages above (`passes`,
`capacity`, `profiling`, `rollout`, `reconcile`) or the kopf wiring."""
