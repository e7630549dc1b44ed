"""The real-node tests may use the end-to-end tests' helpers (tests/e2e: the chart's
release, an `Env`, the server and profile manifests) when they run a profile."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))
