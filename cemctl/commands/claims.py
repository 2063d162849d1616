"""`cemctl claims [--scale S] [--out DIR]`: do the paper's six findings hold on the runs in the database?

Prints one verdict per claim and scale (holds / reversed / inconclusive / not
run, with what to launch next) and writes claims.md, claims.csv,
claims_summary.csv and claims.png/pdf into `--out` (default reports/claims).
Library: `cemctl.services.claims.claims_report`; the statistics:
`cemctl.report.claims`.
"""

from __future__ import annotations

from typing import Optional

import typer

from cemctl.commands.common import DbOption, RunsDirOption, ScaleFilterOption, cli_errors, stdout_console, db_url, runs_dir


def register(app: typer.Typer) -> None:
    @app.command("claims")
    def claims(
        scale: Optional[str] = ScaleFilterOption,
        out: str = typer.Option("reports/claims", "--out", "-o", help="Output folder (replaced only if an earlier `cemctl claims` wrote it)."),
        no_sync: bool = typer.Option(False, "--no-sync", help="Use the database as it is, without reading run dirs."),
        db: Optional[str] = DbOption,
        runs: Optional[str] = RunsDirOption,
    ) -> None:
        """Test the paper's six headline findings on every finished run: effect, 95% interval, verdict."""
        with cli_errors():
            from cemctl.services.claims import claims_report

            result = claims_report(db_url(db), out_dir=out, scale=scale, runs_root=runs_dir(runs), sync=not no_sync)
        from rich.table import Table

        from cem_core.names import printable

        table = Table(title="the paper's findings", title_justify="left")
        for col in ("claim", "scale", "verdict", "statement"):
            table.add_column(col, overflow="fold")
        for r in result.claims.itertuples():
            table.add_row(str(r.claim), r.scale or "-", r.verdict, printable(r.statement))
        stdout_console().print(table)
        todo = sorted({n for n in result.parts["next"] if n})
        for line in todo:
            stdout_console().print(f"  to decide more: {line}", markup=False, highlight=False, soft_wrap=True)
        stdout_console().print(f"written to {result.out_dir}/claims.md (and claims.csv, claims.png)", markup=False,
                      highlight=False, soft_wrap=True)
