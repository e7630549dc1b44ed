"""Predicted step-time change between two SPS tables over a grid (pure).

Both tables are evaluated the way SGLang's planner reads them
(`predicted_step_seconds`: floor step for a diagonal table, bias + α + θ for an
additive one), at every (batch size, verify tokens M) point either table samples.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from sps_operator.tables.formats import SpsAdditiveCostTable, SpsCostTable, SpsTable
from sps_operator.tables.quality import predicted_step_seconds


@dataclass(frozen=True)
class DiffPoint:
    bs: int | None  # None: a diagonal-only comparison, where M alone sets the cost
    m: int
    old_ms: float
    new_ms: float

    @property
    def change(self) -> float:
        """Relative change of the predicted step time, new vs old (0.10 = 10 % slower)."""
        return (self.new_ms - self.old_ms) / self.old_ms if self.old_ms else float("inf")


@dataclass(frozen=True)
class TableDiff:
    points: tuple[DiffPoint, ...]

    @property
    def two_dimensional(self) -> bool:
        return any(p.bs is not None for p in self.points)

    def largest(self) -> DiffPoint:
        return max(self.points, key=lambda p: abs(p.change))

    def summary(self) -> dict[str, Any]:
        changes = [p.change for p in self.points]
        worst = self.largest()
        return {
            "points": len(self.points),
            "medianChange": statistics.median(changes),
            "meanAbsChange": statistics.fmean(abs(c) for c in changes),
            "largestChange": worst.change,
            "largestAt": {"batchSize": worst.bs, "verifyTokens": worst.m},
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "points": [
                {
                    "batchSize": p.bs,
                    "verifyTokens": p.m,
                    "oldMs": p.old_ms,
                    "newMs": p.new_ms,
                    "change": p.change,
                }
                for p in self.points
            ],
        }


def _m_probes(table: SpsTable) -> list[int]:
    if isinstance(table, SpsCostTable):
        return list(table.sample_batch_tokens)
    return list(table.m_probes)


def grid(old: SpsTable, new: SpsTable) -> list[tuple[int | None, int]]:
    """The (bs, M) points both tables are compared at.

    Two diagonal tables: every probe of either (cost depends on M only). Otherwise
    every batch-size probe of the additive table(s) against every M probe of either
    table with M >= bs (M = bs + extra verify tokens); M = bs is always included.
    """
    ms = sorted(set(_m_probes(old)) | set(_m_probes(new)))
    additive = [t for t in (old, new) if isinstance(t, SpsAdditiveCostTable)]
    if not additive:
        return [(None, m) for m in ms if m >= 1]
    bss = sorted({bs for t in additive for bs in t.bs_probes if bs >= 1})
    points: list[tuple[int | None, int]] = []
    for bs in bss:
        for m in sorted({bs, *(m for m in ms if m >= bs)}):
            points.append((bs, m))
    return points


def diff_tables(old: SpsTable, new: SpsTable) -> TableDiff:
    points = []
    for bs, m in grid(old, new):
        at_bs = bs if bs is not None else m
        points.append(
            DiffPoint(
                bs=bs,
                m=m,
                old_ms=1000.0 * predicted_step_seconds(old, at_bs, m),
                new_ms=1000.0 * predicted_step_seconds(new, at_bs, m),
            )
        )
    if not points:
        raise ValueError("the tables share no point to compare")
    return TableDiff(points=tuple(points))


def _pct(change: float) -> str:
    return f"{100 * change:+.1f}%"


def render_diff(diff: TableDiff, old_label: str, new_label: str) -> str:
    summary = diff.summary()
    worst = diff.largest()
    where = f"M={worst.m}" if worst.bs is None else f"bs={worst.bs}, M={worst.m}"
    head = [
        f"--- {old_label}",
        f"+++ {new_label}",
        f"Predicted step time, new vs old, at {summary['points']} points: "
        f"median {_pct(summary['medianChange'])}, mean |change| "
        f"{100 * summary['meanAbsChange']:.1f}%, largest {_pct(worst.change)} at {where} "
        f"({worst.old_ms:.3f} -> {worst.new_ms:.3f} ms)",
        "",
    ]
    if not diff.two_dimensional:
        rows = [
            [str(p.m), f"{p.old_ms:.3f}", f"{p.new_ms:.3f}", _pct(p.change)] for p in diff.points
        ]
        return "\n".join(head) + _columns(["M", "OLD MS", "NEW MS", "CHANGE"], rows)
    # A matrix of changes: rows batch size, columns M.
    ms = sorted({p.m for p in diff.points})
    by_bs: dict[int, dict[int, DiffPoint]] = {}
    for p in diff.points:
        assert p.bs is not None
        by_bs.setdefault(p.bs, {})[p.m] = p
    rows = []
    for bs in sorted(by_bs):
        rows.append([str(bs)] + [_pct(by_bs[bs][m].change) if m in by_bs[bs] else "" for m in ms])
    return "\n".join(head) + _columns(["BS \\ M"] + [str(m) for m in ms], rows)


def _columns(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)
