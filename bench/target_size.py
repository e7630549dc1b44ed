"""What one pass spends reading a target, by the target's size (issue 33 §2).

A tenant controls its Deployment's size: a 1.4 MB target whose server has 110,000 unknown
flags cost 2.5 CPU s per pass to read (each unknown flag is matched against every known
one). The operator now refuses a target beyond `api/limits.py`'s bounds before parsing it.
Side by side in one run, CPU seconds of the observe step's per-target work
(`observe._understand_server`), best of `--repeats`:

* a normal target (SGLang's launch line, ~20 flags);
* the 1.4 MB target as the operator reads it now (refused: TargetTooLarge);
* the same target parsed without the bound (what a pass cost before).

    .venv/bin/python bench/target_size.py [--repeats 5] [--flags 110000]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from sps_operator.api.spec import SpsProfileSpec
from sps_operator.controller.passes.observe import _understand_server
from sps_operator.controller.passes.state import Target
from sps_operator.controller.sglang.serverread import read_server

SERVER = [
    "--model-path", "org/model-8b", "--speculative-algorithm", "DSPARK",
    "--speculative-dspark-block-size", "3", "--tp-size", "1", "--port", "30000",
    "--max-running-requests", "48", "--mem-fraction-static", "0.85",
]  # fmt: skip


def deployment(extra_flags: int) -> dict[str, Any]:
    args = SERVER + [f"--x-{i:06d}" for i in range(extra_flags)]  # 110,000: 1.5 MB
    container = {
        "name": "sglang",
        "image": "lmsysorg/sglang:v0.5.9",
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": args,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "server", "namespace": "bench"},
        "spec": {"template": {"spec": {"containers": [container]}}},
    }


def cpu_seconds(work: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--flags", type=int, default=110_000)
    args = parser.parse_args()
    spec = SpsProfileSpec.model_validate(
        {"selector": {"matchLabels": {"app": "sglang"}}, "table": {"kind": "Diagonal"}}
    )

    def observe_once(dep: dict[str, Any]) -> Target:
        target = Target(deployment=dep, name="server")
        _understand_server(spec, target, "bench", {}, [])
        return target

    normal, huge = deployment(0), deployment(args.flags)
    refused = observe_once(huge)
    assert refused.reason == "TargetTooLarge", refused.reason
    assert observe_once(normal).problem is None
    container = huge["spec"]["template"]["spec"]["containers"][0]

    def unbounded() -> object:
        return read_server(container, "bench", {}, None)

    n = args.repeats
    rows = [
        ("normal target", normal, cpu_seconds(lambda: observe_once(normal), n)),
        ("1.4 MB target, bounded (refused)", huge, cpu_seconds(lambda: observe_once(huge), n)),
        ("1.4 MB target, parsed unbounded", huge, cpu_seconds(unbounded, max(1, n // 2))),
    ]
    base = rows[0][2]
    print(f"{'target':<36} {'bytes':>9} {'CPU ms/pass':>12} {'x normal':>9}")
    for name, dep, seconds in rows:
        nbytes = len(json.dumps(dep))
        print(f"{name:<36} {nbytes:>9} {seconds * 1000:>12.2f} {seconds / base:>9.1f}")
    print(f"refused with: {refused.problem}")


if __name__ == "__main__":
    main()
