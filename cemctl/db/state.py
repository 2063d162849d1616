"""A run's state from the evidence of its files, as a pure function (`cemctl sync`, `cemctl status`).

    evidence = Evidence(result_state="done", result_time=..., last_event=("running", "...", t), ...)
    state, reason = derive_state(evidence, now=time.time(), timeout_s=120)

Newest evidence first, file mtimes as the one clock:
- a damage finding (the run's files contradict the database or their own
  schema: `Evidence.damage`) -> `damaged` with that reason; nothing else counts;
- result.json -> its state (`done` always wins);
- the last events.jsonl line -> its state;
- heartbeat.json -> `running` (not after `cancelled`, not once a result exists:
  a result ends an attempt, the trainer's last beat may come after it);
- a `running` run whose last sign of life (heartbeat, or the running event) is
  older than `timeout_s` -> `stale` ("no heartbeat for N s");
- no file evidence -> the database's own state (planned, queued) stays.

Tested with `now=` (no sleeping).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Evidence:
    db_state: str = "planned"
    db_reason: str = ""
    db_state_at: float | None = None
    result_state: str | None = None  # a valid result.json's state
    result_error: str = ""
    result_time: float | None = None  # result.json mtime
    event_state: str | None = None  # the last events.jsonl line
    event_reason: str = ""
    event_time: float | None = None  # events.jsonl mtime (or the line's time)
    heartbeat_time: float | None = None  # heartbeat.json mtime
    damage: str = ""  # why the run's files cannot be trusted ("" when they can)


def derive_state(ev: Evidence, now: float, timeout_s: float) -> tuple[str, str]:
    """(state, reason) of a run from its file evidence (see the module docstring)."""
    if ev.damage:
        return "damaged", ev.damage
    if ev.result_state == "done":
        return "done", "result.json: done"
    candidates: list[tuple[float, int, str, str]] = []
    if ev.result_state is not None and ev.result_time is not None:
        candidates.append((ev.result_time, 2, ev.result_state, ev.result_error or f"result.json: {ev.result_state}"))
    if ev.event_state is not None:
        candidates.append((ev.event_time or 0.0, 1, ev.event_state, ev.event_reason))
    if ev.heartbeat_time is not None and ev.result_state is None and ev.event_state != "cancelled":
        candidates.append((ev.heartbeat_time, 0, "running", "heartbeat"))
    if not candidates:
        return ev.db_state, ev.db_reason
    _, _, state, reason = max(candidates)
    if state == "running":
        alive = [t for t in (ev.heartbeat_time, ev.event_time if ev.event_state == "running" else None) if t]
        last_alive = max(alive) if alive else (ev.db_state_at or now)
        age = now - last_alive
        if age > timeout_s:
            return "stale", f"no heartbeat for {int(age)} s"
    return state, reason
