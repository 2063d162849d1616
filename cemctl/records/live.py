"""Runs in flight as their folders show them now, without writing the database (`cemctl serve`'s live table).

    recs = load_records(engine, "fig2c")
    live_records(recs.records, timeout_s=120)       # the records of runs not yet ended brought up to their files

The database learns a run's progress when something syncs it (`cemctl status`, the end of
a launch); a read-only reader that must show a launch advancing (the dashboard) reads the
folder as ingest reads it (`cem_core.runfolder.read_folder`: result.json, the last event,
the heartbeat, their times and the judgement `damaged`) and derives the state with the same
pure function, so a record here says what `cemctl status` would say after a sync. Only
records not yet ended (`RunState.in_flight`) are touched, and only fields of the record
change (state, reason, step, progress, tokens, train_loss, tokens_per_s, heartbeat_at,
elapsed_s, eta_s; from a result.json the run just wrote, its result fields). Nothing is
written anywhere.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from cem_core import runfiles
from cem_core.runfiles import IN_FLIGHT_STATES, RunState, number
from cemctl.records.progress import elapsed_s, run_eta_s

LIVE_STATES = IN_FLIGHT_STATES  # the states whose records `live_record` brings up to their folders

if TYPE_CHECKING:  # pragma: no cover
    from cemctl.records.record import RunRecord


def live_record(rec: "RunRecord", *, now: float | None = None, timeout_s: float | None = None) -> bool:
    """Bring one record of a run not yet ended up to its folder's evidence; returns whether anything changed."""
    from cem_core.runfolder import read_folder

    if not RunState(rec.state).in_flight or not rec.run_dir or not Path(rec.run_dir).is_dir():
        return False
    now = time.time() if now is None else now
    timeout_s = runfiles.heartbeat_timeout_s(timeout_s)
    folder = read_folder(rec.run_dir, now=now)
    state, reason = folder.state(now=now, timeout_s=timeout_s, db_state=rec.state, db_reason=rec.reason,
                                 db_state_at=rec.heartbeat_at or rec.started_at)
    before = rec.as_dict()
    rec.state = state
    if RunState(state).troubled:
        lines = [ln.strip() for ln in (reason or "").splitlines() if ln.strip()]
        rec.reason = lines[-1] if lines else ""
    elif state != "planned":
        rec.reason = ""
    hb = folder.heartbeat
    if hb is not None:
        step, total, tokens = (number(hb.get(k), int) for k in ("step", "total_steps", "tokens"))
        if step is not None and step >= (rec.step or 0):
            rec.step = step
        if total:
            rec.total_steps = total
        if tokens is not None:
            rec.tokens = tokens
        rec.heartbeat_at = folder.heartbeat_mtime
        if rec.started_at is None:
            rec.started_at = number(hb.get("time")) or folder.heartbeat_mtime
        train = runfiles.last_metrics(rec.run_dir, ("train",)).get("train", {})
        rec.train_loss = number(train.get("train_loss")) if number(train.get("train_loss")) is not None \
            else rec.train_loss
        rate = number(train.get("tokens_per_s"))
        rec.tokens_per_s = rate if state == "running" else None
        rec.eta_s = run_eta_s(state, rec.step, rec.total_steps, time_s=train.get("time_s"),
                              time_step=train.get("step"), tokens=rec.tokens, tokens_per_s=rate)
    result = folder.result.result
    if result is not None:
        rec.apply_result(result)
        rec.finished_at = rec.finished_at or folder.result.mtime
        rec.eta_s = None
        rec.tokens_per_s = None
    rec.progress = 1.0 if state == "done" else (min(1.0, rec.step / rec.total_steps)
                                                if rec.step is not None and rec.total_steps else None)
    rec.elapsed_s = elapsed_s(state, started=rec.started_at, finished=rec.finished_at, heartbeat=rec.heartbeat_at,
                              last_event=number(folder.event.get("time")) if folder.event else None, now=now,
                              wall=rec.wall_time_s)
    return rec.as_dict() != before


def live_records(records: Sequence["RunRecord"], *, now: float | None = None, timeout_s: float | None = None) -> int:
    """`live_record` on each record; returns how many changed."""
    now = time.time() if now is None else now
    return sum(live_record(r, now=now, timeout_s=timeout_s) for r in records)
