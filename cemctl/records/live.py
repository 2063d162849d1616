"""Runs in flight as their folders show them now, without writing the database (`cemctl serve`'s live table).

    recs = load_records(engine, "fig2c")
    live_records(recs.records, timeout_s=120)       # the queued/running runs' records brought up to their files

The database learns a run's progress when something syncs it (`cemctl status`, the end of
a launch); a read-only reader that must show a launch advancing (the dashboard) reads the
same file evidence `cemctl sync` reads, through `cem_core.runfiles` (regular files inside
the run folder only, never blocking, size-capped): heartbeat.json (step, tokens, its mtime
as the sign of life), the last line of events.jsonl and of metrics.jsonl, and result.json.
The state is `cemctl.db.state.derive_state` of that evidence, the same pure function ingest
applies, so a record here says what `cemctl status` would say after a sync. Only records
not yet ended (planned, queued, running, stale) are touched, and only fields of the
catalogue change (state, reason, step, progress, tokens, train_loss, tokens_per_s,
heartbeat_at, elapsed_s, eta_s; from a result.json the run just wrote, its result fields).
Nothing is written anywhere.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, MutableMapping, Sequence

from cem_core import runfiles
from cem_core.runfiles import EVENTS_FILE, HEARTBEAT_FILE, RESULT_FILE, RUN_STATES
from cemctl.records.progress import elapsed_s, run_eta_s

LIVE_STATES = ("planned", "queued", "running", "stale")
RESULT_FIELDS = ("test_loss", "test_ppl", "val_loss", "val_ppl", "params_total", "params_non_embedding",
                 "flops_per_token", "train_flops", "wall_time_s", "diverged_step")
_TAIL_BYTES = 8192


def _mtime(path: Path) -> float | None:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return None


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return v


def _count(v: Any) -> float | None:
    """A heartbeat's step or token count: a finite number below 2**53 (what a trainer can write; 1e308 is not a
    count, and would not fit an integer column)."""
    n = _number(v)
    return n if n is not None and abs(n) < 2 ** 53 else None


def last_event(run_dir: Path | str) -> dict[str, Any] | None:
    """The last complete, readable line of events.jsonl (read from the file's tail), or None."""
    from cem_core.runfiles.files import read_bytes

    try:
        path = runfiles.confined_path(run_dir, EVENTS_FILE)
        size = path.stat().st_size
        data = read_bytes(path, offset=max(0, size - _TAIL_BYTES), max_bytes=_TAIL_BYTES)
    except (OSError, runfiles.RunFileError):
        return None
    for line in reversed(data[: data.rfind(b"\n") + 1].splitlines()):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("state") in RUN_STATES:
            return obj
    return None


def live_record(rec: MutableMapping[str, Any], *, now: float | None = None, timeout_s: float | None = None) -> bool:
    """Bring one record of a run not yet ended up to its folder's evidence; returns whether anything changed."""
    from cemctl.db.state import Evidence, derive_state

    if rec.get("state") not in LIVE_STATES or not rec.get("run_dir"):
        return False
    now = time.time() if now is None else now
    timeout_s = runfiles.heartbeat_timeout_s(timeout_s)
    run_dir = Path(rec["run_dir"])
    if not run_dir.is_dir():
        return False
    hb_time = _mtime(run_dir / HEARTBEAT_FILE)
    hb = runfiles.read_heartbeat(run_dir) if hb_time is not None else None
    result = runfiles.read_result(run_dir)
    res_time = _mtime(run_dir / RESULT_FILE) if result else None
    event = last_event(run_dir)
    ev_time = (_mtime(run_dir / EVENTS_FILE) or _number(event.get("time"))) if event else None
    evidence = Evidence(db_state=rec["state"], db_reason=rec.get("reason") or "",
                        db_state_at=rec.get("heartbeat_at") or rec.get("started_at"),
                        result_state=result["state"] if result else None,
                        result_error=str((result or {}).get("error") or ""), result_time=res_time,
                        event_state=event["state"] if event else None,
                        event_reason=str(event.get("reason") or "") if event else "", event_time=ev_time,
                        heartbeat_time=hb_time if hb else None)
    state, reason = derive_state(evidence, now, timeout_s)
    before = dict(rec)
    rec["state"] = state
    if state in ("failed", "stale", "diverged", "cancelled", "damaged"):
        lines = [ln.strip() for ln in (reason or "").splitlines() if ln.strip()]
        rec["reason"] = lines[-1] if lines else ""
    elif state in ("running", "done", "queued", "planned"):
        rec["reason"] = "" if state != "planned" else rec.get("reason") or ""
    if hb:
        step, total, tokens = (_count(hb.get(k)) for k in ("step", "total_steps", "tokens"))
        if step is not None and step >= (rec.get("step") or 0):
            rec["step"] = int(step)
        if total:
            rec["total_steps"] = int(total)
        if tokens is not None:
            rec["tokens"] = int(tokens)
        rec["heartbeat_at"] = hb_time
        if rec.get("started_at") is None:
            rec["started_at"] = _number(hb.get("time")) or hb_time
        train = runfiles.last_metrics(run_dir, ("train",)).get("train", {})
        if _number(train.get("train_loss")) is not None:
            rec["train_loss"] = float(train["train_loss"])
        rate = _number(train.get("tokens_per_s"))
        rec["tokens_per_s"] = rate if state == "running" else None
        rec["eta_s"] = run_eta_s(state, rec.get("step"), rec.get("total_steps"), time_s=train.get("time_s"),
                                 time_step=train.get("step"), tokens=rec.get("tokens"), tokens_per_s=rate)
    if result:
        for key in RESULT_FIELDS:
            if key in result and (key not in ("val_loss",) or _number(result.get(key)) is not None):
                rec[key] = _number(result.get(key))
        if _number(result.get("steps")) is not None:
            rec["step"] = int(result["steps"])
        if _number(result.get("tokens")) is not None:
            rec["tokens"] = int(result["tokens"])
        rec["finished_at"] = rec.get("finished_at") or res_time
        rec["eta_s"] = None
        rec["tokens_per_s"] = None
    step, total = rec.get("step"), rec.get("total_steps")
    rec["progress"] = 1.0 if state == "done" else (min(1.0, step / total) if step is not None and total else None)
    rec["elapsed_s"] = elapsed_s(state, started=rec.get("started_at"), finished=rec.get("finished_at"),
                                 heartbeat=rec.get("heartbeat_at"),
                                 last_event=_number(event.get("time")) if event else None, now=now,
                                 wall=_number((result or {}).get("wall_time_s")) or rec.get("wall_time_s"))
    return rec != before


def live_records(records: Sequence[MutableMapping[str, Any]], *, now: float | None = None,
                 timeout_s: float | None = None) -> int:
    """`live_record` on each record; returns how many changed."""
    now = time.time() if now is None else now
    return sum(live_record(r, now=now, timeout_s=timeout_s) for r in records)
