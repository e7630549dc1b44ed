"""Certificates and keys for the local control plane.

One CA signs the API server's serving certificate and the client certificates
of the admin, the controller-manager and the scheduler; a separate RSA key signs
service-account tokens. A second CA, the front proxy's (as kubeadm makes it), signs
the client certificate the API server shows to aggregated API servers (Kueue's
visibility API), which trust it for the user it forwards in the request headers.
Everything is generated fresh per cluster (ECDSA P-256: fast to generate, accepted by
every component).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=365)

# DNS names pods and clients may use for the API server.
API_SERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class ClientCert:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca_cert: Path
    ca_key: Path
    apiserver_cert: Path
    apiserver_key: Path
    sa_key: Path
    sa_pub: Path
    admin: ClientCert
    controller_manager: ClientCert
    scheduler: ClientCert
    front_proxy_ca: Path
    front_proxy_client: ClientCert


# The name aggregated API servers accept a forwarded request from (--requestheader-allowed-names).
FRONT_PROXY_CLIENT = "front-proxy-client"


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, private: bool = False) -> Path:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)
    return path


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    """CN is the user Kubernetes sees, each O one of its groups."""
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    return x509.Name(attrs)


# Key usages (x509.KeyUsage's flags): a CA signs certificates and CRLs, a leaf signs and
# enciphers keys (TLS).
_CA_USAGE = frozenset({"digital_signature", "key_cert_sign", "crl_sign"})
_LEAF_USAGE = frozenset({"digital_signature", "key_encipherment"})


_KEY_USAGE_FLAGS = (
    "digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
    "key_agreement", "key_cert_sign", "crl_sign", "encipher_only", "decipher_only",
)  # fmt: skip


def _key_usage(granted: frozenset[str]) -> x509.KeyUsage:
    return x509.KeyUsage(**{flag: flag in granted for flag in _KEY_USAGE_FLAGS})


def _certificate(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, *, ca: bool
) -> x509.CertificateBuilder:
    """What every certificate here has: valid from five minutes ago (clock skew between the
    components) for a year, and the basic constraints and key usage of a CA or of a leaf."""
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(_key_usage(_CA_USAGE if ca else _LEAF_USAGE), critical=True)
    )


def _issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    usage: list[x509.ObjectIdentifier],
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    builder = (
        _certificate(subject, ca_cert.subject, key, ca=False)
        .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def api_server_sans(ips: list[str]) -> list[x509.GeneralName]:
    """Subject alternative names of the serving certificate: fixed DNS names plus `ips`."""
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in API_SERVER_DNS_NAMES]
    seen: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
    for ip in ips:
        addr = ipaddress.ip_address(ip)
        if addr not in seen:
            seen.add(addr)
            names.append(x509.IPAddress(addr))
    return names


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    cert = (
        _certificate(name, name, key, ca=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def generate(directory: Path, api_server_ips: list[str]) -> Pki:
    """Write fresh CAs, serving and client certificates and the SA signing key."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = _ca("sps-dev-cluster-ca")
    pem = serialization.Encoding.PEM
    ca_cert_path = _write(directory / "ca.crt", ca_cert.public_bytes(pem))
    ca_key_path = _write(directory / "ca.key", _key_pem(ca_key), private=True)

    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = _issue(
        _name("kube-apiserver"),
        server_key,
        ca_cert,
        ca_key,
        [ExtendedKeyUsageOID.SERVER_AUTH],
        api_server_sans(api_server_ips),
    )
    apiserver_cert = _write(directory / "apiserver.crt", server_cert.public_bytes(pem))
    apiserver_key = _write(directory / "apiserver.key", _key_pem(server_key), private=True)

    def client(
        stem: str,
        user: str,
        group: str | None,
        ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] = (ca_cert, ca_key),
    ) -> ClientCert:
        return _client_cert(ca[0], ca[1], directory, stem, user, [group] if group else [])

    # Service-account tokens are RS256 JWTs: the signing key must be RSA.
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_key = _write(directory / "sa.key", _key_pem(sa), private=True)
    sa_pub = _write(
        directory / "sa.pub",
        sa.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo),
    )
    front_proxy = _ca("sps-dev-front-proxy-ca")
    front_proxy_ca = _write(directory / "front-proxy-ca.crt", front_proxy[0].public_bytes(pem))
    return Pki(
        directory=directory,
        ca_cert=ca_cert_path,
        ca_key=ca_key_path,
        apiserver_cert=apiserver_cert,
        apiserver_key=apiserver_key,
        sa_key=sa_key,
        sa_pub=sa_pub,
        admin=client("admin", "kubernetes-admin", "system:masters"),
        controller_manager=client("controller-manager", "system:kube-controller-manager", None),
        scheduler=client("scheduler", "system:kube-scheduler", None),
        front_proxy_ca=front_proxy_ca,
        front_proxy_client=client("front-proxy-client", FRONT_PROXY_CLIENT, None, front_proxy),
    )


def _client_cert(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    directory: Path,
    stem: str,
    user: str,
    groups: Sequence[str],
) -> ClientCert:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _issue(_name(user, groups), key, ca_cert, ca_key, [ExtendedKeyUsageOID.CLIENT_AUTH])
    pem = serialization.Encoding.PEM
    return ClientCert(
        cert=_write(directory / f"{stem}.crt", cert.public_bytes(pem)),
        key=_write(directory / f"{stem}.key", _key_pem(key), private=True),
    )


def _load_ca(ca_cert: Path, ca_key: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A CA this module wrote (`generate`): its certificate and EC key."""
    cert = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    key = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{ca_key}: not the EC key this module generates for a CA")
    return cert, key


def issue_user(
    ca_cert: Path, ca_key: Path, directory: Path, user: str, groups: Sequence[str] = ()
) -> ClientCert:
    """A client certificate for `user` (in `groups`) signed by an existing CA: a real
    user the API server authenticates by its certificate, whose rights are whatever RBAC
    binds to that name, nothing else. Written to `directory/<user>.crt|.key`."""
    cert, key = _load_ca(ca_cert, ca_key)
    directory.mkdir(parents=True, exist_ok=True)
    return _client_cert(cert, key, directory, user, user, groups)


def issue_server(
    ca_cert: Path, ca_key: Path, directory: Path, stem: str, ips: Sequence[str]
) -> tuple[Path, Path]:
    """A serving certificate for `ips` signed by an existing CA (the bed's registry, whose
    clients trust that CA). Written to `directory/<stem>.crt|.key`; returns both paths."""
    cert, key = _load_ca(ca_cert, ca_key)
    directory.mkdir(parents=True, exist_ok=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    issued = _issue(_name(stem), server_key, cert, key, [ExtendedKeyUsageOID.SERVER_AUTH], sans)
    pem = serialization.Encoding.PEM
    return (
        _write(directory / f"{stem}.crt", issued.public_bytes(pem)),
        _write(directory / f"{stem}.key", _key_pem(server_key), private=True),
    )
