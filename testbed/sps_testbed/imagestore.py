"""A containerd root with the bed's images already imported, copied into every node.

Importing the operator image (a few hundred MB unpacked) into four containerds at every
start costs about a minute on two cores. Instead the images are imported once into a
template root, cached by the archives' names (content hashes) and containerd's version,
and each node's containerd root starts as a hard-link copy of it: blobs and committed
snapshots are immutable, and the two bolt databases, which containerd writes in place,
are copied for real.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol


class _Image(Protocol):
    @property
    def ref(self) -> str: ...

    @property
    def archive(self) -> Path: ...


class ImageStoreError(RuntimeError):
    pass


def cache_root() -> Path:
    env = os.environ.get("SPS_IMAGES_CACHE")
    base = (
        Path(env)
        if env
        else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        / "sps-operator"
        / "images"
    )
    return base / "stores"


def _containerd_version() -> str:
    out = subprocess.run(["containerd", "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip()


def store_key(images: Mapping[str, _Image]) -> str:
    h = hashlib.sha256(_containerd_version().encode())
    for role in sorted(images):
        h.update(f"{role} {images[role].ref} {images[role].archive.name}\n".encode())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _template_config(root: Path, state: Path, sock: Path) -> str:
    return f"""version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing", "io.containerd.internal.v1.opt"]
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
"""


def ensure_store(images: Mapping[str, _Image]) -> Path:
    """The template containerd root holding `images` (built on first use)."""
    key = store_key(images)
    base = cache_root()
    dest = base / f"store-{key}"
    if (dest / "ok").is_file():
        return dest / "root"
    with _locked(base / ".lock"):
        if (dest / "ok").is_file():
            return dest / "root"
        tmp = base / f"store-{key}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        run = Path("/run/sps-testbed") / f"store-{os.getpid()}"
        run.mkdir(parents=True, exist_ok=True)
        sock = run / "containerd.sock"
        (tmp / "root").mkdir(parents=True)
        conf = tmp / "containerd.toml"
        conf.write_text(_template_config(tmp / "root", run / "state", sock))
        log = open(tmp / "containerd.log", "wb")  # noqa: SIM115 - closed below
        # Its own mount namespace: the unpack mounts stay private and vanish with it.
        proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "containerd", "--config", str(conf)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            ctr = ["ctr", "-a", str(sock), "-n", "k8s.io"]
            deadline = time.monotonic() + 30
            while (
                subprocess.run([*ctr, "version"], capture_output=True, check=False).returncode != 0
            ):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise ImageStoreError(
                        f"template containerd did not start; see {tmp / 'containerd.log'}"
                    )
                time.sleep(0.1)
            for role in sorted(images):
                out = subprocess.run(
                    [*ctr, "images", "import", str(images[role].archive)],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if out.returncode != 0:
                    raise ImageStoreError(f"importing {images[role].archive}: {out.stderr.strip()}")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.close()
            shutil.rmtree(run, ignore_errors=True)
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
        (dest / "ok").write_text(key + "\n")
        _prune(base, keep=3)
        return dest / "root"


def _prune(base: Path, keep: int) -> None:
    """Drop all but the newest `keep` stores (nodes cloned from one keep their hard links)."""
    stores = sorted(base.glob("store-*/ok"), key=lambda p: p.stat().st_mtime, reverse=True)
    for ok in stores[keep:]:
        shutil.rmtree(ok.parent, ignore_errors=True)


def clone(template: Path, root: Path) -> None:
    """A node's containerd root from the template: hard links, bolt databases copied."""
    if root.exists() and any(root.iterdir()):
        raise ImageStoreError(f"{root} is not empty")
    root.parent.mkdir(parents=True, exist_ok=True)
    if root.exists():
        root.rmdir()
    proc = subprocess.run(
        ["cp", "-al", str(template), str(root)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:  # another file system: a real copy
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(template, root, symlinks=True)
        return
    for db in root.rglob("*.db"):
        data = db.read_bytes()
        db.unlink()
        db.write_bytes(data)
