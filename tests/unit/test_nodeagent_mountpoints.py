"""Host mount points the agent creates, and their removal once unused."""

from __future__ import annotations

import os
from pathlib import Path

from sps_operator.devcluster.nodeagent.mountpoints import (
    Janitor,
    missing_top,
    mount_points,
    remove_unused,
)


def test_missing_top(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    assert missing_top(str(tmp_path / "a")) is None
    assert missing_top(str(tmp_path / "a" / "b" / "c")) == str(tmp_path / "a" / "b")
    (tmp_path / "link").symlink_to(tmp_path / "a")
    # resolved through symlinks, as mountinfo shows paths
    assert missing_top(str(tmp_path / "link" / "x" / "y")) == str(tmp_path / "a" / "x")


def test_mount_points_parses_mountinfo() -> None:
    text = (
        "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        "600 22 254:1 /state/vol /etc/my\\040app ro,relatime - ext4 /dev/vda rw\n"
    )
    assert mount_points(text) == {"/", "/etc/my app"}


def test_remove_unused_keeps_data_and_mount_points(tmp_path: Path) -> None:
    top = tmp_path / "top"
    (top / "empty" / "deeper").mkdir(parents=True)
    (top / "target-file").touch()
    assert remove_unused(str(top), set())
    assert not top.exists()

    (top / "data").mkdir(parents=True)
    (top / "data" / "out.json").write_text("{}")  # something a container wrote
    (top / "mnt").mkdir()
    assert not remove_unused(str(top), set())
    assert (top / "data" / "out.json").exists() and not (top / "mnt").exists()

    other = tmp_path / "other"
    (other / "mounted").mkdir(parents=True)
    assert not remove_unused(str(other), {str(other / "mounted")})
    assert (other / "mounted").is_dir()


def test_janitor_cleans_only_what_it_created(tmp_path: Path) -> None:
    janitor = Janitor()
    created = tmp_path / "created"
    created.mkdir()
    existing = tmp_path / "existing"
    existing.mkdir()
    assert janitor.record([str(created), None]) == [str(created)]
    janitor.clean([str(created), str(existing)])
    assert not created.exists() and existing.exists()
    (tmp_path / "later").mkdir()
    janitor.record([str(tmp_path / "later")])
    janitor.clean()
    assert not (tmp_path / "later").exists()
    assert os.listdir(tmp_path) == ["existing"]
