"""`cemctl tag RUN|EXPERIMENT NAME=VALUE ... [--remove NAME]` and `cemctl note RUN TEXT`: label runs, write notes.

Tags and notes live in each run's tags.json (so `cemctl sync` rebuilds them) and in
the database; `status --columns tag.NAME`, `--where tag.NAME=...`, `export` and
`cemctl.api` show them. Library: `cemctl.services.tags`.
"""

from __future__ import annotations

from typing import List, Optional

import typer

from cemctl.commands.common import DbOption, RunsDirOption, cli_errors, db_url, runs_dir


def tag_command(
    target: str = typer.Argument(..., help="A run id (or unique prefix), an experiment or its grid file."),
    tags: Optional[List[str]] = typer.Argument(None, help="NAME=VALUE tags to set."),
    remove: Optional[List[str]] = typer.Option(None, "--remove", help="A tag NAME to remove (repeatable)."),
    db: Optional[str] = DbOption,
    runs: Optional[str] = RunsDirOption,
) -> None:
    """Set (or remove) tags on a run or on every run of an experiment."""
    with cli_errors():
        from cemctl.services.tags import parse_tags, tag_runs

        result = tag_runs(db_url(db), runs_dir(runs), target, set=parse_tags(tags or []), remove=list(remove or []))
    if result.kind == "run":
        typer.echo(f"tagged run {next(iter(result.records))}")
    else:
        typer.echo(f"tagged {len(result.records)} runs of experiment {result.target}")


def note_command(
    run: str = typer.Argument(..., help="A run id (or unique prefix)."),
    text: str = typer.Argument(..., help="The note (one line of printable text)."),
    db: Optional[str] = DbOption,
    runs: Optional[str] = RunsDirOption,
) -> None:
    """Add a note to a run (kept with its time in the run's tags.json)."""
    with cli_errors():
        from cemctl.services.tags import note_run

        result = note_run(db_url(db), runs_dir(runs), run, text)
    (run_id, record), = result.records.items()
    typer.echo(f"noted on {run_id} ({len(record.notes)} note{'s' if len(record.notes) != 1 else ''})")


def register(app: typer.Typer) -> None:
    app.command("tag")(tag_command)
    app.command("note")(note_command)
