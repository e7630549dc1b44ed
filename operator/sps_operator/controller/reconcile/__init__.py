"""The one place that orders a pass (`reconciler.Reconciler`): the profiling reconciler,
then the rollout reconciler, then the report and the one status write."""
