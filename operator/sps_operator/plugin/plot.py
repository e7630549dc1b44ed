"""PNG plots of SPS tables (matplotlib, no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from sps_operator.tables.formats import SpsCostTable, SpsTable
from sps_operator.tables.quality import Cell, predicted_step_seconds

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plot_table(table: SpsTable, path: Path, title: str) -> Path:
    """Write a PNG of what the planner will believe: step time over the table's range."""
    plt = _pyplot()
    if isinstance(table, SpsCostTable):
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
        xs = list(table.sample_batch_tokens)
        ms = [1000.0 / v if v else float("nan") for v in table.sample_steps_per_sec]
        # The planner's lookup is a floor step: draw it as one.
        ax.step(
            [*xs, table.max_batch_tokens], [*ms, ms[-1]], where="post", label="table (floor step)"
        )
        ax.plot(xs, ms, "o", color="C1", label="probes")
        ax.set_xlabel("batch tokens M (bs × K on the diagonal)")
        ax.set_ylabel("step time (ms)")
        ax.grid(alpha=0.3)
        ax.legend()
    else:
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
        bias_ms = table.bias_seconds * 1000.0
        left.plot(table.bs_probes, [a * 1000 for a in table.alpha_seconds], "o-", label="α(bs)")
        left.plot(table.m_probes, [t * 1000 for t in table.theta_seconds], "s-", label="θ(M)")
        left.axhline(bias_ms, color="grey", ls="--", label=f"bias {bias_ms:.2f} ms")
        left.set_xlabel("batch size bs  /  verify tokens M")
        left.set_ylabel("ms")
        left.set_title("additive terms")
        left.grid(alpha=0.3)
        left.legend()
        bss = list(table.bs_probes)
        picks = sorted({bss[0], bss[len(bss) // 2], bss[-1]})
        top = max(table.m_probes[-1], bss[-1])
        for bs in picks:
            ms_axis = [m for m in range(bs, top + 1, max(1, (top - bs) // 64 or 1))]
            right.plot(
                ms_axis,
                [1000 * predicted_step_seconds(table, bs, m) for m in ms_axis],
                label=f"bs={bs}",
            )
        right.set_xlabel("verify tokens M = bs + budget")
        right.set_ylabel("predicted step time (ms)")
        right.set_title("bias + α(bs) + θ(M)")
        right.grid(alpha=0.3)
        right.legend()
    return _save(plt, fig, path, title)


def plot_diagonal_fit(table: SpsCostTable, cells: Sequence[Cell], path: Path, title: str) -> Path:
    """A diagonal table against the cells it was fitted to: the planner's floor-step curve
    with the measured medians on it, and the residuals."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), dpi=110)
    xs = list(table.sample_batch_tokens)
    ms = [1000.0 / v if v else float("nan") for v in table.sample_steps_per_sec]
    left.step(
        [*xs, table.max_batch_tokens],
        [*ms, ms[-1]],
        where="post",
        color="C0",
        label="table (the planner's floor step)",
    )
    ordered = sorted(cells, key=lambda c: c.m)
    left.errorbar(
        [c.m for c in ordered],
        [c.t * 1000 for c in ordered],
        yerr=[1.96 * c.t_se * 1000 for c in ordered],
        fmt="o",
        color="C1",
        ms=5,
        label="measured median step time (95 % CI)",
    )
    for c in ordered:
        left.annotate(
            f"bs={c.bs}", (c.m, c.t * 1000), textcoords="offset points", xytext=(4, -10), fontsize=7
        )
    left.set_xlabel("batch tokens M = bs × K")
    left.set_ylabel("step time (ms)")
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    residuals = [100 * (c.t - predicted_step_seconds(table, c.bs, c.m)) / c.t for c in ordered]
    right.axhline(0.0, color="grey", lw=0.8)
    right.plot([c.m for c in ordered], residuals, "o", color="C1")
    right.set_xlabel("batch tokens M")
    right.set_ylabel("residual (measured − table) / measured (%)")
    right.grid(alpha=0.3)
    return _save(plt, fig, path, title)


def _pyplot() -> ModuleType:
    """matplotlib.pyplot on the file-only Agg backend, imported late (it is slow to load)."""
    try:
        import matplotlib
    except ModuleNotFoundError as exc:  # the kubectl plugin's install leaves it out
        raise ModuleNotFoundError(
            f"plotting needs {exc.name}: pip install 'sps-operator[plot]'", name=exc.name
        ) from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt: ModuleType, fig: Figure, path: Path, title: str) -> Path:
    """Title, lay out and write `fig` as a PNG at `path` (parents created), then free it."""
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path
