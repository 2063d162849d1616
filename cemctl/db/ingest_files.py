"""One function per run file: its new rows into the database, its evidence for the state (`cemctl sync`).

    _ingest_metrics   metrics.jsonl  -> `metrics` rows, the run's progress columns
    _ingest_events    events.jsonl   -> `run_events` rows (attempts, executor, job id)
    _ingest_heartbeat heartbeat.json -> progress, host, pid; its mtime (a sign of life)
    _ingest_result    result.json    -> the `results` row, or why it is no result
    _ingest_evals     evals.json     -> `evals` rows (`cemctl eval`)
    _ingest_environment environment.json -> the `run_environment` row (what the run trained on)

The logs are read incrementally from a stored byte offset, with a fingerprint
of the bytes before it (a rewritten file is read again from the start); a
truncated last line waits for the next call. Every read goes through
`cem_core.runfiles` (regular files inside the run directory, never blocking).
Used by `cemctl.db.ingest`; upserts work on SQLite and PostgreSQL.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from sqlalchemy import BigInteger, Float, Integer, delete, select
from sqlalchemy.orm import Session

from cem_core import runfiles
from cem_core.runfiles import EVALS_FILE, EVENTS_FILE, METRICS_FILE, RESULT_FILE, RUN_STATES, RunFileError, number
from cem_core.runfolder import RunFolder, mtime as _mtime
from cemctl.db.models import Eval, Metric, Result, Run, RunEnvironment, RunEvent

_FINGERPRINT_BYTES = 256
_METRIC_COLUMNS = ("tokens", "time_s", "train_loss", "val_loss", "lr", "grad_norm", "tokens_per_s")
_INT_METRIC_COLUMNS = ("tokens",)
_EVAL_FLOATS = ("test_loss", "test_ppl")
_EVAL_INTS = ("eval_steps", "test_tokens", "flops_per_token", "trained_attn_steps", "trained_mlp_steps")


def _fingerprint(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16] if data else ""


@dataclass
class _Lines:
    items: list[dict[str, Any] | None]  # None for an unreadable complete line
    start_offset: int
    new_offset: int
    fingerprint: str
    restarted: bool  # the file was rewritten: re-read from the start


CHUNK_BYTES = 8 << 20  # a log is read in chunks this size: memory stays bounded whatever the file's size
MAX_LINE_BYTES = 1 << 20  # no line is this long: a longer one is skipped (a bad line), never held whole


def _parse_lines(complete: bytes) -> list[dict[str, Any] | None]:
    items: list[dict[str, Any] | None] = []
    for raw in complete.split(b"\n")[:-1]:
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            obj = None
        items.append(obj if isinstance(obj, dict) else None)
    return items


def _read_new_lines(run_dir: Path, name: str, offset: int, fingerprint: str) -> _Lines:
    """The complete lines after `offset` (all of them when the bytes before it changed)."""
    items: list[dict[str, Any] | None] = []
    lines = _stream_new_lines(run_dir, name, offset, fingerprint, lambda batch, _: items.extend(batch))
    lines.items = items
    return lines


def _stream_new_lines(run_dir: Path, name: str, offset: int, fingerprint: str,
                      on_batch: Callable[[list[dict[str, Any] | None], bool], None],
                      chunk_bytes: int = CHUNK_BYTES) -> _Lines:
    """The complete lines after `offset` (all of them when the bytes before it changed: `restarted`) go to
    `on_batch(items, restarted)` a chunk at a time (never the whole file in memory; the file is opened once,
    confined to the run directory); returns the offsets and the fingerprint of the bytes before the new offset."""
    try:
        f = runfiles.open_run_file(run_dir, name)
    except FileNotFoundError:
        return _Lines([], 0, 0, "", restarted=offset > 0)
    with f:
        start = offset
        if offset > 0:
            head = max(0, offset - _FINGERPRINT_BYTES)
            f.seek(head)
            before = f.read(offset - head)
            if len(before) < offset - head or _fingerprint(before) != fingerprint:
                start = 0
        restarted = start == 0 and offset > 0
        f.seek(start)
        pos, last = start, b""
        carry: bytes | None = b""  # None: inside a line too long to keep
        while pos - start <= runfiles.MAX_LOG_BYTES:
            data = f.read(chunk_bytes)
            if not data:
                break
            pos += len(data)
            if carry is None:  # inside a line too long to keep: skip to its end
                nl = data.find(b"\n")
                if nl < 0:
                    continue
                data, carry = data[nl + 1:], b""
            data = carry + data
            cut = data.rfind(b"\n") + 1
            complete, carry = data[:cut], data[cut:]
            if len(carry) > MAX_LINE_BYTES:
                on_batch([None], restarted)  # one bad line
                carry = None
            if not complete:
                continue
            last = (last + complete[-_FINGERPRINT_BYTES:])[-_FINGERPRINT_BYTES:]
            on_batch(_parse_lines(complete), restarted)
        new_offset = pos - len(carry or b"") if carry is not None else pos
        if len(last) < _FINGERPRINT_BYTES and new_offset > len(last):  # the bytes just before new_offset
            lo = max(0, new_offset - _FINGERPRINT_BYTES)
            f.seek(lo)
            last = f.read(new_offset - lo)
    return _Lines([], start, new_offset, _fingerprint(last), restarted=restarted)


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
    if session.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(model)
    from sqlalchemy.dialects import sqlite

    return sqlite.insert(model)


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
class Outcome:
    created: bool = False
    changed: bool = False
    metric_rows: int = 0
    event_rows: int = 0
    result: bool = False
    eval_rows: int = 0
    bad_lines: int = 0
    state: str = ""
    warnings: list[str] | None = None  # run files left out (one line each, naming the file)


# ---------------------------------------------------------------------------
# One function per run file: rows into the database, evidence for the state


def _ingest_metrics(session: Session, run: Run, run_dir: Path, out: Outcome) -> bool:
    """New metrics.jsonl lines -> `metrics` rows and the run's progress columns; True if the file was rewritten."""
    rid = run.id
    state = {"cleared": False}

    def batch(items: list[dict[str, Any] | None], restarted: bool) -> None:
        if restarted and not state["cleared"]:
            session.execute(delete(Metric).where(Metric.run_id == rid))
            state["cleared"] = True
        rows: dict[tuple[str, int, str], dict[str, Any]] = {}
        for obj in items:
            if obj is None or not isinstance(obj.get("kind"), str) or number(obj.get("step"), int) is None:
                out.bad_lines += 1
                continue
            row: dict[str, Any] = {"run_id": rid, "kind": obj["kind"][:16], "step": number(obj["step"], int),
                                   "series": _series(obj)}
            for col in _METRIC_COLUMNS:
                row[col] = number(obj.get(col), int if col in _INT_METRIC_COLUMNS else float)
            extra = {k: v for k, v in obj.items() if k not in ("kind", "step", "series", *_METRIC_COLUMNS)}
            row["extra_json"] = json.dumps(extra, sort_keys=True) if extra else None
            rows[(row["kind"], row["step"], row["series"])] = row  # a re-logged step: the last line wins
        ordered = sorted(rows.values(), key=lambda r: (r["kind"], r["step"], r["series"]))
        _upsert(session, Metric, ordered, ["run_id", "kind", "step", "series"], ["tokens", "extra_json", *_METRIC_COLUMNS])
        out.metric_rows += len(ordered)
        for r in ordered:
            if r["kind"] == "train":
                if (run.last_step or 0) <= r["step"]:
                    run.last_step = r["step"]
                    run.tokens = r["tokens"] if r["tokens"] is not None else run.tokens
                    run.last_train_loss = r["train_loss"] if r["train_loss"] is not None else run.last_train_loss
                    run.tokens_per_s = r["tokens_per_s"] if r["tokens_per_s"] is not None else run.tokens_per_s
            elif r["kind"] == "val" and r["val_loss"] is not None:
                run.last_val_loss = r["val_loss"]

    lines = _stream_new_lines(run_dir, METRICS_FILE, run.metrics_offset or 0, run.metrics_fingerprint or "", batch)
    if lines.restarted and not state["cleared"]:  # rewritten to nothing new: its old rows go all the same
        session.execute(delete(Metric).where(Metric.run_id == rid))
    run.metrics_offset, run.metrics_fingerprint = lines.new_offset, lines.fingerprint
    if lines.restarted:
        out.changed = True
    return lines.restarted


def _ingest_events(session: Session, run: Run, run_dir: Path, out: Outcome) -> RunEvent | None:
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
        if obj is None or obj.get("state") not in RUN_STATES or number(obj.get("time"), float) is None:
            out.bad_lines += 1
            continue
        ev_rows.append(
            {
                "run_id": rid, "time": number(obj["time"], float), "state": obj["state"],
                "reason": str(obj.get("reason") or "")[:2000], "attempt": number(obj.get("attempt"), int),
                "host": (str(obj["host"])[:255] if obj.get("host") else None), "pid": number(obj.get("pid"), int),
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


def _ingest_heartbeat(run: Run, folder: RunFolder, metrics_rewritten: bool) -> None:
    """heartbeat.json (as the folder was read) -> progress, host, pid, attempts."""
    hb = folder.heartbeat
    run.heartbeat_at = folder.heartbeat_mtime
    if hb is None:
        return
    for col, key in (("last_step", "step"), ("total_steps", "total_steps"), ("tokens", "tokens")):
        value = number(hb.get(key), int)
        if value is not None and not (col == "last_step" and (run.last_step or 0) > value and not metrics_rewritten):
            setattr(run, col, value)
    if hb.get("host"):
        run.host = str(hb["host"])[:255]
    run.pid = number(hb.get("pid"), int) or run.pid
    attempt = number(hb.get("attempt"), int)
    if attempt is not None:
        run.attempts = max(run.attempts or 0, attempt)
    if run.started_at is None:
        run.started_at = number(hb.get("time")) or folder.heartbeat_mtime


def _result_event_time(session: Session, run: Run, state: str) -> float | None:
    """When the run's own event log says it reached `state`: an imported or copied result.json has a new mtime, and
    a run trained yesterday would otherwise show a day of elapsed time."""
    when = session.scalars(
        select(RunEvent.time).where(RunEvent.run_id == run.id, RunEvent.source == "file", RunEvent.state == state)
        .order_by(RunEvent.line.desc()).limit(1)
    ).first()
    if when is None or (run.started_at is not None and when < run.started_at):
        return None
    return float(when)


def _ingest_result(session: Session, run: Run, folder: RunFolder, now: float, out: Outcome) -> None:
    """result.json (as the folder was read, by the one rule of what a result is) -> the `results` row."""
    res, res_mtime = folder.result.result, folder.result.mtime
    if res is None or res_mtime == run.result_mtime:
        return
    values: dict[str, Any] = {"run_id": run.id, "recorded_at": now, "result_json": json.dumps(
        res.to_json(), sort_keys=True, default=str), **{c: getattr(res, c) for c in _RESULT_COLUMNS}}
    values["error"] = res.error[:4000] if res.error else None
    _upsert(session, Result, [values], ["run_id"], [k for k in values if k != "run_id"])
    out.result = True
    run.result_mtime = res_mtime
    run.finished_at = _result_event_time(session, run, res.state) or res_mtime
    run.error = values["error"]
    for key in ("params_total", "params_non_embedding", "flops_per_token", "tokens"):
        if values[key] is not None:
            setattr(run, key, values[key])
    if res.steps is not None:
        run.last_step = res.steps


_RESULT_COLUMNS = tuple(c.name for c in Result.__table__.columns
                        if c.name not in ("run_id", "result_json", "recorded_at"))


def _ingest_evals(session: Session, run: Run, run_dir: Path, now: float, out: Outcome) -> None:
    """Mirror RUN_DIR/evals.json into `evals` when its mtime changed (upsert; rows gone from the file deleted)."""
    mtime = _mtime(run_dir / EVALS_FILE)
    if mtime == run.evals_mtime:
        return
    from cem_core.runfiles.evals import EvalsUnreadable, read_evals

    try:
        items = read_evals(run_dir) if mtime is not None else []
    except EvalsUnreadable as e:  # the rows mirrored before stay; the file is named (never read as "none")
        out.warnings = [*(out.warnings or []), str(e)]
        return
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    for obj in items:
        attn, mlp = (number(obj.get(k), int) if isinstance(obj, dict) else None for k in ("attn_steps", "mlp_steps"))
        if attn is None or mlp is None:
            out.bad_lines += 1
            continue
        row: dict[str, Any] = {"run_id": run.id, "attn_steps": attn, "mlp_steps": mlp,
                               "sublayer": str(obj.get("sublayer") or "both")[:16],
                               "evaluated_at": number(obj.get("time"), float), "recorded_at": now}
        for key in _EVAL_FLOATS:
            row[key] = number(obj.get(key), float)
        for key in _EVAL_INTS:
            row[key] = number(obj.get(key), int)
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




_ENV_COLUMNS = {c.name: c for c in RunEnvironment.__table__.columns
                if c.name not in ("run_id", "environment_json", "file_mtime", "recorded_at")}


def _ingest_environment(session: Session, run: Run, run_dir: Path, now: float, out: Outcome) -> None:
    """Mirror RUN_DIR/environment.json into `run_environment` when its mtime changed. A run without one (trained
    before it was recorded) has no row; a damaged one keeps the row it had and is reported (`out.warnings`)."""
    from cem_core.errors import ConfigError
    from cem_core.runfiles.environment import read_environment
    from cem_core.runfiles.files import ENVIRONMENT_FILE

    mtime = _mtime(run_dir / ENVIRONMENT_FILE)
    if mtime == run.environment_mtime:
        return
    try:
        env = read_environment(run_dir) if mtime is not None else None
    except ConfigError as e:
        out.warnings = [*(out.warnings or []), str(e)]
        return
    if env is None:
        session.execute(delete(RunEnvironment).where(RunEnvironment.run_id == run.id))
    else:
        values: dict[str, Any] = {"run_id": run.id, "file_mtime": mtime, "recorded_at": now,
                                  "environment_json": json.dumps(env, sort_keys=True, default=str)}
        for name, col in _ENV_COLUMNS.items():
            value = env.get(name)
            if isinstance(col.type, (BigInteger, Integer)):
                values[name] = number(value, int)
            elif isinstance(col.type, Float):
                values[name] = number(value, float)
            else:
                length = getattr(col.type, "length", None) or 255
                values[name] = str(value)[:length] if value is not None else None
        _upsert(session, RunEnvironment, [values], ["run_id"], [k for k in values if k != "run_id"])
    run.environment_mtime = mtime
    out.changed = True


def _ingest_tags(session: Session, run: Run, run_dir: Path, now: float, out: Outcome) -> None:
    """Mirror RUN_DIR/tags.json into `run_tags` when its mtime changed. A tags.json that cannot be read keeps the
    row it had (never read as "no tags") and is reported (`out.warnings`); a rebuild marks the row stale
    (file_mtime NULL: `cemctl.db.projection`), so it is read again, and dropped when the file is gone."""
    from cem_core.runfiles.tags import TAGS_FILE, TagsUnreadable, read_tags
    from cemctl.db.models import RunTags

    mtime = _mtime(run_dir / TAGS_FILE)
    row = session.get(RunTags, run.id)
    if row is not None and mtime is None and row.file_mtime is None:  # stale, and its file is gone: no tags
        session.delete(row)
        out.changed = True
        return
    if row is not None and row.file_mtime == mtime:
        return
    if row is None and mtime is None:
        return
    try:
        record = read_tags(run_dir)
    except TagsUnreadable as e:
        out.warnings = [*(out.warnings or []), str(e)]
        return
    if row is None:
        row = RunTags(run_id=run.id)
        session.add(row)
    row.tags_json = json.dumps(record.to_dict()["tags"], sort_keys=True)
    row.notes_json = json.dumps(record.notes)
    row.file_mtime, row.recorded_at = mtime, now
    out.changed = True


def _ingest_history(session: Session, run: Run, run_dir: Path, out: Outcome) -> None:
    """Mirror the results kept in the run's set-aside folders (`.outdated-*`, `.damaged-*`) into `result_history`."""
    from cem_core.runfiles.results import aside_folders, aside_time, result_problem
    from cemctl.db.models import ResultHistory

    found: dict[str, dict[str, Any]] = {}
    for folder in aside_folders(run_dir):
        try:
            res = json.loads(runfiles.read_run_file(run_dir, f"{folder}/{RESULT_FILE}"))
        except (FileNotFoundError, RunFileError, OSError, ValueError):
            continue  # no result in it (a damaged run set aside before it finished), or none readable
        if result_problem(res) and not isinstance(res, dict):
            continue
        code = res.get("code_fingerprint")
        found[folder] = {"run_id": run.id, "folder": folder[:128], "state": str(res.get("state"))[:16],
                         "test_loss": number(res.get("test_loss"), float), "val_loss": number(res.get("val_loss"), float),
                         "code_fingerprint": code if isinstance(code, str) and code.isalnum() and len(code) <= 32
                         else None, "set_aside_at": aside_time(folder),
                         "result_json": json.dumps(res, sort_keys=True, default=str)}
    have = {f: i for i, f in session.execute(select(ResultHistory.id, ResultHistory.folder)
                                             .where(ResultHistory.run_id == run.id)).all()}
    gone = [i for f, i in have.items() if f not in found]
    if gone:
        session.execute(delete(ResultHistory).where(ResultHistory.id.in_(gone)))
    new = [v for f, v in found.items() if f not in have]
    if new:
        _upsert(session, ResultHistory, new, ["run_id", "folder"], [k for k in new[0] if k not in ("run_id", "folder")])
    if gone or new:
        out.changed = True
