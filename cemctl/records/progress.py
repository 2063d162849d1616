"""How far a set of runs is, and how long the rest will take (`cemctl status --watch`, `launch`, the dashboard).

    grid_eta_s(records)   -> 742.0: seconds until the queued and running runs end, at the pace the finished ones set

The estimate: the running runs' own ETAs plus, for each queued run, the mean wall time of
the finished runs among the records, shared by as many runs as are running at once.
None when nothing is left, or when queued runs wait and no run has finished yet to
time them by. Pure: records in, seconds out (no clock is read).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence


def grid_eta_s(records: Sequence[Mapping[str, Any]], *, workers: int | None = None) -> float | None:
    """Seconds until every queued and running run among `records` has ended (see the module docstring).
    `workers`: runs trained at once (default: how many are running now, at least 1)."""
    running = [r for r in records if r.get("state") == "running"]
    queued = [r for r in records if r.get("state") == "queued"]
    if not running and not queued:
        return None
    walls = [float(r["wall_time_s"]) for r in records if r.get("state") == "done"
             and isinstance(r.get("wall_time_s"), (int, float)) and math.isfinite(r["wall_time_s"])
             and r["wall_time_s"] > 0]
    if queued and not walls:
        return None
    per_run = sum(walls) / len(walls) if walls else 0.0
    left_running = [float(r["eta_s"]) if isinstance(r.get("eta_s"), (int, float)) else per_run for r in running]
    slots = max(1, workers if workers is not None else len(running))
    total = sum(left_running) + per_run * len(queued)
    return max(max(left_running, default=0.0), total / slots)
