"""The bed's OCI registry: the CNCF Distribution registry every node pulls its images from.

Nothing is side-loaded into a node's containerd. The images the bed runs (the operator,
the SGLang stand-in, pause, CoreDNS, Kueue) are pushed once, with skopeo, into a registry
storage that is cached by what it holds (`ensure_seed`); every bed serves a copy of that
storage (`clone_storage`: blobs hard-linked, the small link files copied, since the
registry rewrites those in place) from its own registry, with TLS from the bed's CA, at
`<gateway>:5000` in the bed's network namespace. The nodes' containerd resolve the public
names (`ghcr.io`, `docker.io`, `registry.k8s.io`) to that registry through its registry
host configuration (`hosts_toml`): the chart's default image
`ghcr.io/sps-dev/sps-operator:<appVersion>` is pulled from `<registry>/sps-dev/sps-operator`.

Pushing goes through `push_image` and `push_chart` only: the seed uses them, the bed pushes
the chart with them, and a user pushes their own image the same way (docs/dev-cluster.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sps_testbed.processes import free_port, log_tail, spawn, terminate_group

# The port in the bed's network namespace (each bed has its own gateway address).
PORT = 5000
# The public registries whose names the bed's images and the chart's defaults use; the
# nodes resolve them to the bed's registry and never reach the real ones.
MIRRORED = ("ghcr.io", "docker.io", "registry.k8s.io")
CHART_REPOSITORY = "charts"  # oci://<registry>/charts/<chart name>


class RegistryError(RuntimeError):
    """The registry did not start, or a push failed; the message says which and why."""


@dataclass(frozen=True)
class Published:
    """An image reference as the bed's registry holds it: `repository:tag` (no host)."""

    repository: str
    tag: str

    def at(self, registry: str) -> str:
        return f"{registry}/{self.repository}:{self.tag}"


def split_reference(ref: str) -> tuple[str, str, str]:
    """`host`, `repository`, `tag` of a tagged reference, with Docker's defaults
    (`docker.io`, `library/` for a one-part name). Digests are not taken: the bed's refs
    are tags."""
    name, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag or not tag or "@" in ref:
        raise ValueError(f"{ref!r}: expected HOST/REPOSITORY:TAG")
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        host, repository = first, rest
    else:
        host, repository = "docker.io", name
    if any(not part for part in repository.split("/")) or repository != repository.lower():
        raise ValueError(f"{ref!r}: a repository is lowercase, with no empty component")
    if host == "docker.io" and "/" not in repository:
        repository = f"library/{repository}"
    return host, repository, tag


def published(ref: str) -> Published:
    """Where `ref` lives in the bed's registry: the public name without its host. Only the
    mirrored registries map there (flat: their repositories do not collide in the bed)."""
    host, repository, tag = split_reference(ref)
    if host not in MIRRORED:
        raise ValueError(f"{ref!r}: {host} is not one of the mirrored registries {MIRRORED}")
    return Published(repository, tag)


def next_version_alias(ref: str) -> str | None:
    """The SGLang stand-in also answers to the next patch version (`v0.5.16` → `v0.5.17`),
    so a test can upgrade a server's image (a server change) without a second build."""
    repo, _, tag = ref.rpartition(":")
    if not repo or not tag.startswith("v"):
        return None
    parts = tag[1:].split(".")
    if not parts[-1].isdigit():
        return None
    parts[-1] = str(int(parts[-1]) + 1)
    return f"{repo}:v{'.'.join(parts)}"


def image_names(refs: Mapping[str, str]) -> dict[str, list[str]]:
    """Every name each role's image is pushed under: its own, and for the SGLang stand-in
    the next version too."""
    names = {role: [ref] for role, ref in refs.items()}
    alias = next_version_alias(refs["sglang"]) if "sglang" in refs else None
    if alias:
        names["sglang"].append(alias)
    return names


# The registry exports OpenTelemetry traces to localhost:4318 unless told not to.
ENV = {
    "OTEL_TRACES_EXPORTER": "none",
    "OTEL_METRICS_EXPORTER": "none",
    "OTEL_LOGS_EXPORTER": "none",
}


def config(storage: Path, addr: str, tls: tuple[Path, Path] | None) -> dict[str, Any]:
    """The registry's configuration: filesystem storage, no auth, an access log (a test
    reads the pulls there), TLS when `tls` = (certificate, key)."""
    http: dict[str, Any] = {"addr": addr, "draintimeout": "1s"}
    if tls is not None:
        http["tls"] = {"certificate": str(tls[0]), "key": str(tls[1])}
    return {
        "version": 0.1,
        "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": False}},
        "storage": {
            "filesystem": {"rootdirectory": str(storage)},
            "delete": {"enabled": True},
            # The upload purger would start a goroutine that walks the storage at start.
            "maintenance": {"uploadpurging": {"enabled": False}},
        },
        "http": http,
        "health": {"storagedriver": {"enabled": False}},
    }


def hosts_toml(registry: str, ca: Path) -> str:
    """containerd's registry host configuration for one name (certs.d/<name>/hosts.toml):
    `registry` is the host to pull from and also the server itself, not a mirror in front
    of the public one, so a name the bed's registry lacks fails with its answer instead of
    falling back to the Internet (which the bed has no route to, and must never try).
    containerd 1.6 refused a file without a `host` table; both are written."""
    url = f"https://{registry}"
    return (
        f'server = "{url}"\nca = "{ca}"\n\n'
        f'[host."{url}"]\n  capabilities = ["pull", "resolve"]\n  ca = "{ca}"\n'
    )


def write_hosts(config_path: Path, registry: str, ca: Path) -> None:
    """certs.d for a node: the bed's registry under its own name and the mirrored ones."""
    for name in (registry, *MIRRORED):
        host_dir = config_path / name
        host_dir.mkdir(parents=True, exist_ok=True)
        (host_dir / "hosts.toml").write_text(hosts_toml(registry, ca))


# ----------------------------------------------------------------------- pushing


def push_image(
    source: str,
    registry: str,
    target: Published,
    ca_dir: Path | None,
    skopeo: str = "skopeo",
) -> None:
    """Copy the image (or index: every platform in it) at `source`, a containers-transport
    reference (`oci-archive:/path.tar`, `oci:/dir:tag`), to `registry` as `target`, digests
    unchanged. `ca_dir`: the directory holding the registry's CA (`*.crt`); None for plain
    HTTP on loopback (the seed)."""
    tls = [f"--dest-cert-dir={ca_dir}"] if ca_dir else ["--dest-tls-verify=false"]
    argv = [skopeo, "copy", "--quiet", "--all", "--preserve-digests", *tls]
    argv += [source, f"docker://{target.at(registry)}"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
    if proc.returncode != 0:
        raise RegistryError(f"{' '.join(argv)}: {proc.stderr.strip() or proc.stdout.strip()}")


def helm_env(home: Path) -> dict[str, str]:
    """helm's cache and registry configuration in `home`, not the user's."""
    return {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "HELM_REGISTRY_CONFIG": str(home / "registry.json"),
    }


def push_chart(helm: str, chart_dir: Path, registry: str, ca_file: Path | None, work: Path) -> str:
    """`helm package` the chart and `helm push` it to `oci://<registry>/charts`; returns
    its version (the OCI tag). `ca_file` None: plain HTTP on loopback."""
    work.mkdir(parents=True, exist_ok=True)
    env = helm_env(work / "helm")

    def run(*args: str) -> str:
        proc = subprocess.run(
            [helm, *args], capture_output=True, text=True, check=False, env=env, timeout=120
        )
        if proc.returncode != 0:
            raise RegistryError(f"helm {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    version = str(chart["version"])
    run("package", str(chart_dir), "--destination", str(work))
    package = work / f"{chart['name']}-{version}.tgz"
    tls = ["--ca-file", str(ca_file)] if ca_file else ["--plain-http"]
    run("push", str(package), f"oci://{registry}/{CHART_REPOSITORY}", *tls)
    return version


# ----------------------------------------------------------------------- running one


def wait_ready(
    url: str, ca: Path | None, proc: subprocess.Popen[bytes], log: Path, timeout: float = 20
) -> None:
    """Until `url`/v2/ answers 200 (the registry's API is up)."""
    context = ssl.create_default_context(cafile=str(ca)) if ca else None
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RegistryError(f"the registry exited ({proc.returncode}):\n{log_tail(log, 20)}")
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            urllib.request.urlopen(f"{url}/v2/", timeout=2, context=context) as resp,
        ):
            if resp.status == 200:
                return
        if time.monotonic() > deadline:
            raise RegistryError(f"{url}/v2/ did not answer in {timeout:.0f}s:\n{log_tail(log, 20)}")
        time.sleep(0.05)


# ----------------------------------------------------------------------- the seed


def cache_root() -> Path:
    env = os.environ.get("SPS_IMAGES_CACHE")
    base = (
        Path(env)
        if env
        else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        / "sps-operator"
        / "images"
    )
    return base / "registry"


@dataclass(frozen=True)
class Image:
    """An image the bed runs: its public reference and the OCI archive it was built into."""

    ref: str
    archive: Path


def seed_key(registry_version: str, images: Mapping[str, Image]) -> str:
    h = hashlib.sha256(f"{registry_version}\n".encode())
    for role, names in sorted(image_names({r: i.ref for r, i in images.items()}).items()):
        h.update(f"{role} {' '.join(names)} {images[role].archive.name}\n".encode())
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


@contextlib.contextmanager
def loopback_registry(binary: Path, storage: Path, log: Path) -> Iterator[str]:
    """A registry on 127.0.0.1 (plain HTTP) serving `storage`, for as long as the block
    runs; yields its host:port."""
    addr = f"127.0.0.1:{free_port()}"
    conf = log.parent / "registry-seed.yml"
    conf.write_text(yaml.safe_dump(config(storage, addr, None), sort_keys=False))
    proc = spawn([str(binary), "serve", str(conf)], log, env={**os.environ, **ENV})
    try:
        wait_ready(f"http://{addr}", None, proc, log)
        yield addr
    finally:
        terminate_group(proc.pid, grace=10.0)
        proc.wait()


def ensure_seed(
    binary: Path, registry_version: str, images: Mapping[str, Image], skopeo: str = "skopeo"
) -> Path:
    """A registry storage holding every image of the bed under each of its names (built on
    first use, cached by what it holds): what each bed's registry serves a copy of."""
    key = seed_key(registry_version, images)
    base = cache_root()
    dest = base / f"seed-{key}"
    if (dest / "ok").is_file():
        return dest / "storage"
    with _locked(base / ".lock"):
        if (dest / "ok").is_file():
            return dest / "storage"
        tmp = Path(tempfile.mkdtemp(prefix=f"seed-{key}.", dir=base))
        try:
            (tmp / "storage").mkdir()
            with loopback_registry(binary, tmp / "storage", tmp / "registry.log") as addr:
                names = image_names({r: i.ref for r, i in images.items()})
                for role in sorted(images):
                    for name in names[role]:
                        source = f"oci-archive:{images[role].archive}"
                        push_image(source, addr, published(name), None, skopeo)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
        (dest / "ok").write_text(key + "\n")
        _prune(base, keep=3)
        return dest / "storage"


def _prune(base: Path, keep: int) -> None:
    """All but the newest `keep` seeds go (beds serving a copy keep their hard links)."""
    seeds = sorted(base.glob("seed-*/ok"), key=lambda p: p.stat().st_mtime, reverse=True)
    for ok in seeds[keep:]:
        shutil.rmtree(ok.parent, ignore_errors=True)


def clone_storage(seed: Path, dest: Path) -> None:
    """A bed's registry storage from the seed: blob contents (immutable, named by digest)
    hard-linked, everything else copied, since the registry rewrites its link files (a tag
    pushed again) in place."""
    if dest.exists() and any(dest.iterdir()):
        raise RegistryError(f"{dest} is not empty")
    for root, _dirs, files in os.walk(seed):
        rel = Path(root).relative_to(seed)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            src, dst = Path(root) / name, dest / rel / name
            if name == "data" and "blobs" in rel.parts:
                try:
                    os.link(src, dst)
                    continue
                except OSError:  # another file system: a real copy
                    pass
            shutil.copy2(src, dst)


def access_log_lines(log: Path, method: str, path_part: str) -> list[str]:
    """The registry's access-log lines for `method` requests whose path has `path_part`."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    return [ln for ln in text.splitlines() if f'"{method} ' in ln and path_part in ln]
