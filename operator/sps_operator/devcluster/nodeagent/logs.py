"""Reading container logs the agent keeps (for tests that failed, and for people)."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


def container_log_files(state_dir: Path, namespace: str | None = None) -> list[Path]:
    """Every attempt's log, `pods/<ns>_<pod>_<uid>/<container>/<attempt>.log`, oldest pod first."""
    root = Path(state_dir) / "pods"
    if not root.is_dir():
        return []
    pods = [d for d in root.iterdir() if d.is_dir()]
    if namespace is not None:
        pods = [d for d in pods if d.name.split("_", 1)[0] == namespace]
    pods.sort(key=lambda d: d.stat().st_mtime)
    files: list[Path] = []
    for pod in pods:
        for container in sorted(c for c in pod.iterdir() if c.is_dir() and c.name != "volumes"):
            attempts = container.glob("*.log")
            files += sorted(attempts, key=lambda p: int(p.stem) if p.stem.isdigit() else 0)
    return files


def read_container_log(state_dir: Path, namespace: str, pod: str, container: str) -> str:
    """The current attempt's log of one container (the newest pod of that name)."""
    root = Path(state_dir) / "pods"
    candidates = sorted(
        root.glob(f"{namespace}_{pod}_*/{container}.log"), key=lambda p: p.lstat().st_mtime
    )
    if not candidates:
        raise FileNotFoundError(f"no log for {namespace}/{pod} container {container} in {root}")
    return candidates[-1].read_text(errors="replace")


def format_pod_logs(state_dir: Path, namespace: str | None = None, tail: int = 200) -> str:
    """The last `tail` lines of every container log, each under a header naming it."""
    parts: list[str] = []
    for path in container_log_files(Path(state_dir), namespace):
        ns, pod, _uid = path.parent.parent.name.split("_", 2)
        with open(path, errors="replace") as f:
            lines = deque(f, maxlen=tail)
        parts.append(f"==> {ns}/{pod} [{path.parent.name}] attempt {path.stem} <==")
        parts.append("".join(lines).rstrip("\n") or "(empty)")
    return "\n".join(parts)


@dataclass(frozen=True)
class LogQuery:
    """The kubelet's containerLogs query parameters the agent honours."""

    follow: bool = False
    previous: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Sequence[str]]) -> LogQuery:
        def flag(name: str) -> bool:
            return (params.get(name) or ["false"])[-1].lower() in ("true", "1")

        def number(name: str) -> int | None:
            value = (params.get(name) or [""])[-1]
            return int(value) if value.lstrip("-").isdigit() else None

        return cls(flag("follow"), flag("previous"), number("tailLines"), number("limitBytes"))


def find_log_file(
    state_dir: Path, namespace: str, pod: str, container: str, previous: bool = False
) -> Path | None:
    """The current (or previous) attempt's log of the newest pod of that name."""
    pods = sorted(
        Path(state_dir, "pods").glob(f"{namespace}_{pod}_*/{container}"),
        key=lambda p: p.stat().st_mtime,
    )
    if not pods:
        return None
    attempts = sorted(
        (p for p in pods[-1].glob("*.log") if p.stem.isdigit()), key=lambda p: int(p.stem)
    )
    if previous:
        return attempts[-2] if len(attempts) >= 2 else None
    return attempts[-1] if attempts else None


def tail_bytes(data: bytes, tail_lines: int | None, limit_bytes: int | None) -> bytes:
    """The last `tail_lines` lines (negative: all), then at most `limit_bytes` bytes."""
    if tail_lines is not None and tail_lines >= 0:
        lines = data.splitlines(keepends=True)
        data = b"".join(lines[len(lines) - tail_lines :]) if tail_lines else b""
    if limit_bytes is not None and limit_bytes >= 0:
        data = data[:limit_bytes]
    return data
