"""Addresses a profiler never talks to (pure), shared by the operator's check of
`spec.server.url` and the profiler's check of every connection it opens.

A profiling Job runs in the profile author's namespace and fetches the URL the author
wrote (`server.source: External`). Cloud metadata services answer on link-local or fixed
platform addresses with instance credentials; no DSpark server lives there. The operator
refuses such a URL before any Job exists, and the profiler refuses a connection whose
peer is such an address whatever name resolved to it (an ExternalName Service, a DNS
record that changes between the check and the connect).
"""

from __future__ import annotations

import ipaddress
import socket

# Platform endpoints outside the link-local range: Alibaba Cloud's metadata service, Azure's
# WireServer, AWS's IPv6 instance metadata service.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("100.100.100.200", "168.63.129.16", "fd00:ec2::254")
)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address `text` names, in any form a resolver takes for one: also the
    shorthand, octal, hex and decimal IPv4 forms (`2852039166`, `0251.0376.0251.0376`,
    `169.254.43518`) that inet_aton accepts and ipaddress does not."""
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])  # an IPv6 zone index is not the address
    except ValueError:
        if not text or not text.isascii() or len(text) > 64:
            return None
        try:
            ip = ipaddress.IPv4Address(socket.inet_aton(text))
        except (OSError, ValueError):
            return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def forbidden_peer(text: str) -> str | None:
    """Why a profiler must not connect to the IP address `text` (None: it may). Loopback
    is allowed: a cloned server listens on 127.0.0.1 in the Job's own pod."""
    ip = _address(text)
    if ip is None:
        return None
    if ip.is_link_local:
        return f"{ip} is a link-local address (where cloud metadata services answer)"
    if ip in METADATA_ADDRESSES:
        return f"{ip} is a cloud platform's metadata address"
    if ip.is_multicast or ip.is_unspecified or ip == ipaddress.IPv4Address("255.255.255.255"):
        return f"{ip} is not a unicast address"
    return None


def forbidden_url_address(text: str) -> str | None:
    """Why an External server URL may not name the IP address `text` (None: it may, or it
    is not an IP address): what a profiler may never reach, and loopback (the Job's own
    pod, where no External server runs)."""
    ip = _address(text)
    if ip is None:
        return None
    if ip.is_loopback:
        return f"{ip} is a loopback address (the profiling Job's own pod)"
    return forbidden_peer(text)
