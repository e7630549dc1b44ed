"""The operator: kopf wiring on top, then the floors below it, each a subpackage that
imports only from the floors under it (tests/unit/test_controller_layers.py holds them):

    (this folder)  kopf wiring and the process: `main`, `handlers`, the caches
                   (`indexes`), wake-ups (`kicks`), the finalizer (`finalizer`), the
                   offline `fingerprint` command
    steps/         one reconcile pass and its steps, on the pass state
    process/       the operator process's own plumbing: leader election, liveness,
                   metrics, fault injection, the fit in a bounded child process
    kube/          the door to the API server and the objects that go through it
    policies/      pure decisions: when to profile, what a Job may be, where it runs,
                   whether a result becomes a table
    sglang/        what an SGLang server container runs, read without I/O

Nothing imports `main` or `handlers` but the command line (`sps_operator.cli`)."""
