"""The release tooling (release/sps_release) is not an installed package: import it from
the checkout; and the ship tests' helpers (find helm, render the chart)."""

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS.parent / "release"))
sys.path.insert(0, str(TESTS / "ship"))
