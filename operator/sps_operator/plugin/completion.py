"""Shell completion of `kubectl sps`, from the argument parser itself (so it cannot drift
from the commands and flags):

- `kubectl sps completion bash|zsh` prints a script that completes `kubectl-sps`;
- `kubectl_complete-sps` (an entry point) answers kubectl's own completion, which since
  kubectl 1.26 asks an executable of that name on PATH for a plugin's candidates, in
  cobra's protocol: one candidate a line, then `:<directive>` (4: no file completion)."""

from __future__ import annotations

import argparse

NO_FILE_COMPLETION = 4


def commands(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """{subcommand: its option strings}; "" holds the top level's options."""
    out: dict[str, list[str]] = {"": _options(parser)}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[name] = _options(sub)
    return out


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(
        opt
        for action in parser._actions
        if action.help != argparse.SUPPRESS
        for opt in action.option_strings
        if opt.startswith("--") or len(opt) == 2
    )


def candidates(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """What may follow `kubectl sps WORDS[:-1]`, starting with WORDS[-1] (the partial word)."""
    table = commands(parser)
    typed, current = words[:-1], (words[-1] if words else "")
    command = next((w for w in typed if w in table and w), "")
    if command:
        pool = table[command]
    elif current.startswith("-"):
        pool = table[""]
    else:
        pool = sorted(name for name in table if name)
    return [c for c in pool if c.startswith(current)]


def bash_script(parser: argparse.ArgumentParser) -> str:
    table = commands(parser)
    names = " ".join(sorted(n for n in table if n))
    cases = "".join(
        f'    {name}) opts="{" ".join(opts)}" ;;\n' for name, opts in table.items() if name
    )
    return (
        "# kubectl-sps completion (bash): source <(kubectl sps completion bash)\n"
        "_kubectl_sps() {\n"
        '  local cur="${COMP_WORDS[COMP_CWORD]}" cmd="" opts="" w\n'
        '  for w in "${COMP_WORDS[@]:1:COMP_CWORD-1}"; do\n'
        f'    case "$w" in {names.replace(" ", "|")}) cmd="$w"; break ;; esac\n'
        "  done\n"
        '  case "$cmd" in\n'
        f'    "") opts="{names} {" ".join(table[""])}" ;;\n'
        f"{cases}"
        "  esac\n"
        '  COMPREPLY=($(compgen -W "$opts" -- "$cur"))\n'
        "}\n"
        "complete -F _kubectl_sps kubectl-sps\n"
    )


def zsh_script(parser: argparse.ArgumentParser) -> str:
    return (
        "# kubectl-sps completion (zsh): source <(kubectl sps completion zsh)\n"
        "autoload -U +X bashcompinit && bashcompinit\n" + bash_script(parser).split("\n", 1)[1]
    )
