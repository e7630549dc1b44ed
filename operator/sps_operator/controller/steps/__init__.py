"""One reconcile pass (`reconcile`) and its steps: observe → trigger → run → publish →
roll out → trim history → report, each a function of the pass state (`state.Pass`).

Steps may import `policies`, `sglang`, `kube` and `process`; never the kopf wiring
above them (`handlers`, `main`, `indexes`, `kicks`, `finalizer`)."""
