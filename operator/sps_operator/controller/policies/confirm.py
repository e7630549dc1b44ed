"""What the serving servers confirm of the table their pods carry (pure, no I/O).

"Live" starts from what only the cluster writes: the template reads the operator's table,
the rollout completed, every ready pod carries the table's hash. A pod spec cannot show
what the server did at start: a wrapper that replaced the table's path, a file mounted over
it, a setting the server resolved itself. Where the server says it, its `/server_info` is
compared with the table: SGLang reports the table's path
(`speculative_dspark_sps_table_path`; no hash of the bytes), the simulator also the hash of
the bytes it loaded (`sps_table.sha256`), and newer SGLang what it resolved (`world_size`,
`disaggregation_mode`, its environment with SGLANG_EXPOSE_OWN_ENV_VARS=1), which
`resolved_drift` compares with what the table's profiling clone reported.

Every answer is untrusted (the tenant runs the server): read with the bounded parser,
every field typed and cut, and a server that says nothing, or cannot be reached, leaves
the target judged as before: status says it could not confirm, which is not an error.
"""

from __future__ import annotations

import ipaddress
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sps_operator.api.endpoints import forbidden_url_address
from sps_operator.api.resolved import clean_resolved, resolved_drift, resolved_report
from sps_operator.api.untrusted_json import read_json_object, readable
from sps_operator.controller.policies.placement import PodInfo

# A serving server's /server_info without the profiler's record ring is a few KiB; with
# the ring enabled (SGLANG_DSPARK_ENABLE_SPS_RECORD on a serving server) it grows to tens
# of MB, which the operator does not read.
MAX_SERVER_INFO_BYTES = 1024 * 1024
# The bound of one read: one deadline from the connect to the answer's last byte.
READ_TIMEOUT_SECONDS = 2.0
# Servers read per pass per profile (the rest are read in later passes: a steady server is
# read once, its answer kept by pod UID), and at once by the whole process. A pass waits
# for answers at most `WAIT_PER_PASS_SECONDS` in all (a healthy server answers in
# milliseconds); a read still going then answers the next pass, so servers that cannot be
# reached (a namespace that denies ingress) never hold the operator's pass threads.
READS_PER_PASS = 4
WAIT_PER_PASS_SECONDS = 1.0
MAX_CONCURRENT_READS = 8
# One namespace's share of those: a tenant's silent servers (each holding a read for its
# timeout) can take at most this many, so another namespace's pass always gets a read.
MAX_READS_PER_NAMESPACE = READS_PER_PASS
# A server that could not be reached is asked again after this long, not at every pass.
RETRY_UNCONFIRMED_SECONDS = 120.0
# How soon a profile whose servers are not all read yet looks again.
NEXT_READS_SECONDS = 5.0
MAX_PATH_CHARS = 1024
MAX_HASH_CHARS = 64
MAX_WHY_CHARS = 200
# How many pods a status line names.
MAX_NAMED = 3
TABLE_PATH_FIELD = "speculative_dspark_sps_table_path"
SIM_TABLE_FIELD = "sps_table"  # the simulator's: what it loaded, with the bytes' hash
# LeaderWorkerSet: a pod's index in its group; only the leader (0) serves HTTP.
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"

_UNSET = object()


@dataclass(frozen=True)
class ServerReport:
    """What one server's /server_info says of its table and of what it resolved."""

    table_path_reported: bool = False  # the field is there (None: it loaded no table)
    table_path: str | None = None
    table_loaded: bool | None = None  # the simulator's word
    table_hash: str | None = None  # the simulator's word: the loaded bytes' hash
    resolved: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NoReport:
    """The server did not answer with a report: why (a phrase after "its server")."""

    why: str


Answer = ServerReport | NoReport


def cut(text: str, limit: int = MAX_WHY_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_server_info(text: str) -> Answer:
    """A /server_info answer as the operator reads it; never raises."""
    info = read_json_object(text, max_bytes=MAX_SERVER_INFO_BYTES)
    if not readable(info):
        return NoReport(cut(f"answered /server_info with a body that {info.why}"))
    states = info.get("internal_states")
    state0 = states[0] if isinstance(states, list) and states else {}
    state0 = state0 if isinstance(state0, Mapping) else {}
    path: Any = info.get(TABLE_PATH_FIELD, state0.get(TABLE_PATH_FIELD, _UNSET))
    reported = path is None or isinstance(path, str)
    sim = info.get(SIM_TABLE_FIELD)
    sim = sim if isinstance(sim, Mapping) else {}
    loaded = sim.get("loaded")
    digest = sim.get("sha256")
    digest = digest if isinstance(digest, str) and 0 < len(digest) <= MAX_HASH_CHARS else None
    return ServerReport(
        table_path_reported=reported,
        table_path=cut(path, MAX_PATH_CHARS) if isinstance(path, str) else None,
        table_loaded=loaded if isinstance(loaded, bool) else None,
        table_hash=digest,
        resolved=resolved_report(info),
    )


# --------------------------------------------------------------------------- which pods


@dataclass(frozen=True)
class Readable:
    """A pod whose server the operator may ask: by UID, at its pod IP and the server's port."""

    pod: str
    uid: str
    ip: str
    port: int


def serving_pods(
    pods: Iterable[PodInfo], table_hash: str, port: int
) -> tuple[list[Readable], list[tuple[str, str]]]:
    """Of a target's pods, the ready ones that carry `table_hash` and serve HTTP (a
    LeaderWorkerSet's workers do not: the leader answers for its group): those the
    operator may ask, and those it may not, with why."""
    readable_pods: list[Readable] = []
    skipped: list[tuple[str, str]] = []
    for pod in pods:
        if not pod.ready or pod.deleting or pod.table_hash != table_hash:
            continue
        if pod.labels.get(LWS_WORKER_INDEX, "0") != "0":
            continue
        if pod.host_network:
            skipped.append((pod.name, "uses its node's network: the operator calls no node"))
        elif not pod.uid or not pod.ip:
            skipped.append((pod.name, "has no pod IP yet"))
        elif not _is_ip_address(pod.ip):
            # forbidden_url_address passes any name; a pod's address is an IP, never a
            # host the operator would resolve and call (the API server, the metadata).
            skipped.append((pod.name, cut(f"has pod IP {pod.ip!r}, which is not an IP address")))
        elif (why := forbidden_url_address(pod.ip)) is not None:
            skipped.append((pod.name, cut(f"has pod IP {why}")))
        else:
            readable_pods.append(Readable(pod.name, pod.uid, pod.ip, port))
    return readable_pods, skipped


def _is_ip_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def to_read(
    pods: Sequence[Readable], known: Mapping[str, Answer], in_flight: frozenset[str], budget: int
) -> list[Readable]:
    """The pods to ask this pass: those with no answer kept and none on its way, at most
    `budget` (the rest in later passes)."""
    fresh = [p for p in pods if p.uid not in known and p.uid not in in_flight]
    return fresh[: max(budget, 0)]


# --------------------------------------------------------------------------- the verdict


def recorded_resolved(meta: Any) -> Mapping[str, Any] | None:
    """What the table's profiling clone reported it resolved, from the table ConfigMap's
    meta.json (read by the bounded parser: `manifest.server.resolved`); None when the
    table has no record (an older SGLang, or a table from before the record)."""
    if not readable(meta) or not isinstance(meta, Mapping):
        return None
    manifest = meta.get("manifest")
    server = manifest.get("server") if isinstance(manifest, Mapping) else None
    resolved = server.get("resolved") if isinstance(server, Mapping) else None
    cleaned = clean_resolved(resolved)
    return cleaned or None


@dataclass(frozen=True)
class PodVerdict:
    pod: str
    outcome: str  # CONFIRMED, OTHER_TABLE, DRIFT, UNCONFIRMED
    words: str = ""


CONFIRMED = "confirmed"
OTHER_TABLE = "other-table"
DRIFT = "drift"
UNCONFIRMED = "unconfirmed"


def _same_path(a: str, b: str) -> bool:
    return posixpath.normpath(a) == posixpath.normpath(b)


def judge_pod(
    pod: str,
    answer: Answer,
    table_path: str,
    table_hash: str,
    recorded: Mapping[str, Any] | None,
) -> PodVerdict:
    """One server's answer against the table its pod carries and the clone's record."""
    if isinstance(answer, NoReport):
        return PodVerdict(pod, UNCONFIRMED, answer.why)
    if answer.table_path_reported:
        if answer.table_path is None:
            return PodVerdict(pod, OTHER_TABLE, "its server reports no table path (no table)")
        if not _same_path(answer.table_path, table_path):
            return PodVerdict(
                pod,
                OTHER_TABLE,
                f"its server reports table path {answer.table_path!r}, not {table_path!r}",
            )
    if answer.table_loaded is False:
        return PodVerdict(pod, OTHER_TABLE, "its server reports it loaded no table")
    if answer.table_hash is not None and answer.table_hash != table_hash:
        return PodVerdict(
            pod,
            OTHER_TABLE,
            f"its server loaded table bytes with hash {answer.table_hash!r}, not {table_hash} "
            "(a file mounted or written over the table?)",
        )
    drift = resolved_drift(recorded, answer.resolved) if recorded else []
    if drift:
        return PodVerdict(pod, DRIFT, "; ".join(drift))
    if not answer.table_path_reported and answer.table_hash is None:
        return PodVerdict(pod, UNCONFIRMED, "its /server_info reports no table path")
    return PodVerdict(pod, CONFIRMED)


@dataclass(frozen=True)
class Confirmation:
    """What a target's servers confirmed: `refusal` (OTHER_TABLE or DRIFT, and the
    words) makes it not Live; `line` is status' `servers`."""

    line: str
    refusal: tuple[str, str] | None = None
    pending: bool = False  # servers not asked, or not answered, yet: look again soon
    retry: bool = False  # a server did not answer: ask again when it is due


def _named(verdicts: Sequence[PodVerdict]) -> str:
    shown = "; ".join(f"pod {v.pod}: {v.words}" for v in verdicts[:MAX_NAMED])
    more = len(verdicts) - MAX_NAMED
    return shown + (f" (and {more} more)" if more > 0 else "")


def summarise(
    verdicts: Sequence[PodVerdict], skipped: Sequence[tuple[str, str]], unread: int
) -> Confirmation:
    """A target's verdicts in one status line, and whether they refuse Live."""
    total = len(verdicts) + len(skipped) + unread
    by = {o: [v for v in verdicts if v.outcome == o] for o in (CONFIRMED, OTHER_TABLE, DRIFT)}
    parts = [f"{len(by[CONFIRMED])} of {total} serving pods' servers confirm the table"]
    if by[OTHER_TABLE]:
        words = _named(by[OTHER_TABLE])
        return Confirmation(f"{parts[0]}; {words}", (OTHER_TABLE, words))
    if by[DRIFT]:
        words = _named(by[DRIFT])
        return Confirmation(f"{parts[0]}; {words}", (DRIFT, words))
    unanswered = [v for v in verdicts if v.outcome == UNCONFIRMED]
    silent = unanswered + [PodVerdict(name, UNCONFIRMED, why) for name, why in skipped]
    if silent:
        parts.append(f"could not confirm (judged by its pods alone): {_named(silent)}")
    if unread:
        parts.append(f"{unread} not answered yet")
    return Confirmation("; ".join(parts), None, pending=unread > 0, retry=bool(unanswered))
