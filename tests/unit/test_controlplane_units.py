"""Pure parts of the dev cluster: node specs, certificates, pod-network reservations,
binary discovery, kubeconfigs and the CLI parser."""

from __future__ import annotations

import base64
import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from sps_testbed import binaries, pki, podnet
from sps_testbed.controlplane import DEFAULT_NODES, TEST_NODES, NodeSpec, kubeconfig_yaml
from sps_testbed.controlplane_cli import build_parser


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu-0=NVIDIA-H100-80GB-HBM3", NodeSpec("gpu-0", "NVIDIA-H100-80GB-HBM3", 8)),
        ("g=NVIDIA-H200:4", NodeSpec("g", "NVIDIA-H200", 4)),
        ("g=NVIDIA-H200:0", NodeSpec("g", "NVIDIA-H200", 0)),
    ],
)
def test_node_spec_parse(text: str, expected: NodeSpec) -> None:
    assert NodeSpec.parse(text) == expected
    assert NodeSpec.parse(expected.arg()) == expected


@pytest.mark.parametrize("text", ["nameonly", "=NVIDIA-H200", "g=", "g=NVIDIA-H200:x", "g=:4"])
def test_node_spec_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r"NAME=PRODUCT|GPU count"):
        NodeSpec.parse(text)


def test_default_nodes_two_h100_two_h200() -> None:
    products = sorted(n.product for n in DEFAULT_NODES)
    assert products == ["NVIDIA-H100-80GB-HBM3"] * 2 + ["NVIDIA-H200"] * 2
    assert all(n.gpus == 8 for n in DEFAULT_NODES)
    assert len({n.name for n in DEFAULT_NODES}) == 4


def test_the_tests_nodes_add_a_pool_of_a_third_product_to_the_default_ones() -> None:
    # The capacity and crash-point tests fill it (tests/e2e/e2e_pool.py) beside the others.
    assert TEST_NODES[: len(DEFAULT_NODES)] == DEFAULT_NODES
    pool = TEST_NODES[len(DEFAULT_NODES) :]
    assert [n.product for n in pool] == ["NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"] * 2
    assert all(n.gpus == 8 for n in pool)
    assert len({n.name for n in TEST_NODES}) == 6


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_pki_chain_sans_and_identities(tmp_path: Path) -> None:
    p = pki.generate(tmp_path, ["127.0.0.1", "10.244.7.1", "10.96.0.1", "127.0.0.1"])
    ca = _cert(p.ca_cert)
    server = _cert(p.apiserver_cert)
    server.verify_directly_issued_by(ca)
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    ips = sans.get_values_for_type(x509.IPAddress)
    assert ips == [ipaddress.ip_address(a) for a in ("127.0.0.1", "10.244.7.1", "10.96.0.1")]
    assert "kubernetes.default.svc.cluster.local" in sans.get_values_for_type(x509.DNSName)

    def subject(cert: x509.Certificate, oid: x509.ObjectIdentifier) -> list[str]:
        return [str(a.value) for a in cert.subject.get_attributes_for_oid(oid)]

    admin = _cert(p.admin.cert)
    admin.verify_directly_issued_by(ca)
    assert subject(admin, NameOID.ORGANIZATION_NAME) == ["system:masters"]
    cm = _cert(p.controller_manager.cert)
    assert subject(cm, NameOID.COMMON_NAME) == ["system:kube-controller-manager"]
    assert subject(_cert(p.scheduler.cert), NameOID.COMMON_NAME) == ["system:kube-scheduler"]
    # Token signing must be RSA (RS256); keys are private to the owner.
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    assert isinstance(load_pem_private_key(p.sa_key.read_bytes(), None), rsa.RSAPrivateKey)
    assert isinstance(load_pem_private_key(p.ca_key.read_bytes(), None), ec.EllipticCurvePrivateKey)
    assert (p.ca_key.stat().st_mode & 0o777) == 0o600
    # The aggregation layer's client: its own CA (not the cluster's), the allowed name.
    front = _cert(p.front_proxy_client.cert)
    front.verify_directly_issued_by(_cert(p.front_proxy_ca))
    assert subject(front, NameOID.COMMON_NAME) == [pki.FRONT_PROXY_CLIENT]
    with pytest.raises(ValueError):
        front.verify_directly_issued_by(ca)

    # A tenant: a user certificate signed later by the same CA, its groups as O.
    tenant = pki.issue_user(p.ca_cert, p.ca_key, tmp_path / "users", "alice", ["team-b", "devs"])
    cert = _cert(tenant.cert)
    cert.verify_directly_issued_by(ca)
    assert subject(cert, NameOID.COMMON_NAME) == ["alice"]
    assert subject(cert, NameOID.ORGANIZATION_NAME) == ["team-b", "devs"]
    assert (tenant.key.stat().st_mode & 0o777) == 0o600


def test_pki_ca_and_leaf_constraints_and_key_usages(tmp_path: Path) -> None:
    """A CA may sign certificates and CRLs, a leaf may not; a leaf enciphers keys (TLS)."""
    p = pki.generate(tmp_path, ["127.0.0.1"])

    def usages(cert: x509.Certificate) -> tuple[bool, set[str]]:
        basic = cert.extensions.get_extension_for_class(x509.BasicConstraints)
        usage = cert.extensions.get_extension_for_class(x509.KeyUsage)
        assert basic.critical and usage.critical
        names = ("digital_signature", "key_encipherment", "key_cert_sign", "crl_sign")
        extra = ("content_commitment", "data_encipherment", "key_agreement")
        assert not any(getattr(usage.value, n) for n in extra)
        return basic.value.ca, {n for n in names if getattr(usage.value, n)}

    ca = {"digital_signature", "key_cert_sign", "crl_sign"}
    leaf = {"digital_signature", "key_encipherment"}
    assert usages(_cert(p.ca_cert)) == (True, ca)
    assert usages(_cert(p.front_proxy_ca)) == (True, ca)
    for cert in (p.apiserver_cert, p.admin.cert, p.front_proxy_client.cert):
        assert usages(_cert(cert)) == (False, leaf)
    server, _ = pki.issue_server(p.ca_cert, p.ca_key, tmp_path / "reg", "registry", ["10.0.0.1"])
    assert usages(_cert(server)) == (False, leaf)


def test_podnet_for_index() -> None:
    net = podnet.PodNetwork.for_index(12)
    assert (net.cidr, net.gateway) == ("10.244.12.0/24", "10.244.12.1")
    for bad in (0, 255):
        with pytest.raises(ValueError, match=r"1\.\.254"):
            podnet.PodNetwork.for_index(bad)


def test_podnet_reservations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPS_PODNET_DIR", str(tmp_path / "nets"))
    monkeypatch.setattr(podnet, "host_networks_in_use", lambda: {1})
    a = podnet.reserve(os.getpid(), tmp_path / "a")
    b = podnet.reserve(os.getpid(), tmp_path / "b")
    assert a.index != b.index and 1 not in (a.index, b.index)

    # A reservation whose owner has exited is stale and handed out again.
    dead = subprocess.Popen(["true"])
    dead.wait()
    podnet.transfer(a, dead.pid, tmp_path / "a")
    c = podnet.reserve(os.getpid(), tmp_path / "c")
    assert c.index == a.index

    # Only the cluster that holds a reservation releases it.
    podnet.release(b, tmp_path / "not-b")
    assert (tmp_path / "nets" / str(b.index)).exists()
    podnet.release(b, tmp_path / "b")
    assert not (tmp_path / "nets" / str(b.index)).exists()


def _fake_binaries(directory: Path, names: tuple[str, ...]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        exe = directory / name
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)


def test_find_binaries_from_kubebuilder_assets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assets = tmp_path / "assets"
    _fake_binaries(assets, binaries.CONTROL_PLANE_BINARIES)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    monkeypatch.setenv("SPS_CONTROLPLANE_CACHE", str(tmp_path / "empty-cache"))
    found = binaries.find_binaries(build=False)
    assert found.kube_apiserver == assets / "kube-apiserver"
    assert found.path_dirs()[0] == assets  # kubectl's directory comes first on PATH


def test_find_binaries_names_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assets = tmp_path / "assets"
    _fake_binaries(assets, ("etcd", "kube-apiserver", "kubectl"))
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    monkeypatch.setenv("SPS_CONTROLPLANE_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(binaries.BinariesError, match="kube-controller-manager, kube-scheduler"):
        binaries.find_binaries(build=False)


def test_cache_dir_matches_build_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """build.sh and the Python side agree on the version-keyed cache directory."""
    assets = tmp_path / "assets"
    _fake_binaries(assets, binaries.CONTROL_PLANE_BINARIES + binaries.OPTIONAL_BINARIES)
    # Everything is in KUBEBUILDER_ASSETS, so build.sh builds nothing and just prints the key.
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    monkeypatch.setenv("SPS_CONTROLPLANE_CACHE", str(tmp_path))
    script = binaries.recipe_dir() / "build.sh"
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True)
    printed = Path(out.stdout.strip())
    assert printed == binaries.cache_dir()
    assert printed.name.startswith("k8s-v1.") and "-etcd-v3." in printed.name
    assert "-helm-v" in printed.name


def test_kubeconfig_embeds_credentials(tmp_path: Path) -> None:
    p = pki.generate(tmp_path, ["127.0.0.1"])
    doc = yaml.safe_load(
        kubeconfig_yaml("https://127.0.0.1:6443", p.ca_cert, p.admin.cert, p.admin.key, "admin")
    )
    cluster = doc["clusters"][0]["cluster"]
    assert cluster["server"] == "https://127.0.0.1:6443"
    assert base64.b64decode(cluster["certificate-authority-data"]) == p.ca_cert.read_bytes()
    user = doc["users"][0]["user"]
    assert base64.b64decode(user["client-key-data"]) == p.admin.key.read_bytes()
    assert doc["current-context"] == doc["contexts"][0]["name"]


def test_cli_parser_has_no_node_flags_any_more(capsys: pytest.CaptureFixture[str]) -> None:
    """Nodes are the test bed's (`sps-testbed up --node`); the control plane has none."""
    assert build_parser().parse_args(["up"]).command == "up"
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["up", "--node", "a=NVIDIA-H200:4"])
    assert exit_info.value.code == 2


def test_fixture_fails_not_skips_without_binaries(tmp_path: Path) -> None:
    """No binaries and no Go to build them: a test needing the cluster errors, never skips."""
    (tmp_path / "test_inner.py").write_text("def test_needs_cluster(k8s_cluster):\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k not in ("KUBEBUILDER_ASSETS", "PYTEST_ADDOPTS")}
    env["SPS_CONTROLPLANE_CACHE"] = str(tmp_path / "empty-cache")
    env["PATH"] = "/usr/bin:/bin"  # no go
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            os.devnull,
            "--rootdir",
            str(tmp_path),
            # The plugin comes from its entry point (installing sps-testbed is enough).
            "-p",
            "no:cacheprovider",
            "-rA",
            str(tmp_path / "test_inner.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 error" in proc.stdout and "skipped" not in proc.stdout
    assert "control-plane binaries unavailable" in proc.stdout
    assert "`go` is not on PATH" in proc.stdout


def test_failure_report_names_a_crashed_component(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from sps_testbed.controlplane import ClusterRecord, ControlPlane
    from sps_testbed.controlplane_fixtures import K8sCluster, _failure_sections

    dead = subprocess.Popen(["true"])
    dead.wait()
    cp = ControlPlane(tmp_path)
    cp.record = ClusterRecord(
        state_dir=str(tmp_path),
        server="https://127.0.0.1:1",
        api_server_port=1,
        etcd_port=2,
        etcd_peer_port=3,
        controller_manager_port=4,
        scheduler_port=5,
        pod_network_index=9,
        pod_cidr="10.244.9.0/24",
        gateway="10.244.9.1",
        path_dirs=[],
        pids={"etcd": dead.pid, "kube-apiserver": os.getpid()},
    )
    cp.logs_dir.mkdir()
    (cp.logs_dir / "etcd.log").write_text("starting\npanic: database file is corrupt\n")
    fake = Path("/nonexistent")
    cluster = K8sCluster(cp, binaries.Binaries(fake, fake, fake, fake, fake, None), 0.0)
    sections = dict(_failure_sections(SimpleNamespace(funcargs={"k8s_cluster": cluster})))  # type: ignore[arg-type]
    assert sections == {"etcd is not running": "starting\npanic: database file is corrupt"}


@pytest.mark.parametrize(
    ("command", "stdout", "stderr", "code"),
    [
        ("down", "", "; nothing to stop\n", 0),
        ("env", "", "; run `sps-testbed controlplane up`\n", 1),
        ("status", "not running: ", "", 1),
    ],
)
def test_controlplane_cli_without_a_cluster_says_so(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    stdout: str,
    stderr: str,
    code: int,
) -> None:
    """A state directory with no control plane: each command says why, where, with its code."""
    from sps_testbed.controlplane_cli import main

    assert main([command, "--state-dir", str(tmp_path / "none")]) == code
    out, err = capsys.readouterr()
    assert (out.startswith(stdout) if stdout else out == "") and (
        err.endswith(stderr) if stderr else err == ""
    )
    assert str(tmp_path / "none") in out + err
