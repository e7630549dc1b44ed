"""kubectl's connection flags, as `kubectl sps` takes them (`--server`, `--token`, `--as`,
`--request-timeout`, `--certificate-authority`, `--insecure-skip-tls-verify`, beside
`--kubeconfig` and `--context`): parsed here without I/O, applied by plugin/client.py."""

from __future__ import annotations

import re
from dataclasses import dataclass

# kubectl's --request-timeout: "0" (no timeout), a bare number of seconds, or a Go
# duration of h, m, s (and ms) parts, e.g. 1m30s.
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
MAX_REQUEST_TIMEOUT = 24 * 3600.0


def parse_request_timeout(text: str) -> float | None:
    """Seconds to wait for one API request; None for no timeout ("0", kubectl's default).
    ValueError says what kubectl would accept."""
    value = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        seconds = float(value)
    else:
        parts = _PART.findall(value)
        if not value or not parts or "".join(n + u for n, u in parts) != value:
            raise ValueError(
                f"--request-timeout {text!r}: a number of seconds or a duration like 30s, 1m30s, 2h"
            )
        seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    if seconds > MAX_REQUEST_TIMEOUT:
        raise ValueError(f"--request-timeout {text!r}: at most 24h")
    return None if seconds == 0 else seconds


@dataclass(frozen=True)
class ConnectionFlags:
    """What the user passed; None or False leaves the kubeconfig's value."""

    kubeconfig: str | None = None
    context: str | None = None
    server: str | None = None
    token: str | None = None
    impersonate: str | None = None
    certificate_authority: str | None = None
    insecure_skip_tls_verify: bool = False
    request_timeout: float | None = None
