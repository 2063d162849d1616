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

from cemctl.commands.common import DbOption, RunsDirOption, ScaleFilterOption, cli_errors, db_url, fail, runs_dir


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
    if result.trained_here:
        typer.echo(f"kept {len(result.trained_here)} runs this project trained too (the same configs, finished here; "
                   f"their files differ from the archive's, which are not imported): "
                   f"{', '.join(r[:8] for r in result.trained_here)}")
    for name, folder in sorted(result.untrusted.items()):
        typer.echo(f"the archive brings the plugin {name!r} (kept, not run, in {folder}): its runs are listed; to "
                   f"report, evaluate or train them, read its files and run `cemctl trust {name}`")


def trust_command(
    name: Optional[str] = typer.Argument(None, help="The plugin to trust (a name `cemctl trust` lists)."),
    yes: bool = typer.Option(False, "--yes", help="Trust it without asking (the files and sha256s are printed)."),
    db: Optional[str] = DbOption,
    runs: Optional[str] = RunsDirOption,
) -> None:
    """List the plugin sources archives brought, or trust one: nothing from an archive runs before."""
    import sys

    with cli_errors():
        from cemctl.services.archive import plugins_to_trust, trust

        if name is not None and not yes and not sys.stdin.isatty():
            fail(f"trust: give --yes to trust the plugin {name!r} (`cemctl trust` lists its files and sha256s)")
        root, waiting = plugins_to_trust(db_url(db), runs_dir(runs))
        if not waiting:
            if name is not None:
                fail(f"trust: no plugin {name!r} from an archive waits for trust in {root} (nothing does)")
            typer.echo(f"nothing to trust: no plugin from an archive waits in {root}")
            return
        if name is None or not yes:  # what will be trusted, before it is (with --yes: once it is)
            _list_files([u for u in waiting if name is None or u.name == name.split(".")[0]])
        if name is None:
            typer.echo("read them; `cemctl trust NAME` then lets commands and jobs import that plugin")
            return
        if not yes and not typer.confirm(f"trust {name!r}: commands and jobs of this project will import these files?"):
            fail("trust: nothing was trusted")
        u = trust(db_url(db), runs_dir(runs), name)
    if yes:
        _list_files([u])
    typer.echo(f"trusted {u.name}: {len(u.files)} files now in {root}/.plugins, which commands and jobs import")


def _list_files(plugins: list) -> None:  # type: ignore[type-arg]
    for u in plugins:
        typer.echo(f"{u.name}  from {u.archive or 'an archive'}, in {u.folder}:")
        for rel, entry in u.files.items():
            typer.echo(f"  {entry.sha256}  {entry.size:>8} B  {rel}")


def register(app: typer.Typer) -> None:
    app.command("archive")(archive_command)
    app.command("import")(import_command)
    app.command("trust")(trust_command)
