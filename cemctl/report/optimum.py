"""Akima-interpolated optimum of a learning-rate sweep (`cemctl report` lr_sweep, paper Fig. 3a).

The paper estimates the optimal learning rate and perplexity from five points
(0.0005 ... 0.008, doubling) by Akima interpolation. We interpolate the seed
means in log(lr) with `scipy.interpolate.Akima1DInterpolator` and take the
minimum on a fine grid (plus the sample points themselves, so a minimum at a
sample point is found exactly).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

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
