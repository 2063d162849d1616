"""`cemctl sync [--db] [--runs-dir]`: ingest every run directory into the results database.

Idempotent; creates rows for run dirs the database does not know (rebuilds the
database from the files). Prints a one-line summary, then one line per run
directory it had to skip (refused or unreadable), with the reason; exit code 1
when it skipped every run directory it found (nothing was synced), 2 (one line)
when the runs folder does not exist. Library: `cemctl.db.sync_runs`.
"""

from __future__ import annotations

from typing import Optional

import typer

from cemctl.commands.common import (
    DbOption,
    HeartbeatTimeoutOption,
    RunsDirOption,
    cli_errors,
    db_url,
    stderr_console,
    heartbeat_timeout,
    runs_dir,
)


def sync_command(
    heartbeat_timeout_s: Optional[float] = HeartbeatTimeoutOption,
    db: Optional[str] = DbOption,
    runs: Optional[str] = RunsDirOption,
) -> None:
    """Ingest all run directories (metrics, events, heartbeats, results) into the database."""
    from cemctl.db import open_db, sync_runs
    from cemctl.db.runs import refresh_plugin_copy, resolve_runs_root

    with cli_errors():
        from cem_core.errors import CemError

        engine = open_db(db_url(db))
        root = resolve_runs_root(engine, runs_dir(runs))
        refresh_plugin_copy(root)
        if not root.is_dir():
            raise CemError(f"--runs-dir: {root}: no runs folder there (nothing to sync)")
        stats = sync_runs(engine, root, heartbeat_timeout_s=heartbeat_timeout(heartbeat_timeout_s))  # tags too
    from cem_core.names import printable

    typer.echo(printable(stats.summary()))
    for error in stats.errors:
        stderr_console().print(f"skipped: {printable(error)}", markup=False, highlight=False, soft_wrap=True)
    for warning in stats.warnings:  # a run file left out (its rows kept as they were): the file is named
        stderr_console().print(f"left out: {printable(warning)}", markup=False, highlight=False, soft_wrap=True)
    if stats.errors and not stats.ingested:  # every run directory it found was skipped: nothing was synced
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("sync")(sync_command)
