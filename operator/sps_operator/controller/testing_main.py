"""The operator with its test-only hooks (`--pause-before-write`, `--clock-offset-file`,
`--kueue-recheck-seconds`):

    python -m sps_operator.controller.testing_main run [FLAGS...]

The production command, `sps-operator run`, does not know these flags (it refuses them),
so no production Deployment can switch them on by its arguments; the bed's tests run the
operator through this module instead (chart value `operator.command`).
"""

from __future__ import annotations

import sys

from sps_operator.controller.main import main as run_main


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["run"]:  # the chart's arguments start with the subcommand
        args = args[1:]
    return run_main(args, testing=True)


if __name__ == "__main__":
    sys.exit(main())
