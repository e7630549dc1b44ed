"""A server command line's flags as tokens: one flag's name and inline value, and the
command without some flags and their values (`--flag v` or `--flag=v`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def split_flag(token: str) -> tuple[str, str | None]:
    if token.startswith("--") and "=" in token:
        name, value = token.split("=", 1)
        return name, value
    return token, None


def without_flag(tokens: Sequence[str], flag: str) -> list[str]:
    """`tokens` without `flag` and its value (`--flag v` or `--flag=v`)."""
    return without_flags(tokens, lambda name: name == flag)


def without_flags(tokens: Sequence[str], dropped: Callable[[str], bool]) -> list[str]:
    """`tokens` without each flag whose name is `dropped`, and its value."""
    out: list[str] = []
    skip = False
    for token in tokens:
        name, inline = split_flag(token)
        if not skip and dropped(name):
            skip = inline is None
        elif not skip:
            out.append(token)
        else:
            skip = False
    return out
