"""`cemctl archive EXPERIMENT... [--scale S] -o FILE.tar.gz` and `cemctl import FILE.tar.gz`: results to re-derive.

The archive holds each experiment's grid and plans and each run's config, result,
metrics, events, evals and tags, with a manifest of sha256s (no checkpoints). Import
verifies every hash before writing anything, skips runs already present with the same
content and refuses a different run under an existing id. Library:
`cemctl.services.archive`.
"""

from __future__ import annotations

from typing import List, Optional

import typer

from cemctl.commands.common import DbOption, RunsDirOption, ScaleFilterOption, cli_errors, db_url, runs_dir


def archive_command(
    experiments: List[str] = typer.Argument(..., help="Experiments to archive."),
    out: str = typer.Option(..., "--out", "-o", help="The archive to write (.tar.gz)."),
    scale: Optional[str] = ScaleFilterOption,
    force: bool = typer.Option(False, "--force", help="Replace OUT even if cemctl did not write it (a regular file)."),
    db: Optional[str] = DbOption,
    runs: Optional[str] = RunsDirOption,
) -> None:
    """Write the experiments' runs (config, results, metrics, events, evals; no checkpoints) into one archive."""
    with cli_errors():
        from cemctl.services.archive import archive_experiments

        result = archive_experiments(db_url(db), runs_dir(runs), list(experiments), out=out, scale=scale, force=force)
    typer.echo(f"archived {result.runs} runs of {', '.join(result.experiments)} ({result.files} files, "
               f"{result.bytes / 1e6:.1f} MB) to {result.path}")


def import_command(
    archive: str = typer.Argument(..., help="An archive written by `cemctl archive`."),
    db: Optional[str] = DbOption,
    runs: Optional[str] = RunsDirOption,
) -> None:
    """Import an archive: verify every hash, write the runs that are new, record the experiments' plans."""
    with cli_errors():
        from cemctl.services.archive import import_archive

        result = import_archive(db_url(db), runs_dir(runs), archive)
    typer.echo(f"imported {len(result.imported)} runs ({len(result.present)} already here) of "
               f"{', '.join(result.experiments)} from {result.path}")


def register(app: typer.Typer) -> None:
    app.command("archive")(archive_command)
    app.command("import")(import_command)
