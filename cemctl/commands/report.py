"""`cemctl report EXPERIMENT`: the paper's figures and tables for one experiment, with seeds and error bars.

Syncs the experiment's run directories into the database, then writes figures
(PNG/PDF/SVG), tables (Markdown, CSV, LaTeX) and an index (index.md,
index.html) into `reports/EXPERIMENT` (see `cemctl.report`).
"""

from __future__ import annotations

import typer

from cemctl.commands.common import DbOption, RunsDirOption, cli_errors, db_url, runs_dir, scale_option, stdout_console


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report(
        experiment: str = typer.Argument(..., help="Experiment name (the [experiment] name of its grid file)."),
        out: str = typer.Option(None, "--out", "-o", help="Output folder [default: reports/EXPERIMENT]."),
        formats: str = typer.Option("png,pdf", "--format", help="Figure formats, comma-separated (png, pdf, svg)."),
        curves: bool = typer.Option(True, "--curves/--no-curves", help="Include training-loss curves."),
        where: list[str] = typer.Option(None, "--where", help="Only runs with KEY=VALUE (repeatable), e.g. model.size=nano."),
        db: str = DbOption,
        runs: str = RunsDirOption,
        no_sync: bool = typer.Option(False, "--no-sync", help="Report the database as it is, without reading run dirs."),
        scale: str = scale_option(None, "the most recently planned scale with finished runs"),
    ) -> None:
        """Write the experiment's figures, tables and index (missing and failed runs listed with reasons)."""
        with cli_errors():
            from cemctl.report.build import report_experiment

            result = report_experiment(
                experiment, db_url=db_url(db), out_dir=out, runs_root=runs_dir(runs), formats=formats,
                include_curves=curves, sync=not no_sync, where=where or (), scale=scale,
            )
        counts = ", ".join(f"{n} {k}" for k, n in result.counts.items() if n and k != "runs")
        console = stdout_console()  # a terminal wraps the line between words (it cut "figures, runs" at 80 columns)
        console.print(f"report written to {result.index_md} (and index.html): "
                      f"{len({p.stem for p in result.figures})} figures, "
                      f"runs: {counts}", markup=False, highlight=False, soft_wrap=not console.is_terminal)
