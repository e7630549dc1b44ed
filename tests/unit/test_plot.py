"""The one plotting module (sps_operator/plot.py) both the profiler and `kubectl sps table
--plot` use: without the `plot` extra, each says how to install it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from round_lines import round_line
from sps_operator import plot
from sps_operator.profiler import artifacts
from sps_operator.profiler.fitting import FitError, fit_profile
from sps_operator.tables.formats import SpsCostTable, load_sps_table_text

TABLE = SpsCostTable([8, 16, 32], [1000.0, 500.0, 260.0], 64)


@pytest.mark.parametrize("missing", plot.PLOT_MODULES)
def test_without_the_plot_extra_a_plot_names_the_module_and_the_extra(
    missing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # `import missing` now fails
    with pytest.raises(plot.PlotUnavailable) as raised:
        plot.plot_table(TABLE, tmp_path / "t.png", "t")
    assert raised.value.module == missing
    assert str(raised.value) == (
        f"plotting needs {missing}, which is not installed: pip install 'sps-operator[plot]'"
    )
    assert not (tmp_path / "t.png").exists()


def test_the_profiler_fit_without_matplotlib_keeps_the_table_and_says_how_to_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "sps.json"
    rounds = [round_line(1, 8, 95.0), round_line(2, 16, 93.0), round_line(4, 32, 80.0)]
    artifacts.append_lines(artifacts.OutPaths.for_out(out).rounds, rounds)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(FitError) as raised:
        fit_profile(str(out), plot=True)
    assert str(raised.value) == (
        f"{out} was written, but the plot needs matplotlib, which is not installed: "
        "pip install 'sps-operator[plot]', or pass --no-plot"
    )
    assert isinstance(load_sps_table_text(out.read_text()), SpsCostTable)


def test_the_profiler_and_the_plugin_plot_through_the_one_module() -> None:
    from sps_operator.plugin import cli as plugin_cli
    from sps_operator.profiler import fitting

    for module in (plugin_cli, fitting):
        source = Path(module.__file__ or "").read_text()
        assert "from sps_operator import plot" in source or "from sps_operator.plot " in source
    assert not (Path(plot.__file__).parent / "profiler" / "plot.py").exists()
    assert not (Path(plot.__file__).parent / "plugin" / "plot.py").exists()
