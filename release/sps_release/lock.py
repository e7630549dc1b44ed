"""What the image installs, from pyproject.toml alone: the base dependencies and the
`operator` extra, with the extras it names of this same package (`sps-operator[plot]`)
expanded. `make lock` (release/lock.sh) pins these with hashes into requirements/image.txt,
which the Dockerfile installs with `--require-hashes`; and requirements/plugin.txt, what the
krew archives of `kubectl sps` carry."""

from __future__ import annotations

import tomllib
from typing import Any

OWN = "sps-operator["


def _expand(extras: dict[str, list[str]], names: list[str], seen: frozenset[str]) -> list[str]:
    out: list[str] = []
    for requirement in names:
        if requirement.startswith(OWN) and requirement.endswith("]"):
            for extra in requirement[len(OWN) : -1].split(","):
                extra = extra.strip()
                if extra in seen:
                    raise ValueError(f"the extra {extra!r} names itself")
                if extra not in extras:
                    raise ValueError(f"{requirement} names an extra pyproject.toml lacks")
                out += _expand(extras, extras[extra], seen | {extra})
        else:
            out.append(requirement)
    return out


def image_requirements(pyproject: str) -> list[str]:
    """The requirements of the image, in pyproject's order, each once."""
    project: Any = tomllib.loads(pyproject)["project"]
    extras: dict[str, list[str]] = project.get("optional-dependencies", {})
    names = _expand(extras, list(project["dependencies"]) + list(extras["operator"]), frozenset())
    return list(dict.fromkeys(names))


def plugin_requirements(pyproject: str) -> list[str]:
    """What `kubectl sps` needs alone (the base dependencies): the krew archives' pex."""
    return list(tomllib.loads(pyproject)["project"]["dependencies"])


def build_requirements(pyproject: str) -> list[str]:
    """What builds the operator's own wheel in the image (pyproject's build-system)."""
    return list(tomllib.loads(pyproject)["build-system"]["requires"])
