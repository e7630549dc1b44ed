"""promcheck (tests/monitoring/promcheck): Prometheus's own rule-file validation and PromQL
parser, built from the Go module proxy into the cache like the control plane (about a
minute of CPU and a minute of downloads the first time; then cached by its sources)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "monitoring" / "promcheck"


def _cache() -> Path:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((SOURCE / name).read_bytes())
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "sps-operator" / "promcheck" / digest.hexdigest()[:16]


def binary() -> Path:
    """The built promcheck; built first when missing (a missing Go fails, never skips)."""
    target = _cache() / "promcheck"
    if target.is_file():
        return target
    if shutil.which("go") is None:
        raise FileNotFoundError("promcheck needs Go 1.26 to build (as the control plane does)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; the others then find it
        if not target.is_file():
            env = {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
            partial = target.with_suffix(".partial")
            built = subprocess.run(
                ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(partial), "."],
                cwd=SOURCE, env=env, check=False, capture_output=True, text=True,
            )  # fmt: skip
            if built.returncode != 0:
                raise RuntimeError(f"building promcheck in {SOURCE} failed:\n{built.stderr}")
            partial.rename(target)
    return target


def check_rules(*files: Path) -> subprocess.CompletedProcess[str]:
    """`promcheck rules FILE...`: validated as `promtool check rules` does it."""
    return subprocess.run(
        [str(binary()), "rules", *map(str, files)], capture_output=True, text=True, check=False
    )


def check_exprs(exprs: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary()), "exprs"], input=json.dumps(exprs), capture_output=True, text=True,
        check=False,
    )  # fmt: skip


def metric_names(result: subprocess.CompletedProcess[str]) -> set[str]:
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout)["metrics"])


if __name__ == "__main__":  # `make test-tools`: build it before the tests need it
    print(binary())
