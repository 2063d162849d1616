"""What `cemctl status` asks for, as data: sync the run dirs, then read the rows (`status_snapshot`).

    engine, can_write = open_status_db(url)           # never creates a database; read-only where it must
    statuses = status_snapshot(engine, runs_root, "fig2a", sync=can_write, limit=50, states=["failed"])
    status_json(statuses)                             # the same rows, complete, as one JSON document

The command (`cemctl/commands/status.py`) loops for `--watch` and renders the rows
(`cemctl/commands/views/status.py`); nothing here prints.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

from sqlalchemy.engine import Engine

from cem_core.errors import ConfigError
from cem_core.runfiles import RUN_STATES
from cemctl.services.status.collect import NO_EXPERIMENT, ExperimentStatus, collect_status, refresh


def open_status_db(url: str) -> tuple[Engine, bool]:
    """The results database for reading (never created); whether status may sync run dirs into it."""
    from cemctl.db.engine import is_readonly, open_existing_db

    engine = open_existing_db(url)
    return engine, not is_readonly(engine)


def parse_states(text: str | None) -> list[str] | None:
    """'failed,running' -> ['failed', 'running']; an unknown state is a ConfigError listing the states."""
    if not text:
        return None
    states = [s.strip() for s in text.split(",") if s.strip()]
    for s in states:
        if s not in RUN_STATES:
            raise ConfigError("--state", f"unknown state {s!r}", value=s, allowed=RUN_STATES)
    return states or None


def table_limit(engine: Engine, experiment: str | None, limit: int) -> int:
    """`limit` rows for one experiment; with every experiment shown, a budget of `limit` rows shared
    between them (at least 10 each; unfinished runs first), so the tables stay quick to draw."""
    if limit <= 0 or experiment is not None:
        return limit
    from cemctl.db import list_experiments

    n = max(1, len(list_experiments(engine)))
    return max(min(10, limit), limit // n)


def status_snapshot(engine: Engine, runs_root: Path, experiment: str | None = None, *, sync: bool = True,
                    heartbeat_timeout_s: float | None = None, limit: int = 0, scale: str | None = None,
                    states: Sequence[str] | None = None, with_config: bool = False,
                    with_tags: bool = False) -> list[ExperimentStatus]:
    """Sync (unless `sync` is false), then one ExperimentStatus per experiment with at most `limit` runs each
    (0: all), only runs in `states` when given (the counts still cover every run); `with_tags` attaches each
    run's tags (`cemctl tag`)."""
    from cemctl.db.runs import resolve_runs_root

    root = resolve_runs_root(engine, runs_root)  # a copied project reads its own runs
    if sync:
        refresh(engine, root, experiment, heartbeat_timeout_s=heartbeat_timeout_s)
    statuses = collect_status(engine, experiment, limit=table_limit(engine, experiment, limit), scale=scale,
                              states=states, with_config=with_config, runs_root=root)
    from cemctl.db.outdated import outdated_by_experiment, outdated_runs

    stale_code = outdated_runs(engine)
    by_exp = outdated_by_experiment(engine, stale_code, scale=scale)
    for e in statuses:
        e.outdated = by_exp.get(e.name, []) if e.name != NO_EXPERIMENT else \
            sorted(r.run_id for r in e.runs if r.run_id in stale_code)
        for r in e.runs:
            r.outdated = r.run_id in stale_code
    if with_tags:
        from cemctl.db.tags import tags_of

        tags = tags_of(engine, [r.run_id for e in statuses for r in e.runs])
        for e in statuses:
            for r in e.runs:
                r.tags = tags[r.run_id].tags if r.run_id in tags else {}
    return statuses


def status_json(statuses: list[ExperimentStatus], now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    return {
        "time": now,
        "experiments": [
            {"name": e.name, "counts": e.counts, "total_runs": e.total, "outdated": e.outdated,
             "runs": [r.to_dict(now) for r in e.runs]}
            for e in statuses
        ],
    }
