"""How far a set of runs is, and how long the rest will take (`cemctl status --watch`, `launch`, the dashboard).

    grid_eta_s(records)   -> 742.0: seconds until the queued and running runs end, at the pace the finished ones set
    run_eta_s("running", step=269, total_steps=900, time_s=254.0) -> 595.6: one running run's time left
    elapsed_s("stale", started=100.0, heartbeat=None, last_event=400.0, now=9e9) -> 300.0: how long it has run

The estimate: the running runs' own ETAs plus, for each queued run, the mean wall time of
the finished runs among the records, shared by as many runs as are running at once.
None when nothing is left, or when queued runs wait and no run has finished yet to
time them by. Pure: records in, seconds out (no clock is read).

A running run's own ETA is its steps left at its pace so far: the trainer's elapsed time at its
last logged step (`time_s` of that metrics line, carried over a resume with the step) over the
steps done, evaluations included. The speed the trainer logs for one step (`tokens_per_s`)
is only the fallback: on a loaded 2-core machine one step's speed ranged over 570-26,000
tokens/s around a true 2,170, and the ETA built from it was 2.3 times too long.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from cem_core.runfiles import RESULT_STATES


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


def run_eta_s(state: Any, step: Any, total_steps: Any, *, time_s: Any = None, time_step: Any = None,
              tokens: Any = None, tokens_per_s: Any = None) -> float | None:
    """Seconds until a running run ends (None for any other state or without its progress): its steps left
    (`total_steps - step`) at `time_s / time_step` (the elapsed time at a logged step over that step, `step` when not
    given), the pace of its steps so far; without `time_s`, at its last logged `tokens_per_s`."""
    def number(v: Any) -> float | None:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None

    step_n, total, elapsed = number(step), number(total_steps), number(time_s)
    if state != "running" or not step_n or step_n <= 0 or not total:
        return None
    at = number(time_step) if time_step is not None else step_n
    if elapsed is not None and elapsed > 0 and at is not None and at > 0:
        return max(0.0, (total - step_n) * elapsed / at)
    rate, tok = number(tokens_per_s), number(tokens)
    if not rate or rate <= 0 or not tok:
        return None
    return max(0.0, (total - step_n) * (tok / step_n) / rate)


def elapsed_s(state: str, *, started: Any, finished: Any = None, heartbeat: Any = None, last_event: Any = None,
              now: float, wall: Any = None) -> float | None:
    """How long a run has taken, one definition for every surface (`status`, `launch`, the report, the dashboard):
    a run with a result, the training wall time it recorded (`wall`: result.json's wall_time_s, resumed attempts
    summed, never the hours it waited between them); else the seconds since it started: until now while it runs,
    until it was last seen otherwise (its last heartbeat or event; an imported run has no heartbeat file). None when
    it never started, or when nothing says when it was last seen: a run that is not running never grows with the
    clock."""
    if state in RESULT_STATES and isinstance(wall, (int, float)) and not isinstance(wall, bool) \
            and math.isfinite(wall) and wall >= 0:
        return float(wall)
    if started is None:
        return None
    if state in RESULT_STATES and finished:
        end = finished
    elif state == "running":
        end = now
    else:
        seen = [t for t in (heartbeat, last_event, finished) if isinstance(t, (int, float))]
        if not seen:
            return None
        end = max(seen)
    return max(0.0, float(end) - float(started))
