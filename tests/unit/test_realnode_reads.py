"""tests/realnode/realnode_helpers.api_read: `kubectl get` arguments as the API path the
harness reads instead (no kubectl process per read), or None for kubectl to read."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "realnode"))

from realnode_helpers import API_KINDS, api_read


def test_reads_as_kubectl_names_them() -> None:
    assert api_read(("pod", "p", "-n", "ns")) == ("/api/v1/namespaces/ns/pods/p", [])
    assert api_read(("pods", "-n", "ns", "-l", "job-name=x")) == (
        "/api/v1/namespaces/ns/pods", [("labelSelector", "job-name=x")],
    )  # fmt: skip
    assert api_read(("nodes", "-l", "a=b")) == ("/api/v1/nodes", [("labelSelector", "a=b")])
    assert api_read(("node", "n1")) == ("/api/v1/nodes/n1", [])
    assert api_read(("crd", "workloads.kueue.x-k8s.io")) == (
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/workloads.kueue.x-k8s.io", [],
    )  # fmt: skip
    assert api_read(("jobs", "-n", "ns", "-l", "sps.dev/profile=llama"))[0] == (  # type: ignore[index]
        "/apis/batch/v1/namespaces/ns/jobs"
    )
    assert api_read(("workloads.kueue.x-k8s.io", "-n", "ns")) == (
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads", [],
    )  # fmt: skip
    # kubectl's namespace without -n: the kubeconfig's, "default" on the bed.
    assert api_read(("job", "j")) == ("/apis/batch/v1/namespaces/default/jobs/j", [])


def test_what_it_does_not_know_is_left_to_kubectl() -> None:
    assert api_read(("validatingwebhookconfiguration", "x")) is None
    assert api_read(("pod", "a", "b")) is None  # two names
    assert api_read(("pod", "a", "--show-labels")) is None  # a flag it does not know
    assert api_read(("pod", "a", "-l", "x=y")) is None  # kubectl refuses a name and -l


names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)


@given(st.sampled_from(sorted(API_KINDS)), names, names)
def test_a_named_read_ends_in_the_kinds_plural_and_the_name(kind: str, name: str, ns: str) -> None:
    prefix, plural, namespaced = API_KINDS[kind]
    read = api_read((kind, name, "-n", ns))
    assert read is not None
    path, query = read
    assert query == []
    assert path.startswith(f"/{prefix}/")
    assert path.endswith(f"/{plural}/{name}")
    assert (f"/namespaces/{ns}/" in path) == namespaced
