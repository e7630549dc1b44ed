"""Pure decisions (no API calls, no clock of their own): when to profile (`triggers`), what
a Job may be (`job_policy`), where it may run (`placement`, `claims`, `borrow`), which build a
server is (`compat`), whether a run's result becomes a table (`acceptance`, `gates`), and
the conditions, times and costs they are stated in. `bounded` runs one of them (the fit)
in a child process under a time and memory bound.

Policies import only each other and `server`: never `steps`, `kube`, `process` or the
kopf wiring, so each is unit-tested on plain values."""
