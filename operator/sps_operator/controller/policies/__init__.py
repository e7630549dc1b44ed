"""Pure decisions (no API calls, no clock of their own): when to profile (`triggers`), what
a Job may be (`job_policy`), where it may run (`placement`, `claims`, `borrow`), which build a
server is (`compat`), whether a run's result becomes a table (`acceptance`, `gates`), and
the conditions, times and costs they are stated in. No module here does I/O, holds a lock
or starts a process (`process.bounded` runs the fit in a child process; `kube.kueue_cache`
caches Kueue's objects).

Policies import only each other and `sglang`: never `kube`, `process`, the pass packages
or the kopf wiring, so each is unit-tested on plain values."""
