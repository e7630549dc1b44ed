"""Piecewise-linear hat bases and the additive fit's sparse design (pure: numpy, no I/O).

A hat basis on knots is SGLang's clamped-linear interpolation written as a linear map, so
a table fitted on it is the table SGLang evaluates; `additive_design` lays bias, α(bs) and
θ(x) hats side by side for `tables/fit.py`, and `tables/bound.py` reads the same design to
propagate the cells' noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def hat_weights(
    knots: Sequence[float], x: Sequence[float]
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], FloatArray]:
    """Piecewise-linear hat functions on `knots` at `x`, clamped at the ends, as
    (lower knot index, upper knot index, weight of the upper knot) per point: each point
    touches at most two knots, so the design stays O(points)."""
    k = np.asarray(knots, dtype=float)
    v = np.clip(np.asarray(x, dtype=float), k[0], k[-1])
    hi = np.clip(np.searchsorted(k, v, side="right"), 1, max(len(k) - 1, 1))
    lo = hi - 1
    if len(k) == 1:
        zeros = np.zeros(len(v), dtype=np.intp)
        return zeros, zeros, np.zeros(len(v))
    frac = (v - k[lo]) / (k[hi] - k[lo])
    return lo.astype(np.intp), hi.astype(np.intp), frac


def second_difference(knots: Sequence[float]) -> FloatArray:
    """Rows = change of slope at each interior knot, scaled by the mean spacing (unitless)."""
    k = np.asarray(knots, dtype=float)
    n = len(k)
    if n < 3:
        return np.zeros((0, n))
    h = np.diff(k)
    scale = float(np.mean(h))
    rows = np.zeros((n - 2, n))
    for i in range(1, n - 1):
        rows[i - 1, i - 1] = 1.0 / h[i - 1]
        rows[i - 1, i] = -1.0 / h[i - 1] - 1.0 / h[i]
        rows[i - 1, i + 1] = 1.0 / h[i]
    return rows * scale


@dataclass(frozen=True)
class SparseDesign:
    """Each row's (at most 5) nonzero columns and values: bias, two α hats, two θ hats."""

    cols: npt.NDArray[np.intp]
    vals: FloatArray
    width: int

    def times(self, beta: FloatArray) -> FloatArray:
        return np.sum(self.vals * beta[self.cols], axis=1)

    def gram(self, w: FloatArray) -> FloatArray:
        """XᵀWX in O(rows · 25)."""
        gram = np.zeros((self.width, self.width))
        products = w[:, None, None] * self.vals[:, :, None] * self.vals[:, None, :]
        np.add.at(gram, (self.cols[:, :, None], self.cols[:, None, :]), products)
        return gram

    def transpose_times(self, v: FloatArray) -> FloatArray:
        out = np.zeros(self.width)
        np.add.at(out, self.cols, self.vals * v[:, None])
        return out

    def quadratic(self, matrix: FloatArray) -> FloatArray:
        """x_iᵀ M x_i for every row."""
        block = matrix[self.cols[:, :, None], self.cols[:, None, :]]
        return np.einsum("ij,ijk,ik->i", self.vals, block, self.vals)


def additive_design(
    bs: Sequence[int], bs_knots: Sequence[int], x: Sequence[int], x_knots: Sequence[int]
) -> SparseDesign:
    """Columns: bias, α at bs knots 1.. (α(bs₀) = 0), θ at x knots 1.. (θ(x₀) = 0)."""
    n_alpha = len(bs_knots) - 1
    a_lo, a_hi, a_f = hat_weights(bs_knots, bs)
    t_lo, t_hi, t_f = hat_weights(x_knots, x)

    # Knot 0 of each axis has no column: its weight goes to column 0 with value 0.
    def column(index: npt.NDArray[np.intp], offset: int) -> npt.NDArray[np.intp]:
        return np.where(index > 0, offset + index - 1, 0).astype(np.intp)

    def value(index: npt.NDArray[np.intp], weight: FloatArray) -> FloatArray:
        return np.where(index > 0, weight, 0.0)

    n = len(bs)
    cols = np.stack(
        [
            np.zeros(n, dtype=np.intp),
            column(a_lo, 1),
            column(a_hi, 1),
            column(t_lo, 1 + n_alpha),
            column(t_hi, 1 + n_alpha),
        ],
        axis=1,
    )
    vals = np.stack(
        [
            np.ones(n),
            value(a_lo, 1.0 - a_f),
            value(a_hi, a_f),
            value(t_lo, 1.0 - t_f),
            value(t_hi, t_f),
        ],
        axis=1,
    )
    return SparseDesign(cols, vals, 1 + n_alpha + len(x_knots) - 1)
