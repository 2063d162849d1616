"""The database as a projection of the run folders: a run's derived rows, forgotten and rebuilt in one place.

    derived_tables()                         -> [metrics, results, evals, run_tags, run_environment, ...]
    rebuild_run(engine, runs_root, run_id)   # forget every derived row of the run, read its folder again;
                                             # -> Rebuilt(state, warnings: files that could not be read)
    forget_run(session, run_id)              # inside a caller's write transaction
    holds_rows(session, run_id)              # the derived tables holding rows of the run
    remove_runs(session, run_ids)            # runs gone outright: every row keyed by them, then their own

A run's rows in every table keyed by its id (a foreign key to `runs.id`) are derived from
its folder: `derived_tables` finds them from the schema (`cemctl.db.models.Base.metadata`),
so a table added later is rebuilt too, never forgotten by a hand list. Two exceptions are
declared in the schema itself, not here: the plan's links (`experiment_runs`, what the
planner recorded) and rows a table marks as its own (`run_events` keeps the database's
derived judgements: `__table_args__` info `{"projection": {"keep_where": ("source", "derived")}}`; `run_tags`,
what the user wrote, is marked stale, `{"projection": {"stale_column": "file_mtime"}}`, and replaced only when
its file can be read: a tags.json that cannot be read never loses the tags and notes the database holds).
The run's own row keeps what the plan owns (`PLAN_COLUMNS`) and every other column goes
back to its default before the folder is read again.

Every command that changes a run's files and must not leave rows of what was there
before (rerun, redo, repair, import) calls `rebuild_run`: forgetting and re-reading
happen in one transaction, so a reader never sees the run half-forgotten.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Table, and_, delete, not_, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from cemctl.db.models import Base, Run

PLAN_TABLES = ("experiment_runs",)  # what the planner recorded: links to experiments, not read from the folder
PLAN_COLUMNS = ("id", "config_json", "run_dir", "created_at", "total_steps", "params_total", "params_non_embedding",
                "flops_per_token")  # the run row's columns the plan owns; every other one is read from the folder


def derived_tables() -> list[Table]:
    """Every table keyed by a run id, derived from the run's folder (found from the schema)."""
    return [t for t in _run_keyed_tables() if t.name not in PLAN_TABLES]


def _run_keyed_tables() -> list[Table]:
    """Every table with a foreign key to `runs.id` (the plan's links included), the run table itself not."""
    return [t for t in Base.metadata.sorted_tables
            if t.name != Run.__tablename__ and any(fk.column.table.name == Run.__tablename__ for fk in t.foreign_keys)]


def _run_column(table: Table) -> Any:
    for fk in table.foreign_keys:
        if fk.column.table.name == Run.__tablename__:
            return fk.parent
    raise KeyError(table.name)


def forget_run(session: Session, run_id: str, *, reason: str = "", now: float | None = None) -> dict[str, int]:
    """Delete the run's derived rows from every derived table and reset its row's derived columns (inside the
    caller's transaction); returns {table: rows deleted}."""
    counts: dict[str, int] = {}
    for table in derived_tables():
        cond = _run_column(table) == run_id
        rules = table.info.get("projection") or {}
        if rules.get("stale_column"):  # marked to be read again; the file's reader replaces or keeps them
            session.execute(update(table).where(cond).values({rules["stale_column"]: None}))
            counts[table.name] = 0
            continue
        keep = rules.get("keep_where")
        if keep:
            column, value = keep
            cond = and_(cond, not_(table.c[column] == value))
        gone: Any = session.execute(delete(table).where(cond))  # a CursorResult: it has the rows deleted
        counts[table.name] = gone.rowcount or 0
    row = session.get(Run, run_id)
    if row is not None:
        for col in Run.__table__.columns:
            if col.name in PLAN_COLUMNS:
                continue
            default = col.default.arg if col.default is not None and not callable(col.default.arg) else None
            setattr(row, col.key, default)
        row.state, row.state_reason = "planned", reason or "rebuilt from its folder"
        row.state_at = row.updated_at = time.time() if now is None else now
        row.attempts = 0
    return counts


def holds_rows(session: Session, run_id: str) -> list[str]:
    """The derived tables that hold rows of the run (a table's own rows, `keep_where`, count too)."""
    from sqlalchemy import exists, select

    return [t.name for t in derived_tables() if session.scalar(select(exists().where(_run_column(t) == run_id)))]


def remove_runs(session: Session, run_ids: list[str], chunk: int = 500) -> None:
    """Delete runs outright (inside the caller's transaction): their rows in every table keyed by a run id, the
    plan's links included (found from the schema, as `derived_tables`), then their own rows."""
    tables = _run_keyed_tables()
    for i in range(0, len(run_ids), chunk):
        part = run_ids[i:i + chunk]
        for table in tables:
            session.execute(delete(table).where(_run_column(table).in_(part)))
        session.execute(delete(Run).where(Run.id.in_(part)))


@dataclass
class Rebuilt:
    state: str  # the run's state read from its folder again
    warnings: list[str]  # run files that could not be read (one line each); their rows are kept as they were


def rebuild_run(engine: Engine, runs_root: Path | str, run_id: str, *, reason: str = "",
                heartbeat_timeout_s: float | None = None, now: float | None = None) -> Rebuilt:
    """Forget every derived row of the run and read its folder again, in one transaction."""
    from cem_core import runfiles
    from cemctl.db.engine import retry_locked, write_session
    from cemctl.db.ingest import _ingest_locked
    from cemctl.db.ingest_files import Outcome
    from cemctl.db.models import RunEvent

    now = time.time() if now is None else now
    timeout_s = runfiles.heartbeat_timeout_s(heartbeat_timeout_s)
    run_dir = Path(runs_root) / run_id

    def write() -> Rebuilt:
        out = Outcome()
        with write_session(engine) as s:
            forget_run(s, run_id, reason=reason, now=now)
            run = s.get(Run, run_id)
            if run is None:
                raise KeyError(run_id)
            if reason:
                s.add(RunEvent(run_id=run_id, time=now, state="planned", source="derived", reason=reason))
            s.flush()
            _ingest_locked(s, run, run_dir, now, timeout_s, out)
            return Rebuilt(run.state, list(out.warnings or []))

    return retry_locked(write)
