"""Akima-interpolated optimum of a learning-rate sweep (`cemctl report` lr_sweep, paper Fig. 3a).

The paper estimates the optimal learning rate and perplexity from five points
(0.0005 ... 0.008, doubling) by Akima interpolation. We interpolate the seed
means in log(lr) with `scipy.interpolate.Akima1DInterpolator` and take the
minimum on a fine grid (plus the sample points themselves, so a minimum at a
sample point is found exactly).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

GRID_POINTS = 4001


@dataclass(frozen=True)
class Optimum:
    lr: float  # learning rate at the interpolated minimum
    value: float  # interpolated metric (perplexity) there
    method: str  # "akima" or "best sampled" (fewer than 3 distinct learning rates)
    at_edge: bool  # the minimum is at the smallest or largest learning rate swept


def akima_optimum(lrs: Sequence[float], values: Sequence[float], *, grid_points: int = GRID_POINTS) -> Optimum:
    """Minimum of the Akima interpolant of `values` against log(`lrs`).

    Repeated learning rates are averaged first. With fewer than 3 distinct learning
    rates there is nothing to interpolate: the best sampled point is returned.
    """
    import numpy as np

    lr = np.asarray(lrs, dtype=float)
    y = np.asarray(values, dtype=float)
    if lr.shape != y.shape or lr.size == 0:
        raise ValueError("akima_optimum needs as many values as learning rates (at least one)")
    if np.any(lr <= 0) or not np.all(np.isfinite(y)):
        raise ValueError("learning rates must be > 0 and values finite")
    x = np.log(lr)
    ux = np.unique(x)
    uy = np.array([y[x == v].mean() for v in ux])
    if ux.size < 3:
        i = int(np.argmin(uy))
        return Optimum(float(np.exp(ux[i])), float(uy[i]), "best sampled", bool(i in (0, ux.size - 1)))
    from scipy.interpolate import Akima1DInterpolator

    interp = Akima1DInterpolator(ux, uy)
    grid = np.union1d(np.linspace(ux[0], ux[-1], grid_points), ux)
    fine = interp(grid)
    i = int(np.nanargmin(fine))
    at_edge = bool(np.isclose(grid[i], ux[0]) or np.isclose(grid[i], ux[-1]))
    return Optimum(float(np.exp(grid[i])), float(fine[i]), "akima", at_edge)


def akima_curve(lrs: Sequence[float], values: Sequence[float], points: int = 200) -> tuple[list[float], list[float]]:
    """The interpolant on a grid (for drawing), or the points themselves when < 3 distinct lrs."""
    import numpy as np

    x = np.log(np.asarray(lrs, dtype=float))
    y = np.asarray(values, dtype=float)
    ux = np.unique(x)
    uy = np.array([y[x == v].mean() for v in ux])
    if ux.size < 3:
        return list(np.exp(ux)), list(uy)
    from scipy.interpolate import Akima1DInterpolator

    grid = np.linspace(ux[0], ux[-1], points)
    return list(np.exp(grid)), list(Akima1DInterpolator(ux, uy)(grid))


def akima_minima(lrs: Sequence[float], values: "Any", *, grid_points: int = 401) -> "tuple[Any, Any, Any]":
    """The Akima optimum of many profiles on the same learning rates at once: `values` has shape (..., len(lrs))
    (distinct, increasing rates). Returns (lr at the minimum, the interpolated minimum, at an edge), each of
    shape (...): the same interpolant as `akima_optimum` (scipy's Akima1DInterpolator, its slope cutoff taken
    per profile), vectorised for bootstraps, jackknives and simulations."""
    import numpy as np

    x = np.log(np.asarray(lrs, dtype=float))
    y = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.size < 3 or np.any(np.diff(x) <= 0):
        raise ValueError("akima_minima needs at least 3 distinct, increasing learning rates")
    if y.shape[-1] != x.size:
        raise ValueError("akima_minima: the last axis of values must match the learning rates")
    shape = y.shape[:-1]
    y = y.reshape(-1, x.size)
    dx = np.diff(x)
    m = np.empty((y.shape[0], x.size + 3))
    m[:, 2:-2] = np.diff(y, axis=1) / dx
    m[:, 1] = 2.0 * m[:, 2] - m[:, 3]
    m[:, 0] = 2.0 * m[:, 1] - m[:, 2]
    m[:, -2] = 2.0 * m[:, -3] - m[:, -4]
    m[:, -1] = 2.0 * m[:, -2] - m[:, -3]
    t = 0.5 * (m[:, 3:] + m[:, :-3])
    dm = np.abs(np.diff(m, axis=1))
    f1, f2 = dm[:, 2:], dm[:, :-2]
    f12 = f1 + f2
    ok = f12 > 1e-9 * np.max(f12, axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = m[:, 1:-2] + (f2 / f12) * (m[:, 2:-1] - m[:, 1:-2])
    t = np.where(ok, slope, t)
    grid = np.union1d(np.linspace(x[0], x[-1], grid_points), x)
    seg = np.clip(np.searchsorted(x, grid, side="right") - 1, 0, x.size - 2)
    h = dx[seg]
    s = (grid - x[seg]) / h
    h00, h10, h01, h11 = 2 * s**3 - 3 * s**2 + 1, s**3 - 2 * s**2 + s, -2 * s**3 + 3 * s**2, s**3 - s**2
    fine = h00 * y[:, seg] + h10 * h * t[:, seg] + h01 * y[:, seg + 1] + h11 * h * t[:, seg + 1]
    i = np.argmin(fine, axis=1)
    best = grid[i]
    edge = np.isclose(best, x[0]) | np.isclose(best, x[-1])
    return (np.exp(best).reshape(shape), fine[np.arange(fine.shape[0]), i].reshape(shape), edge.reshape(shape))
