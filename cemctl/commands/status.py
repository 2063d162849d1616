"""`cemctl status [EXPERIMENT]`: a table per experiment of every run's state and progress.

First syncs the run directories into the database (incremental: only files
that changed are read), then renders `cemctl.services.status`. `--watch` refreshes the
table live; `--json` prints the same data as one JSON document.
"""

from __future__ import annotations

import typer

from cemctl.commands.common import (
    DbOption,
    HeartbeatTimeoutOption,
    RunsDirOption,
    ScaleFilterOption,
    cli_errors,
    stdout_console,
    db_url,
    heartbeat_timeout,
    runs_dir,
)


def register(app: typer.Typer) -> None:
    @app.command("status")
    def status(
        experiment: str = typer.Argument(None, help="Experiment name (default: all experiments)."),
        watch: bool = typer.Option(False, "--watch", "-w", help="Refresh the table live (Ctrl-C to stop)."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
        db: str = DbOption,
        runs: str = RunsDirOption,
        interval_s: float = typer.Option(2.0, "--interval-s", help="Refresh period of --watch, in seconds."),
        limit: int = typer.Option(50, "--limit", min=0, help="At most this many runs per experiment (unfinished first; shared by all experiments when none is named); 0 = all."),
        no_sync: bool = typer.Option(False, "--no-sync", help="Show the database as it is, without reading run dirs."),
        scale: str = ScaleFilterOption,
        heartbeat_timeout_s: float = HeartbeatTimeoutOption,
    ) -> None:
        """Show the state, progress, losses and errors of every run."""
        with cli_errors():
            from cemctl.services.status.command import show_status

            show_status(
                db_url(db), runs_dir(runs), experiment, watch=watch, as_json=as_json, interval_s=interval_s,
                limit=limit, sync=not no_sync, heartbeat_timeout_s=heartbeat_timeout(heartbeat_timeout_s), console=stdout_console(),
                scale=scale,
            )
