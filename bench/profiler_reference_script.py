"""Run SGLang's own dspark_sps_profiler.py, from a LOCAL COPY of SGLang (not part of this
repo), against sps-sim.

`sglang` is a checkout of SGLang (e.g. `fetch github:EanWang211123/sglang`, see
docs/benchmarks.md): the script is its `python/sglang/benchmark/dspark_sps_profiler.py`,
and the table module it loads is that checkout's real
`python/sglang/srt/speculative/dspark_components/dspark_sps.py` (it needs only msgspec). The
script's two other imports come from a full SGLang install with torch; this module writes
stand-ins for them (`one_batch_server`: DEFAULT_TIMEOUT and the two skip guards;
`benchmark.utils.get_tokenizer`: a tokenizer whose len() is 32000), runs the script's `all`
subcommand in a subprocess, and returns its rounds and its table text.

The script runs with its defaults: 10 s steady and 2 s polls in real seconds, so run the
simulator at time scale 1 for it to behave as on a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SCRIPT = Path("python/sglang/benchmark/dspark_sps_profiler.py")
TABLE_MODULE = Path("python/sglang/srt/speculative/dspark_components/dspark_sps.py")
STUBS: dict[str, str] = {
    "sglang/__init__.py": "",
    "sglang/benchmark/__init__.py": "",
    "sglang/benchmark/one_batch_server.py": (
        "DEFAULT_TIMEOUT = 600\n"
        "def should_skip_due_to_max_running_requests(batch_size, threshold):\n"
        "    return batch_size > threshold\n"
        "def should_skip_due_to_token_capacity(batch_size, input_len, output_len, threshold):\n"
        "    return batch_size * (input_len + output_len) > threshold\n"
    ),
    "sglang/benchmark/utils.py": (
        "class _Tokenizer:\n"
        "    def __len__(self):\n"
        "        return 32000\n"
        "def get_tokenizer(path):\n"
        "    return _Tokenizer()\n"
    ),
    "sglang/srt/__init__.py": "",
    "sglang/srt/speculative/__init__.py": "",
    "sglang/srt/speculative/dspark_components/__init__.py": "",
}


def check_sglang_checkout(sglang: Path) -> None:
    for rel in (SCRIPT, TABLE_MODULE):
        if not (sglang / rel).is_file():
            raise SystemExit(f"--sglang {sglang}: no {rel}; pass the root of an SGLang checkout")


def run_reference_script(
    sglang: Path,
    base_url: str,
    batch_sizes: list[int],
    fracs: list[float] | None,
    workdir: Path,
) -> tuple[list[dict[str, Any]], str]:
    """(rounds.jsonl lines, table JSON text) from the reference script's `all` run."""
    stubs = Path(tempfile.mkdtemp(prefix="sglang-stubs-", dir=workdir))
    for rel, text in STUBS.items():
        path = stubs / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    real_table = stubs / "sglang/srt/speculative/dspark_components/dspark_sps.py"
    real_table.write_bytes((sglang / TABLE_MODULE).read_bytes())
    out = workdir / ("ref-additive.json" if fracs else "ref-diagonal.json")
    cmd = [
        sys.executable,
        str(sglang / SCRIPT),
        "all",
        "--base-url",
        base_url,
        "--out",
        str(out),
        "--local-tokenizer-path",
        "stub",
        "--batch-size",
        *map(str, batch_sizes),
        "--no-plot",
    ]
    if fracs:
        cmd += ["--fracs", *map(repr, fracs)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(stubs), env.get("PYTHONPATH", "")])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=7200)
    if proc.returncode != 0:
        raise RuntimeError(f"reference script failed ({proc.returncode}): {proc.stderr[-2000:]}")
    rounds_path = out.with_name(out.stem + ".rounds.jsonl")
    rounds = [json.loads(line) for line in rounds_path.read_text().splitlines() if line.strip()]
    return rounds, out.read_text()
