"""`cemctl forget EXPERIMENT [--dry-run]`: remove an experiment planned by mistake from the database.

Its plan (every link to its runs) and its claims go; a planned run nobody else links that provably holds
nothing (no result, checkpoint, metrics, tags or job: a folder with only the config.json plan wrote) goes
with its folder; every other run stays, named with what it holds. `--dry-run` says what would go.
Library: `cemctl.services.forget.forget_experiment`.
"""

from __future__ import annotations

from typing import Optional

import typer

from cemctl.commands.common import DbOption, RunsDirOption, cli_errors, db_url, runs_dir, stdout_console


def forget_command(
    experiment: str = typer.Argument(..., help="The experiment to forget (its [experiment] name)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be removed; remove nothing."),
    db: Optional[str] = DbOption,
    runs: Optional[str] = RunsDirOption,
) -> None:
    """Remove an experiment planned by mistake: its plan and claims, and its planned runs that hold nothing."""
    from cem_core.names import printable

    with cli_errors():
        from cemctl.services.forget import forget_experiment

        result = forget_experiment(db_url(db), experiment, runs_dir(runs), dry_run=dry_run)
    for line in result.lines():
        stdout_console().print(printable(line), markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("forget")(forget_command)
