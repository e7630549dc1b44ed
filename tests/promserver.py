"""A real Prometheus server for tests, and the scrape config the Prometheus Operator
generates for a ServiceMonitor.

The server is Debian's `prometheus` package: `apt-get download`ed and unpacked into the
cache (never installed, so no service starts), run on 127.0.0.1 with a config the test
writes. Debian builds it without Kubernetes discovery: `as_static` gives a job the target
with the meta labels discovery would, so its relabelling runs as the Prometheus Operator
generated it. The package lists come from `tests/controlplane/setup-host.sh --nodes` (it runs
`apt-get update` when they do not offer `prometheus`). A missing package fails, never skips.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from waiting import wait_for

PACKAGE = "prometheus"


def _cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "sps-operator" / "prometheus"


def binary() -> Path:
    """Debian's prometheus binary, unpacked into the cache on first use."""
    target = _cache() / "prometheus"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return target
        with tempfile.TemporaryDirectory() as tmp:
            got = subprocess.run(
                ["apt-get", "download", PACKAGE], cwd=tmp, capture_output=True, text=True,
                check=False,
            )  # fmt: skip
            debs = list(Path(tmp).glob(f"{PACKAGE}_*.deb"))
            if got.returncode != 0 or not debs:
                raise RuntimeError(
                    f"apt-get download {PACKAGE} failed (run tests/controlplane/setup-host.sh "
                    f"--nodes: it updates the package lists):\n{got.stderr}"
                )
            subprocess.run(["dpkg-deb", "-x", str(debs[0]), f"{tmp}/x"], check=True)
            partial = target.with_suffix(".partial")
            shutil.copy2(f"{tmp}/x/usr/bin/prometheus", partial)
            partial.rename(target)
    return target


def _sane(label: str) -> str:
    """A Kubernetes label name as Prometheus's service discovery spells it in meta labels."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def servicemonitor_scrape_config(
    monitor: dict[str, Any], kubeconfig: Path, interval: str | None = None
) -> dict[str, Any]:
    """The scrape job the Prometheus Operator generates for `monitor`'s one endpoint
    (serviceDiscoveryRole EndpointSlice): targets are the selected Services' endpoints on
    the named port; `namespace`, `service`, `pod`, `container`, `job` (the Service's name)
    and `endpoint` are set on every target, and honor_labels is the endpoint's
    `honorLabels` (false when absent). `interval` overrides the endpoint's."""
    meta, spec = monitor["metadata"], monitor["spec"]
    (endpoint,) = spec["endpoints"]
    port = endpoint["port"]
    relabel: list[dict[str, Any]] = [
        {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}
    ]
    for key, value in sorted(spec["selector"]["matchLabels"].items()):
        relabel.append({
            "action": "keep",
            "source_labels": [
                f"__meta_kubernetes_service_label_{_sane(key)}",
                f"__meta_kubernetes_service_labelpresent_{_sane(key)}",
            ],
            "regex": f"({re.escape(value)});true",
        })  # fmt: skip
    target = ["__meta_kubernetes_endpointslice_address_target_kind",
              "__meta_kubernetes_endpointslice_address_target_name"]  # fmt: skip
    relabel += [
        {"action": "keep", "source_labels": ["__meta_kubernetes_endpointslice_port_name"],
         "regex": port},
        {"source_labels": target, "separator": ";", "regex": "Node;(.*)",
         "replacement": "${1}", "target_label": "node"},
        {"source_labels": target, "separator": ";", "regex": "Pod;(.*)",
         "replacement": "${1}", "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"],
         "regex": "(Failed|Succeeded)"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job",
         "replacement": "${1}"},
        {"target_label": "endpoint", "replacement": port},
    ]  # fmt: skip
    return {
        "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/0",
        "honor_labels": bool(endpoint.get("honorLabels", False)),
        "honor_timestamps": True,
        "scrape_interval": interval or endpoint.get("interval", "30s"),
        "scrape_timeout": "1s" if interval else endpoint.get("scrapeTimeout", "10s"),
        "metrics_path": endpoint.get("path", "/metrics"),
        "scheme": "http",
        "kubernetes_sd_configs": [
            {
                "role": "endpointslice",
                "kubeconfig_file": str(kubeconfig),
                "namespaces": {"names": spec["namespaceSelector"]["matchNames"]},
            }
        ],
        "relabel_configs": relabel,
    }


def as_static(
    job: dict[str, Any], address: str, service: dict[str, Any], pod: str, container: str
) -> dict[str, Any]:
    """`job` (servicemonitor_scrape_config's) with Kubernetes discovery replaced by one
    target at `address` that carries the meta labels discovery gives an EndpointSlice
    endpoint of `service` backed by `pod`: the job's own relabelling then runs on it
    unchanged (Debian's Prometheus has no Kubernetes discovery; a test reads the Service and
    its EndpointSlice from the cluster, or serves a local process)."""
    meta = service["metadata"]
    (port,) = service["spec"]["ports"]
    labels = {
        "__meta_kubernetes_namespace": meta["namespace"],
        "__meta_kubernetes_service_name": meta["name"],
        "__meta_kubernetes_endpointslice_port_name": port["name"],
        "__meta_kubernetes_endpointslice_address_target_kind": "Pod",
        "__meta_kubernetes_endpointslice_address_target_name": pod,
        "__meta_kubernetes_pod_name": pod,
        "__meta_kubernetes_pod_container_name": container,
        "__meta_kubernetes_pod_phase": "Running",
    }
    for key, value in meta.get("labels", {}).items():
        labels[f"__meta_kubernetes_service_label_{_sane(key)}"] = value
        labels[f"__meta_kubernetes_service_labelpresent_{_sane(key)}"] = "true"
    out = {k: v for k, v in job.items() if k != "kubernetes_sd_configs"}
    out["static_configs"] = [{"targets": [address], "labels": labels}]
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running(
    workdir: Path, scrape_configs: list[dict[str, Any]], rule_groups: dict[str, Any]
) -> Iterator[str]:
    """A Prometheus on 127.0.0.1 evaluating `rule_groups` every second; yields its URL."""
    workdir.mkdir(parents=True, exist_ok=True)
    rules = workdir / "rules.yaml"
    rules.write_text(yaml.safe_dump(rule_groups))
    config = workdir / "prometheus.yml"
    config.write_text(
        yaml.safe_dump({
            "global": {"scrape_interval": "2s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "scrape_configs": scrape_configs,
        })
    )  # fmt: skip
    port = _free_port()
    log = (workdir / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [str(binary()), f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            assert proc.poll() is None, (workdir / "prometheus.log").read_text()[-3000:]
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
            return False

        wait_for("Prometheus ready", ready, timeout=60)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def query(url: str, expr: str) -> list[dict[str, Any]]:
    """An instant query's result vector."""
    got = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert got["status"] == "success", got
    return list(got["data"]["result"])


def alerts(url: str) -> list[dict[str, Any]]:
    """Every active alert (pending or firing): labels, annotations, state."""
    got = httpx.get(f"{url}/api/v1/alerts", timeout=10).json()
    assert got["status"] == "success", got
    return list(got["data"]["alerts"])


if __name__ == "__main__":  # `make test-tools`: unpacked before the tests need it
    print(binary())
