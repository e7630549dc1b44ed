"""The operator's door to the API server and the objects that go through it: the client
(`client.KubeApi`, `client.Kube`), its requests on the bare ApiClient and the path of
each kind (`rest`, which the leader election uses too) and its rate limit (`ratelimit`),
deterministic names (`names`), pure builders of the Jobs, RBAC and ConfigMaps the operator
applies (`builders`, `table_objects`), the cache of ConfigMaps servers read env from
(`envsources`), and what was last read of Kueue per Job (`kueue_cache`).

May import `policies` and `sglang`; never `process`, the pass packages above or the kopf
wiring."""
