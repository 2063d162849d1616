"""What `cemctl status` does, as one library call: `show_status(db_url, runs_root, experiment, ...)`."""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live

from cemctl.services.status.collect import collect_status, refresh
from cemctl.services.status.render import render_status, status_json


def show_status(
    url: str,
    runs_root: Path,
    experiment: str | None = None,
    *,
    watch: bool = False,
    as_json: bool = False,
    interval_s: float = 2.0,
    limit: int = 50,
    sync: bool = True,
    heartbeat_timeout_s: float | None = None,
    console: Console | None = None,
    scale: str | None = None,
) -> None:
    from cemctl.db.engine import is_readonly, open_existing_db

    if not (interval_s > 0 and interval_s < float("inf")):
        from cem_core.errors import ConfigError

        raise ConfigError("--interval-s", f"must be a positive number of seconds, got {interval_s}")
    console = console or Console()
    if not console.is_terminal and not watch:
        console = Console(width=max(console.width, 200), highlight=False)  # pipes and files: no truncated columns
    from cemctl.db.runs import resolve_runs_root

    engine = open_existing_db(url)  # never creates a database; read-only where it cannot be written
    if sync and is_readonly(engine):  # the states shown are the recorded ones: say so, once
        import sys

        print("note: the results database is read-only here: states are as last recorded (the run folders were "
              "not read; open it with write access to bring them up to date)", file=sys.stderr, flush=True)
    sync = sync and not is_readonly(engine)
    runs_root = resolve_runs_root(engine, runs_root)

    def snapshot() -> list:
        if sync:
            refresh(engine, runs_root, experiment, heartbeat_timeout_s=heartbeat_timeout_s)
        # The table shows at most `limit` runs per experiment: read only those. JSON has every run.
        return collect_status(engine, experiment, limit=0 if as_json else table_limit(), scale=scale,
                              runs_root=runs_root)

    def table_limit() -> int:
        """`limit` for one experiment; with all experiments shown, a budget of `limit` rows shared
        between them (at least 10 each, unfinished runs first): the tables stay quick to draw."""
        if limit <= 0 or experiment is not None:
            return limit
        from cemctl.db import list_experiments

        n = max(1, len(list_experiments(engine)))
        return max(min(10, limit), limit // n)

    try:
        if as_json:
            while True:
                print(json.dumps(status_json(snapshot()), default=str), flush=True)
                if not watch:
                    return
                time.sleep(interval_s)
        if not watch:
            console.print(render_status(snapshot(), limit=table_limit()))
            return
        if not console.is_terminal:  # a pipe or a file: one table per refresh
            while True:
                console.print(render_status(snapshot(), limit=table_limit()))
                console.file.flush()
                time.sleep(interval_s)
        with Live(render_status(snapshot(), limit=table_limit()), console=console, refresh_per_second=4, screen=False) as live:
            while True:
                time.sleep(interval_s)
                live.update(render_status(snapshot(), limit=table_limit()))
    except KeyboardInterrupt:  # the way to leave --watch
        if not watch:
            raise
