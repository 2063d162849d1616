"""Bring run directories into the database, idempotently (`cemctl sync`, `cemctl status`).

    ingest_run(engine, run_dir)                  # one run: new metrics/events lines, heartbeat, result
    sync_runs(engine, runs_root)                 # every run dir under runs_root (+ known run dirs)

Both can run any number of times, from any number of processes: metrics are
upserted on (run_id, kind, step, series), events on (run_id, line), results on run_id,
test-time recursion evaluations (evals.json, `cemctl eval`) on (run_id, attn_steps,
mlp_steps); evals.json is re-read whenever its mtime changes and is mirrored
exactly (rows gone from the file are deleted).
metrics.jsonl and events.jsonl are read incrementally from a stored byte
offset; a truncated last line is left for the next call; a file that was
rewritten (shorter, or different bytes before the offset, e.g. after a resume
dropped lines) is re-read from the start. A run dir the database does not know
gets a row from its config.json, so the database can be rebuilt from the run
dirs at any time.

One function per run file (`_ingest_metrics`, `_ingest_events`,
`_ingest_heartbeat`, `_ingest_result`, `_ingest_evals`) gathers its rows and
its `Evidence`; the state is then the pure `cemctl.db.state.derive_state`.
The files and the database check each other (`_damage`): a config.json whose
hash is not the run's id (edited, or a copied run directory), a result.json that
is not a result, a run whose recorded result or directory is gone, is
`damaged` with the reason; it is never retrained silently.

Every file is read through `cem_core.runfiles` (regular files inside the run
directory only, never blocking); a run directory that is a symlink out of the
runs root, or any entry that cannot be read, is reported in `IngestStats.errors`
and skipped: one bad entry never stops the others. This module never imports torch.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from sqlalchemy import delete, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from cem_core import runfiles
from cem_core.config import RunConfig, canonical_json, resolve, run_id
from cem_core.errors import CemError, ConfigError
from cem_core.runfiles import (
    CONFIG_FILE,
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    EVALS_FILE,
    EVENTS_FILE,
    HEARTBEAT_FILE,
    METRICS_FILE,
    RESULT_FILE,
    RESULT_STATES,
    RUN_STATES,
    RunFileError,
)
from cemctl.db.engine import read_session, retry_locked, write_session
from cemctl.db.models import Eval, Metric, Result, Run, RunEvent
from cemctl.db.state import Evidence, derive_state

_FINGERPRINT_BYTES = 256
_METRIC_COLUMNS = ("tokens", "time_s", "train_loss", "val_loss", "lr", "grad_norm", "tokens_per_s")
_INT_METRIC_COLUMNS = ("tokens",)
_RESULT_FLOATS = ("test_loss", "test_ppl", "val_loss", "val_ppl", "train_flops", "wall_time_s")
_RESULT_INTS = ("params_total", "params_non_embedding", "flops_per_token", "tokens", "steps", "diverged_step")
RUN_ID_LENGTH = 12  # cem_core.config.run_id: directories named by such an id must hold that config
_EVAL_FLOATS = ("test_loss", "test_ppl")
_EVAL_INTS = ("eval_steps", "test_tokens", "flops_per_token", "trained_attn_steps", "trained_mlp_steps")


@dataclass
class IngestStats:
    """What one `sync_runs` call did (printed by `cemctl sync`)."""

    runs_seen: int = 0
    runs_created: int = 0
    runs_changed: int = 0
    metric_rows: int = 0
    event_rows: int = 0
    results: int = 0
    eval_rows: int = 0
    bad_lines: int = 0
    errors: list[str] = field(default_factory=list)
    states: Counter = field(default_factory=Counter)

    def summary(self) -> str:
        states = ", ".join(f"{n} {s}" for s, n in sorted(self.states.items())) or "none"
        text = (
            f"synced {self.runs_seen} run dirs ({self.runs_created} new, {self.runs_changed} changed): "
            f"{self.metric_rows} metric rows, {self.event_rows} events, {self.results} results; states: {states}"
        )
        if self.eval_rows:
            text += f"; {self.eval_rows} eval rows"
        if self.bad_lines:
            text += f"; {self.bad_lines} unreadable lines skipped"
        if self.errors:
            text += f"; {len(self.errors)} run dirs skipped (first: {self.errors[0]})"
        return text


# ---------------------------------------------------------------------------
# Reading files


def _fingerprint(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16] if data else ""


@dataclass
class _Lines:
    items: list[dict[str, Any] | None]  # None for an unreadable complete line
    start_offset: int
    new_offset: int
    fingerprint: str
    restarted: bool  # the file was rewritten: re-read from the start


def _read_new_lines(run_dir: Path, name: str, offset: int, fingerprint: str) -> _Lines:
    """The complete lines after `offset` (all of them when the bytes before it changed)."""
    try:
        head = max(0, offset - _FINGERPRINT_BYTES)
        data = runfiles.read_run_file(run_dir, name, offset=head, max_bytes=runfiles.MAX_LOG_BYTES)
    except FileNotFoundError:
        return _Lines([], 0, 0, "", restarted=offset > 0)
    start = offset
    if offset > 0 and (len(data) < offset - head or _fingerprint(data[: offset - head]) != fingerprint):
        start = 0
        data = runfiles.read_run_file(run_dir, name, max_bytes=runfiles.MAX_LOG_BYTES)
    else:
        data = data[offset - head:]
    complete = data[: data.rfind(b"\n") + 1]
    new_offset = start + len(complete)
    if start == 0:
        tail = complete[-_FINGERPRINT_BYTES:]
    else:  # the fingerprint is taken over the bytes just before new_offset
        tail = (runfiles.read_run_file(run_dir, name, offset=max(0, new_offset - _FINGERPRINT_BYTES),
                                       max_bytes=runfiles.MAX_LOG_BYTES)[: min(new_offset, _FINGERPRINT_BYTES)])
    items: list[dict[str, Any] | None] = []
    for raw in complete.split(b"\n")[:-1]:
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            obj = None
        items.append(obj if isinstance(obj, dict) else None)
    return _Lines(items, start, new_offset, _fingerprint(tail), restarted=(start == 0 and offset > 0))


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


def _num(value: Any, kind: type) -> Any:
    if value is None or isinstance(value, bool):
        return None
    try:
        if kind is int:
            return int(value)
        v = float(value)
        return v if math.isfinite(v) else None
    except (TypeError, ValueError, OverflowError):
        return None


def _series(obj: dict[str, Any]) -> str:
    """The sub-key of a metrics line: "" for train/val, "<layer>/<sublayer>/<t>" for energy lines."""
    if obj.get("series") is not None:
        return str(obj["series"])[:64]
    if obj.get("kind") == "energy":
        return f"{obj.get('layer', '')}/{obj.get('sublayer', '')}/{obj.get('t', '')}"[:64]
    return ""


# ---------------------------------------------------------------------------
# Upserts (SQLite and PostgreSQL both speak INSERT .. ON CONFLICT)


def _insert(session: Session, model: type) -> Any:
    name = session.get_bind().dialect.name
    if name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(model)


def _upsert(session: Session, model: type, rows: list[dict[str, Any]], keys: list[str], update: Iterable[str] | None) -> None:
    if not rows:
        return
    stmt = _insert(session, model)
    if update is None:
        stmt = stmt.on_conflict_do_nothing(index_elements=keys)
    else:
        stmt = stmt.on_conflict_do_update(index_elements=keys, set_={c: stmt.excluded[c] for c in update})
    for i in range(0, len(rows), 500):
        session.execute(stmt, rows[i : i + 500])


# ---------------------------------------------------------------------------
# One run


@dataclass
class _Snapshot:
    """The parts of a run row the change check needs (detached from any session)."""

    state: str
    state_at: float | None
    heartbeat_at: float | None
    result_mtime: float | None
    metrics_offset: int
    metrics_fingerprint: str
    events_offset: int
    events_fingerprint: str
    evals_mtime: float | None = None
    config_mtime: float | None = None

    @classmethod
    def of(cls, run: Run) -> "_Snapshot":
        return cls(
            run.state, run.state_at, run.heartbeat_at, run.result_mtime,
            run.metrics_offset or 0, run.metrics_fingerprint or "", run.events_offset or 0, run.events_fingerprint or "",
            run.evals_mtime, run.config_mtime,
        )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _needs_update(snap: _Snapshot | None, run_dir: Path, now: float, timeout_s: float) -> bool:
    if snap is None:
        return True
    for name, offset in ((METRICS_FILE, snap.metrics_offset), (EVENTS_FILE, snap.events_offset)):
        if _size(run_dir / name) != offset:  # new bytes (maybe a partial line: cheap to look again) or rewritten
            return True
    for name, seen in ((RESULT_FILE, snap.result_mtime), (EVALS_FILE, snap.evals_mtime),
                       (HEARTBEAT_FILE, snap.heartbeat_at), (CONFIG_FILE, snap.config_mtime)):
        if _mtime(run_dir / name) != seen:
            return True
    if snap.state in ("running", "stale"):  # has it just crossed the heartbeat timeout, either way?
        alive = [t for t in (snap.heartbeat_at, _mtime(run_dir / EVENTS_FILE)) if t]
        last_alive = max(alive) if alive else (snap.state_at or now)
        return (now - last_alive > timeout_s) != (snap.state == "stale")
    return False


def _load_config(run_dir: Path) -> tuple[dict[str, Any], RunConfig]:
    """config.json as saved and as a resolved RunConfig; ConfigError (naming the file) when it cannot be."""
    path = run_dir / CONFIG_FILE
    try:
        d = json.loads(runfiles.read_run_file(run_dir, CONFIG_FILE))
    except FileNotFoundError:
        raise ConfigError(CONFIG_FILE, "missing", source=str(run_dir)) from None
    except RunFileError as e:
        raise ConfigError(CONFIG_FILE, str(e).split(": ", 1)[-1], source=str(path)) from None
    except ValueError as e:
        raise ConfigError(CONFIG_FILE, f"is not valid JSON ({e})", source=str(path)) from None
    if not isinstance(d, dict):
        raise ConfigError(CONFIG_FILE, f"must be a JSON object, got {type(d).__name__}", source=str(path))
    try:
        return d, resolve(RunConfig.from_dict(d))  # a saved config is resolved already; this validates it
    except ConfigError as e:
        raise e.with_source(str(path)) from None


def _named_by_id(run_dir: Path) -> bool:
    name = run_dir.name
    return len(name) == RUN_ID_LENGTH and all(c in "0123456789abcdef" for c in name)


def _create_row(session: Session, run_dir: Path, now: float) -> Run:
    """A row for a run directory the database does not know (rebuilding it from the files)."""
    from cemctl.db.runs import new_run_row

    d, cfg = _load_config(run_dir)
    run = new_run_row(run_dir.name, cfg, run_dir.resolve(), now)
    run.config_json = canonical_json(d)
    run.state_reason = "found by sync"
    session.add(run)
    session.flush()
    session.add(RunEvent(run_id=run.id, time=now, state="planned", reason="found by sync", source="derived"))
    return run


@dataclass
class _Outcome:
    created: bool = False
    changed: bool = False
    metric_rows: int = 0
    event_rows: int = 0
    result: bool = False
    eval_rows: int = 0
    bad_lines: int = 0
    state: str = ""


# ---------------------------------------------------------------------------
# One function per run file: rows into the database, evidence for the state


def _ingest_metrics(session: Session, run: Run, run_dir: Path, out: _Outcome) -> bool:
    """New metrics.jsonl lines -> `metrics` rows and the run's progress columns; True if the file was rewritten."""
    rid = run.id
    lines = _read_new_lines(run_dir, METRICS_FILE, run.metrics_offset or 0, run.metrics_fingerprint or "")
    if lines.restarted:
        session.execute(delete(Metric).where(Metric.run_id == rid))
    rows: dict[tuple[str, int, str], dict[str, Any]] = {}
    for obj in lines.items:
        if obj is None or not isinstance(obj.get("kind"), str) or _num(obj.get("step"), int) is None:
            out.bad_lines += 1
            continue
        row: dict[str, Any] = {"run_id": rid, "kind": obj["kind"][:16], "step": _num(obj["step"], int), "series": _series(obj)}
        for col in _METRIC_COLUMNS:
            row[col] = _num(obj.get(col), int if col in _INT_METRIC_COLUMNS else float)
        extra = {k: v for k, v in obj.items() if k not in ("kind", "step", "series", *_METRIC_COLUMNS)}
        row["extra_json"] = json.dumps(extra, sort_keys=True) if extra else None
        rows[(row["kind"], row["step"], row["series"])] = row  # a re-logged step: the last line wins
    ordered = sorted(rows.values(), key=lambda r: (r["kind"], r["step"], r["series"]))
    _upsert(session, Metric, ordered, ["run_id", "kind", "step", "series"], ["tokens", "extra_json", *_METRIC_COLUMNS])
    out.metric_rows += len(ordered)
    run.metrics_offset, run.metrics_fingerprint = lines.new_offset, lines.fingerprint
    for r in ordered:
        if r["kind"] == "train":
            if (run.last_step or 0) <= r["step"]:
                run.last_step = r["step"]
                run.tokens = r["tokens"] if r["tokens"] is not None else run.tokens
                run.last_train_loss = r["train_loss"] if r["train_loss"] is not None else run.last_train_loss
                run.tokens_per_s = r["tokens_per_s"] if r["tokens_per_s"] is not None else run.tokens_per_s
        elif r["kind"] == "val" and r["val_loss"] is not None:
            run.last_val_loss = r["val_loss"]
    if lines.restarted:
        out.changed = True
    return lines.restarted


def _ingest_events(session: Session, run: Run, run_dir: Path, out: _Outcome) -> RunEvent | None:
    """New events.jsonl lines -> `run_events` rows (attempts, executor, job id); returns the last file event."""
    rid = run.id
    ev_lines = _read_new_lines(run_dir, EVENTS_FILE, run.events_offset or 0, run.events_fingerprint or "")
    first_line = run.events_lines or 0
    if ev_lines.restarted:
        session.execute(delete(RunEvent).where(RunEvent.run_id == rid, RunEvent.source == "file"))
        first_line = 0
        out.changed = True
    ev_rows = []
    for i, obj in enumerate(ev_lines.items):
        if obj is None or obj.get("state") not in RUN_STATES or _num(obj.get("time"), float) is None:
            out.bad_lines += 1
            continue
        ev_rows.append(
            {
                "run_id": rid, "time": _num(obj["time"], float), "state": obj["state"],
                "reason": str(obj.get("reason") or "")[:2000], "attempt": _num(obj.get("attempt"), int),
                "host": (str(obj["host"])[:255] if obj.get("host") else None), "pid": _num(obj.get("pid"), int),
                "source": "file", "line": first_line + i,
            }
        )
        if obj.get("executor"):
            run.executor = str(obj["executor"])[:32]
        if obj.get("job_id") is not None:
            run.job_id = str(obj["job_id"])[:128]
        if ev_rows[-1]["attempt"] is not None:
            run.attempts = max(run.attempts or 0, ev_rows[-1]["attempt"])
        if obj["state"] == "running" and run.started_at is None:
            run.started_at = ev_rows[-1]["time"]
    # A derived event is a placeholder for a line the writer had not appended yet (e.g. result.json
    # was read before the trainer's "done" line): the line replaces it, so a state is recorded once.
    prev_time = None if ev_lines.restarted else session.scalars(
        select(RunEvent.time).where(RunEvent.run_id == rid, RunEvent.source == "file").order_by(RunEvent.line.desc()).limit(1)
    ).first()
    for row in ev_rows:
        placeholder = delete(RunEvent).where(RunEvent.run_id == rid, RunEvent.source == "derived", RunEvent.state == row["state"])
        session.execute(placeholder if prev_time is None else placeholder.where(RunEvent.time >= prev_time))
        prev_time = row["time"]
    _upsert(session, RunEvent, ev_rows, ["run_id", "line"], None)
    out.event_rows += len(ev_rows)
    run.events_offset, run.events_fingerprint = ev_lines.new_offset, ev_lines.fingerprint
    run.events_lines = first_line + len(ev_lines.items)
    return session.scalars(
        select(RunEvent).where(RunEvent.run_id == rid, RunEvent.source == "file").order_by(RunEvent.line.desc()).limit(1)
    ).first()


def _ingest_heartbeat(run: Run, run_dir: Path, metrics_rewritten: bool) -> float | None:
    """heartbeat.json -> progress, host, pid, attempts; returns its mtime (None when missing or unreadable)."""
    hb_mtime = _mtime(run_dir / HEARTBEAT_FILE)
    hb = runfiles.run_json(run_dir, HEARTBEAT_FILE) if hb_mtime is not None else None
    if hb is None:
        run.heartbeat_at = hb_mtime  # None, or an unreadable file being replaced
        return None
    run.heartbeat_at = hb_mtime
    for col, key in (("last_step", "step"), ("total_steps", "total_steps"), ("tokens", "tokens")):
        value = _num(hb.get(key), int)
        if value is not None and not (col == "last_step" and (run.last_step or 0) > value and not metrics_rewritten):
            setattr(run, col, value)
    if hb.get("host"):
        run.host = str(hb["host"])[:255]
    run.pid = _num(hb.get("pid"), int) or run.pid
    attempt = _num(hb.get("attempt"), int)
    if attempt is not None:
        run.attempts = max(run.attempts or 0, attempt)
    if run.started_at is None:
        run.started_at = _num(hb.get("time"), float) or hb_mtime
    return hb_mtime


def _ingest_result(session: Session, run: Run, run_dir: Path, now: float, out: _Outcome) -> tuple[dict | None, float | None, str]:
    """result.json -> the `results` row; returns (result or None, its mtime, damage reason or "")."""
    res_mtime = _mtime(run_dir / RESULT_FILE)
    if res_mtime is None:
        return None, None, ""
    try:
        res: Any = json.loads(runfiles.read_run_file(run_dir, RESULT_FILE))
    except RunFileError as e:
        return None, res_mtime, f"result.json: {str(e).split(': ', 1)[-1]}"
    except (OSError, ValueError):  # being replaced, or garbled: judged again next time
        return None, res_mtime, "result.json: not valid JSON" if res_mtime < now - 60 else ""
    if not isinstance(res, dict) or res.get("state") not in RESULT_STATES:
        what = f"a JSON {type(res).__name__}" if not isinstance(res, dict) else f"state {res.get('state')!r}"
        return None, res_mtime, f"result.json: not a result ({what}; allowed states: {', '.join(RESULT_STATES)})"
    if res_mtime != run.result_mtime:
        values: dict[str, Any] = {"run_id": run.id, "state": res["state"], "recorded_at": now,
                                  "result_json": json.dumps(res, sort_keys=True, default=str),
                                  "error": (str(res["error"])[:4000] if res.get("error") else None)}
        for key in _RESULT_FLOATS:
            values[key] = _num(res.get(key), float)
        for key in _RESULT_INTS:
            values[key] = _num(res.get(key), int)
        _upsert(session, Result, [values], ["run_id"], [k for k in values if k != "run_id"])
        out.result = True
        run.result_mtime = res_mtime
        run.finished_at = res_mtime
        run.error = values["error"]
        for key in ("params_total", "params_non_embedding", "flops_per_token", "tokens"):
            if values[key] is not None:
                setattr(run, key, values[key])
        if values["steps"] is not None:
            run.last_step = values["steps"]
    return res, res_mtime, ""


def _ingest_evals(session: Session, run: Run, run_dir: Path, now: float, out: _Outcome) -> None:
    """Mirror RUN_DIR/evals.json into `evals` when its mtime changed (upsert; rows gone from the file deleted)."""
    mtime = _mtime(run_dir / EVALS_FILE)
    if mtime == run.evals_mtime:
        return
    data = runfiles.run_json(run_dir, EVALS_FILE) if mtime is not None else {"evals": []}
    if data is None:  # unreadable (being replaced): try again next time
        return
    items = data.get("evals") if isinstance(data.get("evals"), list) else []
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    for obj in items:
        attn, mlp = (_num(obj.get(k), int) if isinstance(obj, dict) else None for k in ("attn_steps", "mlp_steps"))
        if attn is None or mlp is None:
            out.bad_lines += 1
            continue
        row: dict[str, Any] = {"run_id": run.id, "attn_steps": attn, "mlp_steps": mlp,
                               "sublayer": str(obj.get("sublayer") or "both")[:16],
                               "evaluated_at": _num(obj.get("time"), float), "recorded_at": now}
        for key in _EVAL_FLOATS:
            row[key] = _num(obj.get(key), float)
        for key in _EVAL_INTS:
            row[key] = _num(obj.get(key), int)
        rows[(attn, mlp)] = row
    stale = select(Eval.id, Eval.attn_steps, Eval.mlp_steps).where(Eval.run_id == run.id)
    gone = [i for i, a, m in session.execute(stale).all() if (a, m) not in rows]
    if gone:
        session.execute(delete(Eval).where(Eval.id.in_(gone)))
    ordered = [rows[k] for k in sorted(rows)]
    _upsert(session, Eval, ordered, ["run_id", "attn_steps", "mlp_steps"],
            [k for k in (ordered[0] if ordered else {}) if k not in ("run_id", "attn_steps", "mlp_steps")])
    out.eval_rows += len(ordered) + len(gone)
    run.evals_mtime = mtime


def _config_damage(run: Run, run_dir: Path) -> str:
    """Why config.json cannot be trusted for this run ("" when it can): unreadable, or not this run's config."""
    mtime = _mtime(run_dir / CONFIG_FILE)
    if mtime is None:  # the planner writes it again from the recorded config (`cemctl plan` / `launch`)
        return "" if run.config_json else f"config.json is missing from {run_dir}"
    if mtime == run.config_mtime and run.state != "damaged":
        return ""
    try:
        d, cfg = _load_config(run_dir)
    except ConfigError as e:
        return str(e)
    if _named_by_id(run_dir) and run_id(cfg) != run_dir.name:
        return (f"config.json hashes to run id {run_id(cfg)}, not {run_dir.name} (edited, or a run directory "
                "copied under another name); `cemctl launch --redo-damaged` restores the recorded config")
    recorded = json.loads(run.config_json or "{}")
    if recorded and canonical_json(recorded) != canonical_json(d):
        return "config.json differs from the config recorded in the database"
    run.config_mtime = mtime
    return ""


def _damage(session: Session, run: Run, run_dir: Path, result: dict | None, result_damage: str) -> str:
    """Cross-checks of the run directory and the database; "" when they agree."""
    if result_damage:
        return result_damage
    config = _config_damage(run, run_dir)
    if config:
        return config
    if result is None:
        recorded = session.get(Result, run.id)
        if recorded is not None and recorded.state in ("done", "diverged"):
            return (f"result.json is gone; the database recorded {recorded.state} (test loss "
                    f"{recorded.test_loss if recorded.test_loss is not None else 'n/a'}); "
                    "`cemctl launch --redo-damaged` trains it again")
    return ""


def _ingest_locked(session: Session, run: Run, run_dir: Path, now: float, timeout_s: float, out: _Outcome) -> None:
    """Apply the run dir's files to `run` inside the caller's write transaction."""
    metrics_rewritten = _ingest_metrics(session, run, run_dir, out)
    last_event = _ingest_events(session, run, run_dir, out)
    hb_mtime = _ingest_heartbeat(run, run_dir, metrics_rewritten)
    result, res_mtime, result_damage = _ingest_result(session, run, run_dir, now, out)
    _ingest_evals(session, run, run_dir, now, out)
    evidence = Evidence(
        db_state=run.state if run.state != "damaged" else "planned", db_reason=run.state_reason or "",
        db_state_at=run.state_at,
        result_state=result["state"] if result else None, result_error=str((result or {}).get("error") or ""),
        result_time=res_mtime if result else None,
        event_state=last_event.state if last_event is not None else None,
        event_reason=last_event.reason or "" if last_event is not None else "",
        event_time=(_mtime(run_dir / EVENTS_FILE) or last_event.time) if last_event is not None else None,
        heartbeat_time=hb_mtime,
        damage=_damage(session, run, run_dir, result, result_damage),
    )
    _apply_state(session, run, derive_state(evidence, now, timeout_s), last_event, now, out)
    if run.run_dir is None:
        run.run_dir = str(run_dir.resolve())
    if out.metric_rows or out.event_rows or out.result or out.eval_rows:
        out.changed = True
    run.updated_at = now
    out.state = run.state


def _apply_state(session: Session, run: Run, derived: tuple[str, str], last_event: RunEvent | None, now: float,
                 out: _Outcome) -> None:
    state, reason = derived
    if state == run.state and (state != "damaged" or reason == run.state_reason):
        return
    if last_event is None or last_event.state != state:  # else events.jsonl records it already
        session.add(RunEvent(run_id=run.id, time=now, state=state, reason=reason[:2000], attempt=run.attempts,
                             source="derived"))
        out.event_rows += 1
    run.state, run.state_reason, run.state_at = state, reason, now
    out.changed = True


def _gone(engine: Engine, run_id_: str, run_dir: Path, now: float) -> _Outcome:
    """A known run whose directory is gone: damaged if it had a result or a job, else left as planned."""
    out = _Outcome()

    def write() -> _Outcome:
        with write_session(engine) as s:
            run = s.get(Run, run_id_)
            if run is None:
                return out
            had = s.get(Result, run_id_) is not None or run.state not in ("planned", "damaged")
            if had or run.state == "damaged":
                _apply_state(s, run, ("damaged", f"run directory {run_dir} is gone"), None, now, out)
            out.state = run.state
        return out

    return retry_locked(write)


def _ingest_one(engine: Engine, run_dir: Path, snap: _Snapshot | None, known: bool, now: float, timeout_s: float) -> _Outcome:
    out = _Outcome()
    if known and not os.path.isdir(run_dir):
        return _gone(engine, run_dir.name, run_dir, now)
    if known and not _needs_update(snap, run_dir, now, timeout_s):
        out.state = snap.state if snap else ""
        return out

    def write() -> _Outcome:
        o = _Outcome()
        with write_session(engine) as s:
            run = s.get(Run, run_dir.name)
            if run is None:
                run = _create_row(s, run_dir, now)
                o.created = True
            _ingest_locked(s, run, run_dir, now, timeout_s, o)
        return o

    return retry_locked(write)


def ingest_run(
    engine: Engine, run_dir: Path | str, *, heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S, now: float | None = None
) -> str:
    """Ingest one run directory (named by its run id); returns the run's state.

    Raises ConfigError if the database does not know the run and its config.json is missing or bad,
    RunFileError if a file may not be read (a symlink out of the run, a FIFO).
    """
    run_dir = Path(run_dir)
    now = time.time() if now is None else now
    with read_session(engine) as s:
        run = s.get(Run, run_dir.name)
        snap = _Snapshot.of(run) if run is not None else None
    return _ingest_one(engine, run_dir, snap, run is not None, now, heartbeat_timeout_s).state


def _run_dirs(root: Path, wanted: set[str] | None, known: set[str], stats: "IngestStats") -> dict[str, Path]:
    """The run directories under `root` (plain folders inside it); anything else is reported, not followed."""
    dirs: dict[str, Path] = {}
    if not root.is_dir():
        return dirs
    real_root = os.path.realpath(root)
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as e:
        stats.errors.append(f"{root}: cannot list: {e.strerror or e}")
        return dirs
    for entry in entries:
        if entry.name.startswith(".") or (wanted is not None and entry.name not in wanted):
            continue
        path = Path(entry.path)
        try:
            if entry.is_symlink():
                target = os.path.realpath(entry.path)
                if os.path.dirname(target) != real_root and not target.startswith(real_root + os.sep):
                    stats.errors.append(f"{path}: refused: a symlink out of the runs folder (to {target})")
                    continue
                if not os.path.isdir(target):
                    stats.errors.append(f"{path}: skipped: a symlink that leads to no folder (a loop, or missing)")
                    continue
            elif not entry.is_dir(follow_symlinks=False):
                continue
        except OSError as e:
            stats.errors.append(f"{path}: skipped: {e.strerror or e}")
            continue
        if entry.name in known or os.path.lexists(os.path.join(entry.path, CONFIG_FILE)):
            dirs[entry.name] = path
    return dirs


def sync_runs(
    engine: Engine,
    runs_root: Path | str,
    *,
    heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S,
    now: float | None = None,
    run_ids: Iterable[str] | None = None,
) -> IngestStats:
    """Ingest every run dir under `runs_root` (and every known run's recorded dir).

    `run_ids` limits it to those runs. A bad run dir is reported in
    `stats.errors` and skipped; it never stops the others.
    """
    root = Path(runs_root)
    now = time.time() if now is None else now
    wanted = set(run_ids) if run_ids is not None else None
    with read_session(engine) as s:
        q = select(Run)
        if wanted is not None:
            q = q.where(Run.id.in_(wanted))
        snaps = {r.id: (_Snapshot.of(r), r.run_dir) for r in s.scalars(q)}
    stats = IngestStats()
    dirs = _run_dirs(root, wanted, set(snaps), stats)
    for rid, (snap, recorded) in snaps.items():
        if rid in dirs:
            continue
        path = Path(recorded) if recorded else root / rid
        if os.path.isdir(path) or snap.result_mtime is not None or snap.state not in ("planned", "damaged"):
            dirs[rid] = path  # a known run whose folder is gone is judged by _gone; a planned one waits for its plan
    for rid, run_dir in dirs.items():
        stats.runs_seen += 1
        snap = snaps.get(rid, (None, None))[0]
        try:
            out = _ingest_one(engine, run_dir, snap, rid in snaps, now, heartbeat_timeout_s)
        except (CemError, OSError, ValueError, ArithmeticError) as e:  # one bad run dir never stops a sync
            stats.errors.append(" ".join(f"{run_dir}: {e}".split()) if not isinstance(e, CemError) else str(e))
            continue
        stats.runs_created += out.created
        stats.runs_changed += out.changed and not out.created
        stats.metric_rows += out.metric_rows
        stats.event_rows += out.event_rows
        stats.results += out.result
        stats.eval_rows += out.eval_rows
        stats.bad_lines += out.bad_lines
        if out.state:
            stats.states[out.state] += 1
    return stats
