"""Image -> local program: the table that stands in for a container runtime (pure).

Kubernetes semantics for the argv: `command` replaces the image's entrypoint, `args`
replaces its default arguments; `command` without `args` drops the defaults.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from sps_operator.constants import IMAGE_REPOSITORY

Runtime = Literal["passthrough", "sglang"]
RUNTIMES: tuple[str, ...] = ("passthrough", "sglang")


class ImageNotMapped(LookupError):
    """No rule maps this image: the pod's container waits with ErrImagePull."""


class ImageMapError(ValueError):
    """The --image-map file is invalid."""


@dataclass(frozen=True)
class ImageRule:
    pattern: str  # fnmatch glob on the full image reference
    runtime: Runtime = "passthrough"
    entrypoint: tuple[str, ...] = ()  # the image's ENTRYPOINT
    cmd: tuple[str, ...] = ()  # the image's CMD
    env: Mapping[str, str] = field(default_factory=dict)

    def matches(self, image: str) -> bool:
        return fnmatch.fnmatchcase(image, self.pattern)


DEFAULT_RULES: tuple[ImageRule, ...] = (
    ImageRule(f"{IMAGE_REPOSITORY}*", entrypoint=("sps-operator",), cmd=("run",)),
    ImageRule("*sglang*", runtime="sglang"),
    ImageRule("busybox*", cmd=("sh",)),
    ImageRule("*/busybox*", cmd=("sh",)),
    ImageRule("python*", cmd=("python3",)),
    ImageRule("*/python*", cmd=("python3",)),
)


@dataclass(frozen=True)
class Program:
    argv: list[str]
    env: dict[str, str]  # defaults the pod's own env overrides


def parse_rules(doc: Any, source: str = "image map") -> list[ImageRule]:
    """Rules from `{"images": [{"pattern": ..., "runtime": ..., "entrypoint": [...], ...}]}`."""
    items = doc.get("images") if isinstance(doc, dict) else doc
    if not isinstance(items, list):
        raise ImageMapError(f"{source}: expected a list under 'images'")
    rules: list[ImageRule] = []
    for i, item in enumerate(items):
        where = f"{source}: images[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("pattern"), str):
            raise ImageMapError(f"{where}: needs a string 'pattern'")
        unknown = set(item) - {"pattern", "runtime", "entrypoint", "cmd", "env"}
        if unknown:
            raise ImageMapError(f"{where}: unknown keys {sorted(unknown)}")
        runtime = item.get("runtime", "passthrough")
        if runtime not in RUNTIMES:
            raise ImageMapError(f"{where}: runtime must be one of {RUNTIMES}, got {runtime!r}")
        lists = {}
        for key in ("entrypoint", "cmd"):
            value = item.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ImageMapError(f"{where}: {key} must be a list of strings")
            lists[key] = tuple(value)
        env = item.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ImageMapError(f"{where}: env must map names to strings")
        rules.append(
            ImageRule(item["pattern"], runtime, lists["entrypoint"], lists["cmd"], dict(env))
        )
    return rules


def load_rules(path: Path | None) -> list[ImageRule]:
    """The file's rules first (they win), then the built-in ones."""
    if path is None:
        return list(DEFAULT_RULES)
    try:
        text = path.read_text()
        doc = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise ImageMapError(f"--image-map {path}: {exc}") from None
    return [*parse_rules(doc, str(path)), *DEFAULT_RULES]


def find_rule(rules: Sequence[ImageRule], image: str) -> ImageRule:
    for rule in rules:
        if rule.matches(image):
            return rule
    raise ImageNotMapped(
        f'image "{image}" is not in the node agent\'s image map (simulated nodes cannot pull it)'
    )


_LAUNCHER = re.compile(r"(?:\S*/)?python3?(?:\.\d+)?\s+-m\s+sglang\.launch_server\b")
_MODULES = ("sglang.launch_server",)


def strip_sglang_launcher(argv: Sequence[str]) -> list[str]:
    """`python3 -m sglang.launch_server ARGS` (or `sglang serve ARGS`) -> ARGS."""
    try:  # the simulator's own version, when it has one
        from sps_operator.sim import cli as sim_cli

        strip_launcher = sim_cli.strip_launcher
    except (ImportError, AttributeError):
        strip_launcher = None
    if strip_launcher is not None:
        try:
            return list(strip_launcher(list(argv)))
        except ValueError as exc:
            raise ImageNotMapped(f"cannot map {shlex.join(argv)!r} to sps-sim: {exc}") from None
    args = list(argv)
    if args and re.fullmatch(r"(?:\S*/)?python3?(?:\.\d+)?", args[0]):
        args = args[1:]
        if len(args) >= 2 and args[0] == "-m" and args[1] in _MODULES:
            return args[2:]
        raise ImageNotMapped(f"cannot map {shlex.join(argv)!r} to sps-sim: not a launch_server")
    if args and args[0].rsplit("/", 1)[-1] == "sglang" and args[1:2] == ["serve"]:
        return args[2:]
    if args and args[0] in _MODULES:
        return args[1:]
    if args and args[0].rsplit("/", 1)[-1] == "sps-sim":
        return args[1:]
    if args and args[0].startswith("-"):
        return args  # flags only: the image's entrypoint was the launcher
    raise ImageNotMapped(f"cannot map {shlex.join(argv)!r} to sps-sim: unknown launcher")


def _sglang_argv(argv: list[str]) -> list[str]:
    # A shell wrapper (`bash -c "... python3 -m sglang.launch_server ..."`) keeps its shell;
    # only the launcher inside the script becomes sps-sim.
    if len(argv) >= 3 and argv[0].rsplit("/", 1)[-1] in ("sh", "bash") and argv[1] == "-c":
        script = _LAUNCHER.sub("sps-sim", argv[2])
        script = re.sub(r"\bsglang\s+serve\b", "sps-sim", script)
        if "sps-sim" not in script:
            raise ImageNotMapped("shell script does not start sglang.launch_server")
        return ["sh", "-c", script, *argv[3:]]
    return ["sps-sim", *strip_sglang_launcher(argv)]


def resolve_program(
    rules: Sequence[ImageRule],
    image: str,
    command: Sequence[str] | None,
    args: Sequence[str] | None,
    *,
    gpu_product: str,
    sim_env: Mapping[str, str] | None = None,
) -> Program:
    """The argv and default env a container runs with on a node of `gpu_product`."""
    rule = find_rule(rules, image)
    if command:
        argv = [*command, *(args or [])]
    else:
        argv = [*rule.entrypoint, *(args if args else rule.cmd)]
    env = dict(rule.env)
    if rule.runtime == "sglang":
        argv = _sglang_argv(argv)
        env.update({"SPS_SIM_GPU_PRODUCT": gpu_product, **(sim_env or {})})
    if not argv:
        raise ImageNotMapped(f'image "{image}" has no entrypoint: give the container a command')
    return Program(argv=argv, env=env)
