"""Run a LOCAL COPY of SGLang's dspark_sps_profiler.py (not part of this repo) against sps-sim.

The script imports three things from a full SGLang install; this module writes small
stand-ins for them into a temporary directory (the table classes come from
`sps_operator.tables.formats`, which follows SGLang's loader rules), runs the script's
`all` subcommand in a subprocess, and returns its rounds and its table text.

The script runs with its defaults. Its request lifetime (572 tokens) is derived from
`--min-steady-seconds 10`, so that flag is left alone: each request then runs its 572
steps (what a GPU would run) and the script's remaining wall-clock gates (10 s steady,
2 s polls) are met in real seconds while the simulated GPU idles — longer wall time, the
same GPU time. `time_scale` is accepted for symmetry and unused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

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
    "sglang/srt/speculative/dspark_components/dspark_sps.py": (
        "from sps_operator.tables.formats import (\n"
        "    SpsAdditiveCostTable, SpsCostTable, load_sps_table_text, profile_sps_table,\n"
        ")\n"
        "def load_sps_table_from_path(path):\n"
        "    with open(path, encoding='utf-8') as f:\n"
        "        return load_sps_table_text(f.read())\n"
    ),
}


def run_reference_script(
    script: Path,
    base_url: str,
    batch_sizes: list[int],
    fracs: list[float] | None,
    time_scale: float,
    workdir: Path,
) -> tuple[list[dict[str, Any]], str]:
    """(rounds.jsonl lines, table JSON text) from the reference script's `all` run."""
    stubs = Path(tempfile.mkdtemp(prefix="sglang-stubs-", dir=workdir))
    for rel, text in STUBS.items():
        path = stubs / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    out = workdir / ("ref-additive.json" if fracs else "ref-diagonal.json")
    cmd = [
        sys.executable,
        str(script),
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
