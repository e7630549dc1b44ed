"""Deterministic names of everything the operator creates (pure).

Names are derived from inputs, never from time or randomness, so an operator that
restarts after creating a Job finds it again instead of creating a second one. Every
derived name hashes the profile's UID in: two profiles (or a profile deleted and created
again under the same name) never share a Job, a result, RBAC or a table ConfigMap. The
CRD bounds profile names to `api.limits.MAX_PROFILE_NAME` characters, so every name here is valid
(a Job's pods add `-xxxxx` and the Job name becomes a ≤ 63-character label value).
"""

from __future__ import annotations

import re

from sps_operator.api.hashing import digest
from sps_operator.api.kinds import RunPhase


def run_name(profile: str, uid: str, gpu_product: str, fingerprint: str, nonce: str) -> str:
    """`<profile>-<hash>`: one run per (profile UID, GPU product, fingerprint, nonce)."""
    return f"{profile}-{digest(uid, gpu_product, fingerprint, nonce)}"


def job_name(run: str, phase: RunPhase) -> str:
    return run if phase == RunPhase.DIAGONAL else f"{run}-p2"


def result_config_map(run: str, phase: RunPhase) -> str:
    return f"{run}-result" if phase == RunPhase.DIAGONAL else f"{run}-p2-result"


def seed_table_config_map(run: str) -> str:
    return f"{run}-seed"


def profiler_account(run: str) -> str:
    return f"{run}-profiler"


def table_config_map(
    profile: str, uid: str, gpu_product: str, fingerprint: str, table_hash: str
) -> str:
    """One ConfigMap per table AND the server it was measured for: two servers can get
    byte-identical tables, and each ConfigMap is labelled for exactly one."""
    return f"{profile}-table-{digest(uid, gpu_product, fingerprint, table_hash)}"


_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9._-]")


def label_value(value: str) -> str:
    """A string made safe as a label value (≤ 63 chars, alphanumeric at both ends)."""
    return _LABEL_VALUE_BAD.sub("_", value)[:63].strip("._-")


def group_service(job: str) -> str:
    """The headless Service of a multi-node clone's Job (its pods' subdomain; a Service
    name must start with a letter)."""
    return f"sps-{job}"
