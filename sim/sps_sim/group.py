"""A multi-node group of simulated servers: `--nnodes N --node-rank R --dist-init-addr H:P`.

SGLang across nodes: one process per node, every rank loads the SPS table from its own
filesystem at start (a missing file fails that rank), rank 0 serves HTTP once the group
has formed, and ranks that load different tables break the group (reported: the workers
fail an assertion, the head hangs). The simulator plays the group on a TCP rendezvous at
`--dist-init-addr`: rank 0 listens on its port, every other rank connects and says which table it
loaded; rank 0 checks that every rank joined once, with the same group size and the same
table bytes (or all none), and answers each. A group that does not form, or whose ranks
loaded different tables, fails at start on every rank with the reason. Then rank 0 serves
HTTP and the workers stay until rank 0 goes (and exit non-zero, as a worker whose head
died does).

Step cost grows with the group: collectives cross nodes, `group_preset` scales the decode
costs by `1 + GROUP_OVERHEAD_PER_NODE · (nnodes - 1)`. A single node is unchanged.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, replace
from typing import Any

from sps_sim.costmodel import CostPreset

log = logging.getLogger("sps_sim.group")

# Step time added per extra node of the group, relative to one node's.
GROUP_OVERHEAD_PER_NODE = 0.15
DEFAULT_JOIN_TIMEOUT_S = 300.0
MAX_HELLO_BYTES = 4096
MAX_NNODES = 64


class GroupError(RuntimeError):
    """The group did not form: the message is printed and the rank exits non-zero."""


@dataclass(frozen=True)
class GroupConfig:
    nnodes: int
    node_rank: int
    host: str
    port: int
    join_timeout_s: float = DEFAULT_JOIN_TIMEOUT_S

    @property
    def leader(self) -> bool:
        return self.node_rank == 0


def parse_group(
    nnodes: int, node_rank: int, dist_init_addr: str | None, join_timeout_s: float
) -> GroupConfig | None:
    """The group of a command line; None for a single node. ValueError says what is wrong."""
    if not 1 <= nnodes <= MAX_NNODES:
        raise ValueError(f"--nnodes must be between 1 and {MAX_NNODES}, got {nnodes}")
    if not 0 <= node_rank < nnodes:
        raise ValueError(f"--node-rank must be in [0, {nnodes - 1}], got {node_rank}")
    if nnodes == 1:
        return None
    if not dist_init_addr:
        raise ValueError("--nnodes > 1 needs --dist-init-addr HOST:PORT (rank 0's address)")
    host, sep, port = dist_init_addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--dist-init-addr must be HOST:PORT, got {dist_init_addr!r}")
    if join_timeout_s <= 0:
        raise ValueError("the group's join timeout must be positive")
    return GroupConfig(nnodes, node_rank, host.strip("[]"), int(port), join_timeout_s)


def group_preset(preset: CostPreset, nnodes: int) -> CostPreset:
    """The cost of a step on a group of `nnodes` nodes (the same preset for one)."""
    if nnodes <= 1:
        return preset
    factor = 1.0 + GROUP_OVERHEAD_PER_NODE * (nnodes - 1)
    return replace(
        preset,
        bias_s=preset.bias_s * factor,
        per_request_s=preset.per_request_s * factor,
        per_token_s=preset.per_token_s * factor,
        per_token_above_knee_s=preset.per_token_above_knee_s * factor,
        interaction_s=preset.interaction_s * factor,
    )


def group_server_args(
    group: GroupConfig | None, dist_init_addr: str | None, tp_size: int
) -> dict[str, Any]:
    """What newer SGLang reports of its layout in /server_info: `world_size` and
    `disaggregation_mode` from every server (what it resolved, which the operator compares
    with the profiling clone's record), and a group's node count, rank and address."""
    resolved = {"world_size": tp_size, "disaggregation_mode": "null"}
    if group is None:
        return resolved
    return {"nnodes": group.nnodes, "node_rank": group.node_rank,
            "dist_init_addr": dist_init_addr, **resolved}  # fmt: skip


def table_identity(table_info: dict[str, Any] | None) -> str:
    """What a rank loaded, compared across the group: the table's hash, or none."""
    if not table_info or not table_info.get("loaded"):
        return "none"
    return str(table_info.get("sha256") or "none")


def _mismatch(rank: int, theirs: str, ours: str) -> str:
    return (
        f"node rank {rank} loaded SPS table {theirs} but node rank 0 loaded {ours}: every "
        "rank of a group must load the same table bytes (--speculative-dspark-sps-table-path "
        "on every node), or verify lengths diverge across ranks"
    )


async def _read_json(reader: asyncio.StreamReader) -> dict[str, Any]:
    line = await reader.readline()
    if not line or len(line) > MAX_HELLO_BYTES:
        raise GroupError("a rank closed the group connection or sent an oversized message")
    data = json.loads(line)
    if not isinstance(data, dict):
        raise GroupError("a rank sent a malformed group message")
    return data


def _send(writer: asyncio.StreamWriter, data: dict[str, Any]) -> None:
    writer.write((json.dumps(data) + "\n").encode())


async def lead(group: GroupConfig, table: str) -> tuple[asyncio.Server, list[asyncio.StreamWriter]]:
    """Rank 0: wait for every other rank, check the group, answer each. Returns the
    rendezvous server and the workers' connections (held open while rank 0 serves: a
    worker exits when its connection closes); GroupError when the group does not form."""
    joined: dict[int, tuple[str, asyncio.StreamWriter]] = {}
    problems: list[str] = []
    complete = asyncio.Event()

    async def on_join(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            hello = await _read_json(reader)
            rank, nnodes = hello.get("node_rank"), hello.get("nnodes")
            if nnodes != group.nnodes:
                problems.append(f"node rank {rank} was started with --nnodes {nnodes}, "
                                f"node rank 0 with {group.nnodes}")  # fmt: skip
            elif not isinstance(rank, int) or not 0 < rank < group.nnodes or rank in joined:
                problems.append(f"a rank joined as node rank {rank!r}: taken or out of range")
            else:
                joined[rank] = (str(hello.get("table")), writer)
        except (GroupError, ValueError) as exc:
            problems.append(str(exc))
        if problems or len(joined) == group.nnodes - 1:
            complete.set()

    # Every interface, as torch's TCPStore on SGLang's rank 0 listens: the address given may
    # be rank 0's own DNS name (LWS_LEADER_ADDRESS), not resolvable yet when it starts.
    server = await asyncio.start_server(on_join, None, group.port)
    try:
        await asyncio.wait_for(complete.wait(), group.join_timeout_s)
    except TimeoutError:
        missing = sorted(set(range(1, group.nnodes)) - set(joined))
        problems.append(
            f"node ranks {missing} did not join {group.host}:{group.port} within "
            f"{group.join_timeout_s:g} s"
        )
    problems += [_mismatch(r, t, table) for r, (t, _) in sorted(joined.items()) if t != table]
    for _, writer in joined.values():
        _send(writer, {"ok": not problems, "error": "; ".join(problems)})
        await writer.drain()
    if problems:
        server.close()
        raise GroupError("; ".join(problems))
    log.info("sps-sim: all %d node ranks joined; node rank 0 serves HTTP", group.nnodes)
    return server, [writer for _, writer in joined.values()]


async def join(group: GroupConfig, table: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A worker: connect to rank 0 (retrying until the join timeout), say which table it
    loaded, and wait for rank 0's verdict. Returns the connection to watch (both ends:
    a StreamWriter that is collected closes the connection)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + group.join_timeout_s
    while True:
        try:
            reader, writer = await asyncio.open_connection(group.host, group.port)
            break
        except OSError:
            if loop.time() > deadline:
                raise GroupError(
                    f"node rank 0 at {group.host}:{group.port} did not answer within "
                    f"{group.join_timeout_s:g} s"
                ) from None
            await asyncio.sleep(0.2)
    _send(writer, {"node_rank": group.node_rank, "nnodes": group.nnodes, "table": table})
    await writer.drain()
    remaining = max(deadline - loop.time(), 1.0)
    try:
        verdict = await asyncio.wait_for(_read_json(reader), remaining)
    except TimeoutError:
        raise GroupError("node rank 0 never said whether the group formed") from None
    if not verdict.get("ok"):
        raise GroupError(str(verdict.get("error") or "node rank 0 refused the group"))
    return reader, writer


async def serve_as_worker(group: GroupConfig, table: str) -> None:
    """A worker's life: join, then stay until rank 0 goes (GroupError then)."""
    reader, writer = await join(group, table)
    log.info("sps-sim: node rank %d joined the group of %d", group.node_rank, group.nnodes)
    try:
        await reader.read()  # EOF when rank 0 exits
    finally:
        writer.close()
    raise GroupError("node rank 0 left the group")
