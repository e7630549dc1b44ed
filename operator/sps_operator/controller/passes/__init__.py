"""What both reconcilers of a pass share: the pass state (`state`: the snapshot, the
targets, the status handed from step to step, the `Capacity` interface), reading the
targets (`observe`), the report (`report`) and when the next pass is due (`wakeups`).

These may import `policies`, `sglang`, `kube` and `process`; never the reconcilers
above them (`capacity`, `profiling`, `rollout`, `reconcile`) nor the kopf wiring."""
