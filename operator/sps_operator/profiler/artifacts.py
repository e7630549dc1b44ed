"""Output files next to `--out`, crash-safe appends, and the manifest.

Same names as SGLang's profiler: `<stem>.rounds.jsonl`, `<stem>.records.jsonl`,
`<out>.manifest.json`, `<stem>.plot.png` beside the table `<out>`. Each finished round is
appended and fsynced as soon as it ends, so an interruption loses at most the round in
flight; `run --resume` reads them back.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sps_operator import __version__
from sps_operator.profiler.sweep import cell_key_of_round

CONVERSION_FORMULA = (
    "batch_tokens = num_running_reqs_per_rank * verify_num_draft_tokens (diagonal) or "
    "min(bs + int(frac * (bs * gamma)), bs * K) (pinned, the server's arithmetic); "
    "steps_per_sec = 1 / median(server-side step_time over the steady window)"
)
STATIC_CONDITIONING_CAVEAT = (
    "Profiled with SGLANG_RAGGED_VERIFY_MODE=static: a verify step of B tokens comes from "
    "B/(gamma+1) requests, the fewest possible for that B; compact-mode steps with the same B "
    "usually span more requests, so the table slightly over-estimates steps_per_sec."
)


@dataclass(frozen=True)
class OutPaths:
    table: Path
    records: Path
    rounds: Path
    manifest: Path
    plot: Path

    @classmethod
    def for_out(cls, out: str | Path) -> OutPaths:
        path = Path(out).expanduser()
        return cls(
            table=path,
            records=path.with_name(path.stem + ".records.jsonl"),
            rounds=path.with_name(path.stem + ".rounds.jsonl"),
            manifest=path.with_name(path.name + ".manifest.json"),
            plot=path.with_name(path.stem + ".plot.png"),
        )

    def raw_files(self) -> list[Path]:
        return [self.rounds, self.records]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def append_lines(path: Path, lines: Iterable[Mapping[str, Any]]) -> None:
    """Append JSON lines and fsync, so a crash right after keeps them."""
    with path.open("a", encoding="utf-8") as handle:
        for line in lines:
            handle.write(json.dumps(line, separators=(",", ":")) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def write_lines_atomic(path: Path, lines: Iterable[Mapping[str, Any]]) -> None:
    """Rewrite a JSONL file whole (a round replaced), never leaving a half-written one."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(json.dumps(line, separators=(",", ":")) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def store_round(
    paths: OutPaths,
    rounds: list[dict[str, Any]],
    summary: dict[str, Any],
    replaces: tuple[int, int, float | None] | None,
) -> bool:
    """Append a round's line to the rounds file, or, for a cell measured again whose first
    round read a clock cap (`replaces`: its key), put it in that round's place (its step
    records stay in the records file). True when it replaced one."""
    earlier = [i for i, r in enumerate(rounds) if cell_key_of_round(r) == replaces]
    if replaces is not None and earlier:
        rounds[earlier[-1]] = summary
        write_lines_atomic(paths.rounds, rounds)
        return True
    append_lines(paths.rounds, [summary])
    rounds.append(summary)
    return False


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Lines of a JSONL file; a torn last line (crash mid-write) is dropped, others must parse."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                break  # torn tail from an interrupted append
            raise ValueError(f"{path}:{number} is not valid JSON ({exc.msg}).") from exc
        if not isinstance(value, dict):
            raise ValueError(f"{path}:{number} is not a JSON object.")
        out.append(value)
    return out


def drop_torn_tail(path: Path) -> int:
    """Cut a torn last line (a crash mid-append) off a JSONL file, so the next append starts
    on a line of its own; returns the bytes dropped (0 when the file ends cleanly)."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    keep = len(data)
    if data and not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
    else:
        last_start = data.rfind(b"\n", 0, max(len(data) - 1, 0)) + 1
        try:
            json.loads(data[last_start:])
        except (json.JSONDecodeError, UnicodeDecodeError):
            keep = last_start
    if keep == len(data):
        return 0
    with path.open("r+b") as handle:
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())
    return len(data) - keep


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def set_aside(paths: Iterable[Path]) -> list[Path]:
    """Move existing raw files out of the way (never delete measurements)."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    moved = []
    for path in paths:
        if path.exists() and path.stat().st_size > 0:
            target = path.with_name(f"{path.name}.{stamp}.bak")
            os.replace(path, target)
            moved.append(target)
        elif path.exists():
            path.unlink()
    return moved


def build_manifest(
    *,
    paths: OutPaths,
    server: Mapping[str, Any],
    sweep: Mapping[str, Any],
    settings: Mapping[str, Any],
    rounds: list[dict[str, Any]],
    status: str,
    pin_reset: str | None,
    started_at: float,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest: reference-compatible keys plus provenance, fingerprint and checksums."""
    artifacts = {p.name: sha256_file(p) for p in (paths.rounds, paths.records) if p.exists()}
    manifest: dict[str, Any] = {
        # Keys SGLang's profiler writes.
        "base_url": server.get("base_url"),
        "tp_size": server.get("tp_size"),
        "dp_size": server.get("dp_size"),
        "verify_num_draft_tokens": server.get("verify_num_draft_tokens"),
        "simulate_acc_len": server.get("simulate_acc_len"),
        "batch_size_per_rank_sweep": sweep.get("batch_sizes"),
        "fracs": sweep.get("fracs"),
        "settings": dict(settings),
        "repeats": sweep.get("repeats"),
        "seed": sweep.get("seed"),
        "timestamp": time.time(),
        "timestamp_iso": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime()),
        "conversion_formula": CONVERSION_FORMULA,
        "static_conditioning_caveat": STATIC_CONDITIONING_CAVEAT,
        "records_jsonl": paths.records.name,
        "rounds_jsonl": paths.rounds.name,
        "round_summaries": rounds,
        # Ours.
        "tool": {"name": "sps-profiler", "version": __version__},
        "status": status,
        "started_at": started_at,
        "server": dict(server),
        "fingerprint": server.get("fingerprint"),
        "stopping_rule": {
            "kind": "median step time CI (order statistics), drift-trimmed window",
            "ci_rel_width": settings.get("ci_rel_width"),
            "min_steady_steps_floor": settings.get("min_steady_steps"),
            "min_steady_seconds_floor": settings.get("min_steady_seconds"),
            "max_steady_steps": settings.get("max_steady_steps"),
        },
        "sweep": dict(sweep),
        "pin_reset": pin_reset,
        "artifacts_sha256": artifacts,
    }
    if extra:
        manifest.update(extra)
    return manifest
