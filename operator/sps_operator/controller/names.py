"""Deterministic names of everything the operator creates (pure).

Names are derived from inputs, never from time or randomness, so an operator that
restarts after creating a Job finds it again instead of creating a second one.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from sps_operator.constants import LABEL_PREFIX

PROFILE_PREFIX_MAX = 40  # leaves room for "-<10 hex>-result" within 63 characters

LABEL_PROFILE = f"{LABEL_PREFIX}/profile"
LABEL_GPU = f"{LABEL_PREFIX}/gpu-product"
LABEL_FINGERPRINT = f"{LABEL_PREFIX}/fingerprint"
LABEL_TABLE_HASH = f"{LABEL_PREFIX}/table-hash"
LABEL_COMPONENT = f"{LABEL_PREFIX}/component"
LABEL_RUN = f"{LABEL_PREFIX}/run"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "sps-operator"

ANNOTATION_TABLE_HASH = f"{LABEL_PREFIX}/table-hash"
ANNOTATION_TABLE = f"{LABEL_PREFIX}/table"
ANNOTATION_REPROFILE = f"{LABEL_PREFIX}/reprofile"
LABEL_PREFIX_RELEASED = f"{LABEL_PREFIX}/released"

COMPONENT_TABLE = "table"
COMPONENT_SEED = "seed-table"
COMPONENT_RESULT = "result"
COMPONENT_JOB = "profiling-job"
COMPONENT_RBAC = "profiler-rbac"

TABLE_KEY = "table.json"
META_KEY = "meta.json"


def digest(*parts: Any, length: int = 10) -> str:
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def _prefix(profile: str) -> str:
    return profile[:PROFILE_PREFIX_MAX].rstrip("-.")


def run_name(profile: str, gpu_product: str, fingerprint: str, nonce: str) -> str:
    """`<profile>-<hash>`: one run per (GPU product, fingerprint, trigger nonce)."""
    return f"{_prefix(profile)}-{digest(gpu_product, fingerprint, nonce)}"


def job_name(run: str, phase: int) -> str:
    return run if phase == 1 else f"{run}-p2"


def result_config_map(run: str, phase: int) -> str:
    return f"{run}-result" if phase == 1 else f"{run}-p2-result"


def seed_table_config_map(run: str) -> str:
    return f"{run}-seed"


def profiler_account(run: str) -> str:
    return f"{run}-profiler"


def table_config_map(profile: str, table_hash: str) -> str:
    return f"{_prefix(profile)}-table-{table_hash[:10]}"


_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9._-]")


def label_value(value: str) -> str:
    """A string made safe as a label value (≤ 63 chars, alphanumeric at both ends)."""
    cleaned = _LABEL_VALUE_BAD.sub("_", value)[:63].strip("._-")
    return cleaned
