"""Fit plot as PNG (matplotlib, Agg backend; no browser): raw cells, fit, residuals."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sps_operator.tables.formats import SpsCostTable, SpsTable
from sps_operator.tables.quality import Cell, predicted_step_seconds


def plot_fit(cells: Sequence[Cell], table: SpsTable, path: Path, title: str = "") -> Path:
    try:
        import matplotlib
    except ModuleNotFoundError as exc:  # the kubectl plugin's install leaves it out
        raise ModuleNotFoundError(
            f"plotting needs {exc.name}: pip install 'sps-operator[plot]'", name=exc.name
        ) from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    batch_sizes = sorted({c.bs for c in cells})
    cmap = plt.get_cmap("viridis", max(len(batch_sizes), 2))
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2))
    raw_ax, fit_ax, resid_ax = axes
    for index, bs in enumerate(batch_sizes):
        color = cmap(index)
        points = sorted((c for c in cells if c.bs == bs), key=lambda c: c.m)
        ms = [c.m for c in points]
        ts = [c.t * 1e3 for c in points]
        raw_ax.plot(ms, ts, "o-", color=color, ms=4, lw=1, label=f"bs={bs}")
        fit_ax.plot(ms, ts, "o", color=color, ms=4)
        lo, hi = min(ms), max(ms)
        grid = list(range(lo, hi + 1)) if hi > lo else [lo]
        fit_ax.plot(
            grid, [predicted_step_seconds(table, bs, m) * 1e3 for m in grid], "-", color=color, lw=1
        )
        resid_ax.plot(
            ms,
            [(c.t - predicted_step_seconds(table, c.bs, c.m)) / c.t * 100 for c in points],
            "o",
            color=color,
            ms=4,
        )
    if isinstance(table, SpsCostTable):
        # A diagonal table is one curve over M (its floor steps), not one per batch size.
        lo_m, hi_m = min(c.m for c in cells), max(c.m for c in cells)
        grid_m = list(range(lo_m, hi_m + 1))
        fit_ax.plot(grid_m, [table.step_seconds(m) * 1e3 for m in grid_m], "-", color="black", lw=1)
    raw_ax.set_title("raw cells: median step time")
    fit_ax.set_title("fit (lines) vs cells (dots)")
    resid_ax.set_title("residual (measured - fit) / measured")
    resid_ax.axhline(0.0, color="grey", lw=0.8)
    for ax in axes:
        ax.set_xlabel("M = verify tokens per rank")
        ax.grid(alpha=0.3)
    raw_ax.set_ylabel("step time (ms)")
    fit_ax.set_ylabel("step time (ms)")
    resid_ax.set_ylabel("residual (%)")
    if len(batch_sizes) <= 20:
        raw_ax.legend(fontsize=7, ncol=2)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
