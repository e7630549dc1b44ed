"""The GPU capacity service both reconcilers call through one door (`service.GpuCapacity`,
the `passes.state.Capacity` interface): why a run waits (Kueue, the scheduler), borrowing
a serving replica for a run and giving it back, holding it for the rollout of the table
the run published, the per-GPU-product pool Leases, a run's GPU cost. The decisions are
pure (`policies.borrow`, `policies.kueue`, `policies.cost`); the modules here read the
snapshot and write through `KubeApi`."""
