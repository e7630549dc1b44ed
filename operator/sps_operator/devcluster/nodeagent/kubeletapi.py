"""The slice of the kubelet API that `kubectl logs` uses: GET /containerLogs/{ns}/{pod}/{c}.

One HTTPS server for all simulated nodes (they share the gateway address). The API server
does not verify kubelet certificates here, so a self-signed one is enough; nothing is
served that the agent's state directory does not already hold.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from .logs import LogQuery, find_log_file, tail_bytes

log = logging.getLogger(__name__)
IsRunning = Callable[[str, str, str], bool]  # (namespace, pod, container) -> still running


def self_signed(host: str, directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sps-node-agent")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "kubelet.crt", directory / "kubelet.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path


class KubeletApi:
    def __init__(self, host: str, state_dir: Path, is_running: IsRunning) -> None:
        self.state_dir = state_dir
        self.is_running = is_running
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                log.debug("kubelet api: " + format, *args)

            def do_GET(self) -> None:
                api.handle(self)

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = self_signed(host, Path(tmp))
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert, key)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port: int = self.server.server_address[1]
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="kubelet api", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def handle(self, req: BaseHTTPRequestHandler) -> None:
        url = urlsplit(req.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._reply(req, 404, b"not found: only /containerLogs/{ns}/{pod}/{container}\n")
            return
        _, namespace, pod, container = parts
        query = LogQuery.from_params(parse_qs(url.query))
        path = find_log_file(self.state_dir, namespace, pod, container, query.previous)
        if path is None:
            what = "previous terminated container" if query.previous else "container"
            msg = f'{what} "{container}" in pod "{pod}" not found\n'
            self._reply(req, 404, msg.encode())
            return
        data = tail_bytes(path.read_bytes(), query.tail_lines, query.limit_bytes)
        if not query.follow:
            self._reply(req, 200, data)
            return
        req.send_response(200)
        req.send_header("Content-Type", "text/plain")
        req.send_header("Transfer-Encoding", "chunked")
        req.end_headers()
        offset = path.stat().st_size
        try:
            self._chunk(req, data)
            while True:
                size = path.stat().st_size
                if size > offset:
                    with open(path, "rb") as f:
                        f.seek(offset)
                        self._chunk(req, f.read(size - offset))
                    offset = size
                elif not self.is_running(namespace, pod, container):
                    break
                time.sleep(0.2)
            req.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass

    @staticmethod
    def _chunk(req: BaseHTTPRequestHandler, data: bytes) -> None:
        if data:
            req.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            req.wfile.flush()

    @staticmethod
    def _reply(req: BaseHTTPRequestHandler, code: int, body: bytes) -> None:
        req.send_response(code)
        req.send_header("Content-Type", "text/plain")
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)
