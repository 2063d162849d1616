"""`cemctl export EXPERIMENT|--where ... --format csv|parquet|jsonl|tensorboard -o OUT [--curves]`.

One row per run (run id, experiment, scale, state, arm, every config key, the results,
tags and notes), or with `--curves` the per-step metrics in long form; `tensorboard`
writes one event folder per run, `<arm label>/seed=<n>` (every curve, the system samples, the
final test loss, the config as hparams) for TensorBoard or a tracker that reads its files. Refuses to replace a file it did not write unless
`--force`. Library: `cemctl.services.export`.
"""

from __future__ import annotations

import sys
from typing import List, Optional

import typer

from cemctl.commands.common import DbOption, RunsDirOption, ScaleFilterOption, cli_errors, db_url, runs_dir


def export_command(
    experiment: Optional[str] = typer.Argument(None, help="Experiment to export (or select runs with --where)."),
    fmt: str = typer.Option("csv", "--format", "-f", help="csv, parquet, jsonl or tensorboard (a folder)."),
    out: str = typer.Option(..., "--out", "-o", help="The file to write (a folder for tensorboard; - for standard output)."),
    where: Optional[List[str]] = typer.Option(None, "--where", help="Only runs meeting KEY OP VALUE (repeatable)."),
    curves: bool = typer.Option(False, "--curves", help="The per-step metrics in long form instead of one row per run."),
    scale: Optional[str] = ScaleFilterOption,
    force: bool = typer.Option(False, "--force", help="Replace OUT even if cemctl did not write it (a regular file)."),
    no_sync: bool = typer.Option(False, "--no-sync", help="Use the database as it is, without reading run dirs."),
    db: Optional[str] = DbOption,
    runs: Optional[str] = RunsDirOption,
) -> None:
    """Export runs (or their curves) as CSV, Parquet, JSON lines or TensorBoard event files."""
    with cli_errors():
        from cemctl.services.export import export_runs

        result = export_runs(db_url(db), experiment, where=where, fmt=fmt, out=out, curves=curves, scale=scale,
                             force=force, runs_root=None if no_sync else runs_dir(runs))
    from cem_core.names import plural

    if result.text is not None:  # --out -: the data on standard output, what was written on standard error
        sys.stdout.write(result.text)
        sys.stdout.flush()
    echo = typer.echo if result.text is None else (lambda line: typer.echo(line, err=True))
    runs_text = plural(result.runs, "run")
    if result.fmt == "tensorboard":
        echo(f"exported {runs_text} to {result.out} (one event folder per run, {plural(result.rows, 'scalar')}, "
                   f"hparams of {plural(result.hparams, 'run')})")
    else:
        rows = plural(result.rows, "row of curves", "rows of curves") if curves else plural(result.rows, "row")
        echo(f"exported {runs_text} ({rows}) to {'standard output' if result.text is not None else result.out}")


def register(app: typer.Typer) -> None:
    app.command("export")(export_command)
