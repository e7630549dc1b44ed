"""``python -m sglang.launch_server ARGS`` → ``sps-sim ARGS`` (simulated DSpark server)."""

from __future__ import annotations

import sys

from sps_sim.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
