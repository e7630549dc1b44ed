"""Reading container logs the agent keeps (for tests that failed, and for people)."""

from __future__ import annotations

from collections import deque
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
