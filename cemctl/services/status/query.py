"""What `cemctl status` asks for, as data: sync the run dirs, then read the rows (`status_snapshot`).

    reader, can_write = open_status_db(url)           # never creates a database; read-only where it must
    statuses = status_snapshot(engine, runs_root, "fig2a", sync=can_write, limit=50, states=["failed"],
                               where=["attn_steps>=2"], sort="-test_loss", fields=["test", "tag.phase"])
    status_json(statuses)                             # the same rows, complete, as one JSON document
    grid_progress(statuses)                           # GridProgress(running=3, queued=5, eta_s=742.0): every run's

The command (`cemctl/commands/status.py`) loops for `--watch` and renders the rows
(`cemctl/commands/views/status.py`); nothing here prints.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from cem_core.errors import ConfigError
from cem_core.runfiles import RUN_STATES
from cemctl.services.status.collect import ExperimentStatus, collect_status, refresh

if TYPE_CHECKING:  # pragma: no cover
    from sqlalchemy.engine import Engine

    from cemctl.db.read import Reader
    from cemctl.records.record import RunRecord


def open_status_db(url: str) -> tuple["Reader", bool]:
    """The results database for reading (never created; `cemctl.db.read`: a SQLite file through `sqlite3`,
    read-only); whether status may sync run dirs into it."""
    from cemctl.db.read import open_reader, writable

    reader = open_reader(url, migrate=True)
    return reader, writable(reader)


def sync_before_reading(url: str, runs_root: Path | str, experiment: str | None = None) -> bool:
    """Bring the database up to date with the run folders before a command reads its records (`compare`, `export`):
    the same incremental sync as `status` (only the files that changed are read), so a run that finished while no
    orchestrator was there to record it shows its result, not the state last recorded. False when the database
    cannot be written (a read-only file, a full disk): the command then reads it as it is."""
    from cemctl.db.roots import resolve_runs_root

    reader, can_sync = open_status_db(url)
    if not can_sync:
        return False
    refresh(reader, resolve_runs_root(reader, runs_root), experiment)
    return True


def parse_states(text: str | None) -> list[str] | None:
    """'failed,running' -> ['failed', 'running']; an unknown state is a ConfigError listing the states."""
    if not text:
        return None
    states = [s.strip() for s in text.split(",") if s.strip()]
    for s in states:
        if s not in RUN_STATES:
            raise ConfigError("--state", f"unknown state {s!r}", value=s, allowed=RUN_STATES)
    return states or None


def table_limit(source: "Engine | Reader", experiment: str | None, limit: int) -> int:
    """`limit` rows for one experiment; with every experiment shown, a budget of `limit` rows shared
    between them (at least 10 each; unfinished runs first), so the tables stay quick to draw."""
    if limit <= 0 or experiment is not None:
        return limit
    from cemctl.db.read import open_reader

    n = max(1, open_reader(source).rows("SELECT COUNT(*) FROM experiments")[0][0])
    return max(min(10, limit), limit // n)


def status_snapshot(source: "Engine | Reader", runs_root: Path, experiment: str | None = None, *, sync: bool = True,
                    heartbeat_timeout_s: float | None = None, limit: int = 0, scale: str | None = None,
                    states: Sequence[str] | None = None, where: Sequence[str] = (),
                    sort: str | Sequence[str] | None = None,
                    fields: Sequence[str] = (), arms: bool = False, now: float | None = None) -> list[ExperimentStatus]:
    """Sync (unless `sync` is false), then one ExperimentStatus per experiment: its run records (`cemctl.records`)
    meeting `states` and `where` (`--where` text), ordered by `sort` (`--sort` text: FIELD, -FIELD or FIELD:desc),
    at most `limit` each (0: all); `counts` and totals cover every run. `fields`: the fields a view will show
    (any name `cemctl.records.fields.resolve` takes), so only what they need is read."""
    from cemctl.db.read import open_reader
    from cemctl.db.roots import resolve_runs_root
    from cemctl.records.fields import resolve_all
    from cemctl.records.where import parse_where

    reader = open_reader(source)
    conds = parse_where(where)
    order = parse_sort(sort)
    names = resolve_all(fields, what="--columns") if fields else []
    root = resolve_runs_root(reader, runs_root)  # a copied project reads its own runs
    if sync:
        refresh(reader, root, experiment, heartbeat_timeout_s=heartbeat_timeout_s)
    return collect_status(reader, experiment, limit=table_limit(reader, experiment, limit), scale=scale,
                          states=states, where=conds, sort=order, fields=names, arms=arms, runs_root=root, now=now)


def parse_sort(text: str | Sequence[str] | None) -> list[tuple[str, bool]] | None:
    """`test`, `-test` or `test:desc`, several separated by commas or given as a list (`--sort a --sort b`, the same
    as `--sort a,b`: by a, ties by b) -> [(canonical field, descending), ...]; an unknown field is one line."""
    if not text:
        return None
    from cemctl.records.fields import resolve

    items = [t for part in ([text] if isinstance(text, str) else list(text)) for t in str(part).split(",")]
    out = []
    for item in items:
        name, descending = item.strip(), False
        if not name:
            continue
        if name.startswith("-"):
            name, descending = name[1:], True
        elif name.endswith(":desc") or name.endswith(":asc"):
            name, _, direction = name.rpartition(":")
            descending = direction == "desc"
        out.append((resolve(name, what="--sort"), descending))
    return out or None


@dataclass(frozen=True)
class GridProgress:
    """What is left of the runs `status` collected: counts and ETA (`cemctl.records.progress.grid_eta_s`)."""

    running: int
    queued: int
    eta_s: float | None  # None: no finished run yet to time the rest from


def grid_progress(statuses: list[ExperimentStatus]) -> GridProgress | None:
    """The grid's running and queued runs and its ETA (None when nothing is left). The counts are every run's
    (`counts`), not the rows shown: with `--limit` (50 rows shared by every experiment by default) a grid of 80
    queued runs showed as 12 queued and its ETA was cut to match. Runs not shown are timed at the finished runs'
    pace, and the pace is every done run's wall time, shown or not."""
    from collections import Counter

    from cemctl.records.progress import grid_eta_s

    runs = [r for e in statuses for r in e.runs]
    running = sum(e.counts.get("running", 0) for e in statuses)
    queued = sum(e.counts.get("queued", 0) for e in statuses)
    if not running and not queued:
        return None
    shown = Counter(r.state for r in runs)
    unseen: list[Mapping[str, Any]] = [{"state": "running"}] * max(0, running - shown["running"])
    unseen += [{"state": "queued"}] * max(0, queued - shown["queued"])
    done = [{"state": "done", "wall_time_s": w} for e in statuses for w in (e.done_wall_s or [])]
    return GridProgress(running, queued, grid_eta_s([*(r for r in runs if r.state != "done"), *unseen, *done]))


def status_json(statuses: list[ExperimentStatus], now: float | None = None) -> dict[str, Any]:
    """Every field of every run shown: the run records, as export and the API give them (every catalogue field,
    every config key, `tag.NAME`), and `axes`: the grid's varied keys of the run."""
    now = time.time() if now is None else now
    return {
        "time": now,
        "experiments": [
            {"name": e.name, "counts": e.counts, "total_runs": e.total, "outdated": e.outdated,
             "matching": e.matching, "runs": [_json_record(r) for r in e.runs]}
            for e in statuses
        ],
    }


def _json_record(r: "RunRecord") -> dict[str, Any]:
    return {**r.as_dict(), "axes": r.axes}
