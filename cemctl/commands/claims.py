"""`cemctl claims [--scale S] [--out DIR] [--power]`: do the claims the grids declare hold on the runs there are?

Prints one verdict per claim and scale (holds / contradicted / partly / inconclusive /
not run, from the Holm-adjusted part verdicts) and, with `--power`, the seeds each
part needs for 80% power at its margin; writes claims.md (the statistical plan and
every part, unadjusted and adjusted), claims.csv, claims_summary.csv and
claims.png/pdf into `--out` (default reports/claims). Library:
`cemctl.services.claims.claims_report`; the statistics: `cemctl.report.claims`.
"""

from __future__ import annotations

import math
from typing import Optional

import typer

from cemctl.commands.common import (
    DbOption,
    RunsDirOption,
    ScaleFilterOption,
    cli_errors,
    db_url,
    output_width,
    print_view,
    runs_dir,
)


class ClaimsView:
    def __init__(self, result, width: int | None, power: bool) -> None:  # noqa: ANN001 - ClaimsResult
        from cem_core.names import printable
        from cemctl.commands.views.table import Cell, Column, fit

        styles = {"holds": "green", "contradicted": "bold red", "partly contradicted": "yellow",
                  "partly holds": "yellow", "not run": "dim"}
        cols = [Column("claim", "claim", required=True), Column("scale", "scale", priority=2),
                Column("verdict", "verdict", required=True), Column("statement", "statement", priority=3, shrink_to=20)]
        self.rows = [{"claim": Cell(str(r.claim)), "scale": Cell(r.scale or "-"),
                      "verdict": Cell(r.verdict, styles.get(r.verdict, "")), "statement": Cell(printable(r.statement))}
                     for r in result.claims.itertuples()]
        self.layout = fit(cols, self.rows, width)
        parts = result.parts
        self.notes = [f"  to decide more: {n}" for n in sorted({n for n in parts.get("next", []) if n})]
        if power and "seeds_for_80pct_power" in parts.columns:
            for r in parts.itertuples():
                v = r.seeds_for_80pct_power
                if r.verdict_holm in ("holds", "contradicted") or r.verdict == "not run":
                    continue
                need = "more than 64" if v is None or (isinstance(v, float) and math.isnan(v)) else str(int(v))
                self.notes.append(f"  claim {r.claim}, {r.part} ({r.scale}): {need} seeds per arm for 80% power "
                                  f"at its margin")
        self.notes += [f"  note: {printable(n)}" for n in getattr(result, "code_notes", [])]
        self.out = f"written to {result.out_dir}/claims.md (and claims.csv, claims.png)" if result.out_dir else ""

    def plain_lines(self) -> list[str]:
        from cemctl.commands.views.table import render_plain

        return ["the claims (verdicts after Holm over every part)"] + render_plain(self.layout, self.rows) + \
            self.notes + ([self.out] if self.out else [])

    def rich(self):  # noqa: ANN201
        from rich.console import Group
        from rich.text import Text

        from cemctl.commands.views.table import render_rich

        return Group(Text("the claims (verdicts after Holm over every part)", style="bold"),
                     render_rich(self.layout, self.rows), *[Text(n) for n in self.notes],
                     *([Text(self.out, style="dim")] if self.out else []))


def register(app: typer.Typer) -> None:
    @app.command("claims")
    def claims(
        scale: Optional[str] = ScaleFilterOption,
        out: str = typer.Option("reports/claims", "--out", "-o", help="Output folder (replaced only if an earlier `cemctl claims` wrote it)."),
        power: bool = typer.Option(False, "--power", help="Also the seeds each undecided part needs for 80% power at "
                                   "its margin (from the observed variance)."),
        no_sync: bool = typer.Option(False, "--no-sync", help="Use the database as it is, without reading run dirs."),
        db: Optional[str] = DbOption,
        runs: Optional[str] = RunsDirOption,
    ) -> None:
        """Test every grid's claims on the finished runs: effect, 95% interval, verdict, Holm-adjusted."""
        with cli_errors():
            from cemctl.services.claims import claims_report

            result = claims_report(db_url(db), out_dir=out, scale=scale, runs_root=runs_dir(runs), sync=not no_sync,
                                   power=power)
        _, width = output_width()
        print_view(ClaimsView(result, width, power))
