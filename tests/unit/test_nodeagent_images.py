"""Image -> local program mapping."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sps_operator.constants import GPU_H200, IMAGE
from sps_operator.devcluster.nodeagent.images import (
    DEFAULT_RULES,
    ImageMapError,
    ImageNotMapped,
    load_rules,
    resolve_program,
)

RULES = list(DEFAULT_RULES)


def test_project_image_runs_the_given_command_or_its_entrypoint() -> None:
    prog = resolve_program(
        RULES, IMAGE, ["sps-profiler", "all"], ["--out", "/w/t.json"], gpu_product=GPU_H200
    )
    assert prog.argv == ["sps-profiler", "all", "--out", "/w/t.json"] and prog.env == {}
    # no command: ENTRYPOINT sps-operator with args replacing CMD ["run"]
    assert resolve_program(
        RULES, "ghcr.io/sps-dev/sps-operator:dev", None, ["crd"], gpu_product="x"
    ).argv == [
        "sps-operator",
        "crd",
    ]
    assert resolve_program(RULES, IMAGE, None, None, gpu_product="x").argv == [
        "sps-operator",
        "run",
    ]


def test_sglang_image_becomes_sps_sim_on_the_nodes_gpu() -> None:
    prog = resolve_program(
        RULES,
        "lmsysorg/sglang:v0.5.4",
        ["python3", "-m", "sglang.launch_server"],
        ["--model-path", "m", "--port", "30000"],
        gpu_product=GPU_H200,
        sim_env={"SPS_SIM_TIME_SCALE": "50"},
    )
    assert prog.argv == ["sps-sim", "--model-path", "m", "--port", "30000"]
    assert prog.env == {"SPS_SIM_GPU_PRODUCT": GPU_H200, "SPS_SIM_TIME_SCALE": "50"}


def test_sglang_shell_wrapper_keeps_the_shell() -> None:
    script = "echo start && python3 -m sglang.launch_server --port 30000"
    prog = resolve_program(RULES, "x/sglang:1", ["bash", "-c", script], None, gpu_product="P")
    assert prog.argv == ["sh", "-c", "echo start && sps-sim --port 30000"]


def test_sglang_image_with_another_program_is_not_mapped() -> None:
    with pytest.raises(ImageNotMapped):
        resolve_program(RULES, "lmsysorg/sglang:1", ["nginx"], None, gpu_product="P")


def test_generic_images() -> None:
    assert resolve_program(RULES, "busybox:1.36", None, None, gpu_product="P").argv == ["sh"]
    assert resolve_program(
        RULES, "docker.io/library/busybox", ["echo", "hi"], None, gpu_product="P"
    ).argv == [
        "echo",
        "hi",
    ]
    assert resolve_program(RULES, "python:3.12-slim", None, ["-c", "1"], gpu_product="P").argv == [
        "-c",
        "1",
    ]
    with pytest.raises(ImageNotMapped, match="not in the node agent's image map"):
        resolve_program(RULES, "nginx:latest", None, None, gpu_product="P")


def test_image_map_file_rules_win(tmp_path: Path) -> None:
    path = tmp_path / "map.json"
    nginx = {
        "pattern": "nginx*",
        "entrypoint": ["python3", "-m", "http.server"],
        "cmd": ["80"],
        "env": {"A": "1"},
    }
    path.write_text(json.dumps({"images": [nginx, {"pattern": "busybox*", "cmd": ["true"]}]}))
    rules = load_rules(path)
    prog = resolve_program(rules, "nginx:1", None, None, gpu_product="P")
    assert prog.argv == ["python3", "-m", "http.server", "80"] and prog.env == {"A": "1"}
    assert resolve_program(rules, "busybox", None, None, gpu_product="P").argv == ["true"]


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"images": [{"runtime": "sglang"}]}, "pattern"),
        ({"images": [{"pattern": "a", "runtime": "docker"}]}, "runtime must be"),
        ({"images": [{"pattern": "a", "cmd": "sh"}]}, "list of strings"),
        ({"images": [{"pattern": "a", "typo": 1}]}, "unknown keys"),
        ({"images": {"pattern": "a"}}, "list"),
    ],
)
def test_image_map_errors(tmp_path: Path, doc: object, needle: str) -> None:
    path = tmp_path / "map.yaml"
    path.write_text(json.dumps(doc))
    with pytest.raises(ImageMapError, match=needle):
        load_rules(path)
