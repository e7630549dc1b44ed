"""`sps-operator`: one entry point, a subcommand per part.

Each subcommand lives with its part and is imported lazily, so `sps-operator crd`
does not pay for kopf.
"""

from __future__ import annotations

import importlib
import sys

from sps_operator import __version__

# subcommand -> (module, function taking argv, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "run": ("sps_operator.controller.main", "main", "run the operator (kopf) against a cluster"),
    "crd": (
        "sps_operator.api.crd_cmd",
        "main",
        "print the SpsProfile CRD generated from the models",
    ),
    "fingerprint": (
        "sps_operator.controller.fingerprint_cmd",
        "main",
        "what the operator reads from a Deployment (-f FILE): fingerprint, inputs, gaps",
    ),
}


def missing_extra(exc: ModuleNotFoundError) -> str:
    """What to install when a command's dependency is missing: the kubectl plugin's
    installation (`pip install sps-operator`) leaves out the operator's (the extras)."""
    return (
        f"needs the Python module {exc.name!r}, which is not installed: "
        "pip install 'sps-operator[operator]'"
    )


def usage() -> str:
    lines = ["usage: sps-operator [--version] <command> [args...]", "", "commands:"]
    lines += [f"  {name:<12} {help_}" for name, (_, _, help_) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if args[0] == "--version":
        print(f"sps-operator {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        print(f"sps-operator: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module_name, func_name, _ = SUBCOMMANDS[name]
    try:
        func = getattr(importlib.import_module(module_name), func_name)
        result = func(rest)
    except ModuleNotFoundError as exc:  # imports are lazy: the command's own import too
        print(f"sps-operator {name}: {missing_extra(exc)}", file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
