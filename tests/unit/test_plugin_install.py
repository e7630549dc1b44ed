"""The kubectl plugin installs without the operator's dependencies: `pip install
sps-operator` brings kubernetes, pydantic and PyYAML; kopf, numpy, matplotlib, aiohttp,
prometheus-client and cronsim are the `operator` and `plot` extras."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTRAS_ONLY = ["kopf", "numpy", "matplotlib", "aiohttp", "prometheus_client", "cronsim"]
DIAG = '{"sample_batch_tokens":[8,16],"sample_steps_per_sec":[1000.0,500.0],"max_batch_tokens":32}'


def test_the_distribution_needs_only_the_plugins_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {d.split(">")[0].split("<")[0].split("=")[0].strip() for d in project["dependencies"]}
    assert names == {"kubernetes", "pydantic", "pyyaml"}
    extras = project["optional-dependencies"]
    operator = " ".join(extras["operator"] + extras["plot"])
    for module in ("kopf", "numpy", "matplotlib", "aiohttp", "prometheus-client", "cronsim"):
        assert module in operator, module
    # The image installs the operator extra: tests/ship/test_ship_dockerfile.py.


def test_the_plugin_runs_with_the_extras_missing(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(DIAG)
    (tmp_path / "b.json").write_text(DIAG.replace("500.0", "400.0"))
    script = textwrap.dedent(
        f"""
        import importlib.abc, json, sys
        BLOCKED = {EXTRAS_ONLY!r}

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
                return None

        sys.meta_path.insert(0, Block())
        from sps_operator.plugin import cli
        from sps_operator.plugin.client import Cluster  # the API client: kubernetes only
        from sps_operator.plugin.view import PluginError
        codes = [
            cli.main(["diff", "{tmp_path / "a.json"}", "{tmp_path / "b.json"}", "-o", "json"]),
            cli.main(["version", "--client"]),
        ]
        try:
            cli.write_plot({{}}, None, "{tmp_path / "x.png"}", "t")
            plot = "plotted"
        except PluginError as exc:
            plot = str(exc)
        from sps_operator import cli as operator_cli
        codes.append(operator_cli.main(["run"]))
        loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set(BLOCKED))
        print(json.dumps({{"codes": codes, "plot": plot, "loaded": loaded}}))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["codes"][:2] == [0, 0], out.stderr
    assert result["loaded"] == []
    assert result["plot"] == (
        "--plot needs matplotlib, which is not installed: pip install 'sps-operator[plot]'"
    )
    # The operator itself says which extra it needs, not a traceback.
    assert result["codes"][2] == 2
    assert "pip install 'sps-operator[operator]'" in out.stderr
    assert "Traceback" not in out.stderr


def test_each_plot_names_the_extra_when_matplotlib_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`kubectl sps table --plot` and the profiler's fit plot, installed without the `plot`
    extra, say which extra to install."""
    from sps_operator.plugin.plot import plot_table
    from sps_operator.profiler.plot import plot_fit
    from sps_operator.tables.formats import SpsCostTable

    table = SpsCostTable([8, 16], [1000.0, 500.0], 32)
    for module in [m for m in sys.modules if m.split(".")[0] == "matplotlib"]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    for plot in (
        lambda: plot_table(table, tmp_path / "t.png", "t"),
        lambda: plot_fit([], table, tmp_path / "f.png"),
    ):
        with pytest.raises(ModuleNotFoundError) as err:
            plot()
        assert "pip install 'sps-operator[plot]'" in str(err.value)
        assert err.value.name == "matplotlib"
