"""The bed's registry, without running one: names, containerd's host files, the registry's
configuration, the seed's key and its copy per bed."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sps_testbed.registry import (
    MIRRORED,
    Image,
    Published,
    access_log_lines,
    clone_storage,
    config,
    hosts_toml,
    image_names,
    next_version_alias,
    published,
    seed_key,
    split_reference,
    write_hosts,
)


def test_public_names_map_to_the_bed_registry_without_their_host() -> None:
    assert published("ghcr.io/sps-dev/sps-operator:0.1.0") == Published(
        "sps-dev/sps-operator", "0.1.0"
    )
    assert published("ghcr.io/sps-dev/sps-operator:0.1.0").at("10.244.3.1:5000") == (
        "10.244.3.1:5000/sps-dev/sps-operator:0.1.0"
    )
    assert published("registry.k8s.io/pause:3.10") == Published("pause", "3.10")
    assert published("docker.io/lmsysorg/sglang:v0.5.16") == Published("lmsysorg/sglang", "v0.5.16")
    # Docker's defaults: no host is docker.io, a one-part name is library/.
    assert published("lmsysorg/sglang:v1") == Published("lmsysorg/sglang", "v1")
    assert published("busybox:1") == Published("library/busybox", "1")


def test_names_the_bed_does_not_mirror_or_cannot_hold_are_refused() -> None:
    with pytest.raises(ValueError, match=r"quay\.io is not one of the mirrored"):
        published("quay.io/org/img:1")
    with pytest.raises(ValueError, match="localhost is not one"):
        published("localhost/sps-testbed/base:abc")
    for bad in (
        "ghcr.io/sps-dev/sps-operator",
        "img@sha256:" + "0" * 64,
        "ghcr.io/A/b:1",
        ":1",
        "ghcr.io//b:1",
    ):
        with pytest.raises(ValueError):
            published(bad)


_component = st.from_regex(r"[a-z0-9]+([._-][a-z0-9]+)*", fullmatch=True).filter(
    lambda s: len(s) <= 20
)
_tag = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True)


@given(host=st.sampled_from(MIRRORED), parts=st.lists(_component, min_size=2, max_size=4), tag=_tag)
def test_a_mirrored_reference_round_trips_through_the_bed_registry(
    host: str, parts: list[str], tag: str
) -> None:
    repository = "/".join(parts)
    target = published(f"{host}/{repository}:{tag}")
    assert target == Published(repository, tag)
    assert target.at("r:5000") == f"r:5000/{repository}:{tag}"


@given(st.text(max_size=60))
def test_any_text_is_a_reference_or_a_value_error(text: str) -> None:
    try:
        host, repository, tag = split_reference(text)
    except ValueError:
        return
    assert host and repository and tag and "/" not in tag


def test_the_stand_in_is_pushed_under_the_next_version_too() -> None:
    refs = {"sglang": "docker.io/lmsysorg/sglang:v0.5.16", "pause": "registry.k8s.io/pause:3.10"}
    assert image_names(refs) == {
        "sglang": ["docker.io/lmsysorg/sglang:v0.5.16", "docker.io/lmsysorg/sglang:v0.5.17"],
        "pause": ["registry.k8s.io/pause:3.10"],
    }
    assert (
        next_version_alias("docker.io/lmsysorg/sglang:v0.5.9")
        == "docker.io/lmsysorg/sglang:v0.5.10"
    )
    assert next_version_alias("localhost/sglang:latest") is None
    assert next_version_alias("x:v1.rc") is None
    assert image_names({}) == {}


def test_containerd_resolves_every_mirrored_name_to_the_bed_registry_only(tmp_path: Path) -> None:
    ca = tmp_path / "trust" / "ca.crt"
    write_hosts(tmp_path / "certs.d", "10.244.3.1:5000", ca)
    names = sorted(p.name for p in (tmp_path / "certs.d").iterdir())
    assert names == sorted(["10.244.3.1:5000", *MIRRORED])
    for name in names:
        conf = tomllib.loads((tmp_path / "certs.d" / name / "hosts.toml").read_text())
        # The server is the bed's registry: no fallback to the public one.
        assert conf["server"] == "https://10.244.3.1:5000"
        assert conf["ca"] == str(ca)
        # containerd 1.6 ignores a file without a host table (then it goes to the Internet).
        assert conf["host"] == {
            "https://10.244.3.1:5000": {"capabilities": ["pull", "resolve"], "ca": str(ca)}
        }
    assert hosts_toml("r:1", ca) == (
        tmp_path / "certs.d" / "ghcr.io" / "hosts.toml"
    ).read_text().replace("10.244.3.1:5000", "r:1")


def test_the_registry_serves_its_storage_with_tls_and_logs_every_request(tmp_path: Path) -> None:
    conf = config(tmp_path / "s", "10.244.3.1:5000", (tmp_path / "c.crt", tmp_path / "c.key"))
    assert conf["storage"]["filesystem"] == {"rootdirectory": str(tmp_path / "s")}
    assert conf["http"]["addr"] == "10.244.3.1:5000"
    assert conf["http"]["tls"] == {
        "certificate": str(tmp_path / "c.crt"),
        "key": str(tmp_path / "c.key"),
    }
    assert conf["log"]["accesslog"] == {"disabled": False}
    assert "tls" not in config(tmp_path / "s", "127.0.0.1:1", None)["http"]


def test_the_seed_key_changes_with_every_image_and_the_registry_version(tmp_path: Path) -> None:
    images = {
        "operator": Image("ghcr.io/sps-dev/sps-operator:0.1.0", tmp_path / "sps-operator-a.tar"),
        "pause": Image("registry.k8s.io/pause:3.10", tmp_path / "pause-b.tar"),
    }
    key = seed_key("v3.1.2", images)
    assert key == seed_key("v3.1.2", dict(reversed(images.items())))
    assert key != seed_key("v3.1.3", images)
    rebuilt = {**images, "operator": Image(images["operator"].ref, tmp_path / "sps-operator-c.tar")}
    assert key != seed_key("v3.1.2", rebuilt)
    renamed = {**images, "pause": Image("registry.k8s.io/pause:3.11", tmp_path / "pause-b.tar")}
    assert key != seed_key("v3.1.2", renamed)


def test_a_bed_copy_of_the_seed_shares_blobs_but_not_the_files_the_registry_rewrites(
    tmp_path: Path,
) -> None:
    seed = tmp_path / "seed"
    blob = seed / "docker/registry/v2/blobs/sha256/ab/abcd/data"
    link = seed / "docker/registry/v2/repositories/pause/_manifests/tags/3.10/current/link"
    for path, text in ((blob, "layer"), (link, "sha256:abcd")):
        path.parent.mkdir(parents=True)
        path.write_text(text)
    dest = tmp_path / "bed" / "storage"
    clone_storage(seed, dest)
    copied_blob = dest / blob.relative_to(seed)
    copied_link = dest / link.relative_to(seed)
    assert copied_blob.stat().st_ino == blob.stat().st_ino  # hard link: no copy of layers
    assert copied_link.stat().st_ino != link.stat().st_ino
    copied_link.write_text("sha256:ef01")  # a tag pushed again in the bed
    assert link.read_text() == "sha256:abcd"  # the cache is untouched
    with pytest.raises(RuntimeError, match="not empty"):
        clone_storage(seed, dest)


def test_access_log_lines_pick_requests_by_method_and_path(tmp_path: Path) -> None:
    log = tmp_path / "registry.log"
    log.write_text(
        '10.244.3.2 - - [x] "GET /v2/sps-dev/sps-operator/manifests/0.1.0 HTTP/1.1" 200 1 ""'
        ' "containerd/1.6.20"\n'
        '10.244.3.2 - - [x] "HEAD /v2/pause/manifests/3.10 HTTP/1.1" 200 0 "" "containerd/1.6.20"\n'
        'time="t" level=info msg="response completed"\n'
    )
    assert len(access_log_lines(log, "GET", "/v2/sps-dev/sps-operator/manifests/")) == 1
    assert access_log_lines(log, "GET", "/v2/pause/") == []
    assert len(access_log_lines(log, "HEAD", "/v2/pause/manifests/3.10")) == 1
    assert access_log_lines(tmp_path / "missing.log", "GET", "/") == []
