"""`cemctl claims [--scale S] [--out DIR] [--power]`: do the claims the grids declare hold on the runs there are?

Prints one verdict per claim and scale (holds / contradicted / partly / inconclusive /
not run, from the adjusted part verdicts), then every part: its effect with its 95%
interval (rounded to what the interval supports), whether it is confirmatory or
exploratory, and its verdict after the adjustment over the page (a stage-1 row's label in
brackets: exploratory, never a verdict; 80 columns: the part's name above its numbers);
notes for parts that could not be evaluated, are exploratory (and why), are not
converged, or whose lr profile should be extended before confirming;
with `--power`, the seeds each undecided part needs for 80% power at its margin and
adjusted level, over the 80% interval of its s.d. Writes claims.md (the statistical
plan and every part), claims.csv, claims_robustness.csv, claims_summary.csv and
claims.png/pdf into `--out DIR` when it is given (without it, claims only reads: `--no-sync` writes nothing at
all). Library:
`cemctl.services.claims.claims_report`; the statistics: `cemctl.report.claims`.
"""

from __future__ import annotations

import math
from typing import Any, Optional

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


VERDICT_STYLES = {"holds": "green", "contradicted": "bold red", "partly contradicted": "yellow",
                  "partly holds": "yellow", "not run": "dim", "inconclusive": ""}
INDENT = "   "
MIN_PART = 28  # below this many characters for the part's name, each part takes two lines


class ClaimsView:
    """The claims' verdicts, then one row per part (effect, 95% interval, label, verdict before and after the
    adjustment), fitted to the terminal: a part's name beside its numbers when there is room, above them
    otherwise (80 columns)."""

    def __init__(self, result, width: int | None, power: bool) -> None:  # noqa: ANN001 - ClaimsResult
        from cem_core.names import printable
        from cemctl.commands.views.table import Cell, Column, fit

        self.width = width
        cols = [Column("claim", "claim", required=True), Column("scale", "scale", priority=2),
                Column("verdict", "verdict", required=True), Column("statement", "statement", priority=3, shrink_to=20)]
        self.rows = [{"claim": Cell(str(r.claim)), "scale": Cell(r.scale or "-"),
                      "verdict": Cell(r.verdict, VERDICT_STYLES.get(r.verdict, "")),
                      "statement": Cell(printable(r.statement))}
                     for r in result.claims.itertuples()]
        self.layout = fit(cols, self.rows, width)
        parts = result.parts
        scales = len(set(parts["scale"])) > 1 if not parts.empty else False
        self.names = [f"{r.claim}. {printable(r.part)}" + (f" ({r.scale})" if scales else "")
                      for r in parts.itertuples()]
        from cemctl.report.claims import effect_text
        from cemctl.services.claims import evidence

        def mark(r: object) -> str:
            text = evidence(r)
            return "confirmatory" if text.startswith("confirmatory") else "exploratory"

        def verdict(r: Any) -> str:
            if r.stage == "stage 1" and r.verdict != "not run":
                return f"({r.label})"
            return str(r.verdict_holm if r.verdict_holm not in ("holds", "contradicted") else
                       f"{r.label_holm}: {r.verdict_holm}")

        self.part_rows = [{
            "part": Cell(name), "effect": Cell(effect_text(r.effect, r.ci95_low, r.ci95_high, r.unit)),
            "evidence": Cell(mark(r) if r.verdict != "not run" else "-"),
            "adjusted": Cell(verdict(r), VERDICT_STYLES.get(r.verdict_holm, "") if r.stage != "stage 1" else "dim")}
            for name, r in zip(self.names, parts.itertuples())]
        numbers = [Column("effect", "effect [95% interval]", required=True),
                   Column("evidence", "evidence", required=True), Column("adjusted", "verdict", required=True)]
        wide = fit([Column("part", "part", required=True)] + numbers,
                   [{**r, "part": Cell("")} for r in self.part_rows], None)
        room = None if width is None else width - sum(w for _, w in wide.columns) - 2 * len(wide.columns)
        self.two_lines = room is not None and room < MIN_PART
        if self.two_lines:
            self.part_layout = fit(numbers, self.part_rows, max(1, (width or 80) - len(INDENT)))
        else:
            part_col = Column("part", "part", required=room is None, shrink_to=MIN_PART, priority=1)
            self.part_layout = fit([part_col] + numbers, self.part_rows, width)
        self.notes = [f"  to decide more: {n}" for n in sorted({n for n in parts.get("next", []) if n})]
        if any(r.stage == "stage 1" and r.verdict != "not run" for r in parts.itertuples()):
            self.notes.append("  (label): stage 1, exploratory: the contrast at rates chosen on these seeds, never a "
                              "verdict; confirm on fresh seeds with " + ", ".join(sorted(
                                  {f"`cemctl confirm {r.experiment} --scale {r.scale}`"
                                   for r in parts.itertuples() if r.stage == "stage 1" and r.verdict != "not run"})))
        unconverged = [r for r in parts.itertuples() if getattr(r, "convergence", "") == "not converged"]
        for r in parts.itertuples():
            why = getattr(r, "error", None)
            if isinstance(why, str) and why:
                self.notes.append(f"  claim {r.claim}, {printable(r.part)}: not evaluated: {printable(why)}")
            if r.stage != "stage 1" and r.verdict != "not run" and mark(r) == "exploratory":
                self.notes.append(f"  claim {r.claim}, {printable(r.part)}: {printable(evidence(r))}")
            if getattr(r, "advice", ""):
                self.notes.append(f"  claim {r.claim}, {printable(r.part)}: {r.advice}")
            depends = [y.strip() for y in str(getattr(r, "robustness", "") or "").split(";") if "depends on" in y]
            if depends:
                self.notes.append(f"  claim {r.claim}, {printable(r.part)}: {depends[0]}")
        if len(unconverged) > 3:  # one line for many
            worst = max(unconverged, key=lambda r: r.fall_per_10pct)
            self.notes.append(f"  not converged: {len(unconverged)} parts (claims "
                              f"{', '.join(dict.fromkeys(str(r.claim) for r in unconverged))}): an arm still falls "
                              f"up to {worst.fall_per_10pct:.4f} per 10% of its budget, more than the margins")
        else:
            for r in unconverged:
                self.notes.append(f"  claim {r.claim}, {printable(r.part)}: not converged (an arm still falls "
                                  f"{r.fall_per_10pct:.4f} per 10% of its budget, margin {r.margin:.4f})")
        if power and "seeds_for_80pct_power" in parts.columns:
            for r in parts.itertuples():
                if r.verdict_holm in ("holds", "contradicted") or r.verdict == "not run":
                    continue
                v, lo, hi = r.seeds_for_80pct_power, getattr(r, "seeds_low", None), getattr(r, "seeds_high", None)
                need = "more than 1000" if v is None or (isinstance(v, float) and math.isnan(v)) else str(int(v))
                spread = ""
                if any(x is not None and not (isinstance(x, float) and math.isnan(x)) for x in (lo, hi)):
                    def txt(x: Any) -> str:
                        return "> 1000" if x is None or (isinstance(x, float) and math.isnan(x)) else str(int(x))
                    spread = f" ({txt(lo)}-{txt(hi)} over the s.d.'s 80% interval)"
                self.notes.append(f"  claim {r.claim}, {printable(r.part)} ({r.scale}): {need} seeds per arm for 80% "
                                  f"power at its margin and adjusted level{spread}")
        self.notes += [f"  note: {printable(n)}" for n in getattr(result, "code_notes", [])]
        self.out = (f"written to {result.out_dir}/claims.md (and claims.csv, claims.png)" if result.out_dir else
                    "the full report (the statistical plan, every column, the figures): --out reports/claims")

    TITLE = "the claims (verdicts adjusted over every part)"
    PARTS = "the parts (adjusted: after the step-down over every part)"

    def _cut(self, text: str) -> str:
        if self.width is None or len(text) <= self.width:
            return text
        return text[: self.width - 1] + "\u2026"

    def plain_lines(self) -> list[str]:
        from cemctl.commands.views.table import render_plain

        lines = [self.TITLE] + render_plain(self.layout, self.rows)
        if self.part_rows:
            body = render_plain(self.part_layout, self.part_rows)
            lines += ["", self.PARTS]
            if self.two_lines:
                lines += [INDENT + body[0], INDENT + body[1]]
                for name, row in zip(self.names, body[2:]):
                    lines += [self._cut(name), INDENT + row]
            else:
                lines += body
        return lines + self.notes + ([self.out] if self.out else [])

    def rich(self):  # noqa: ANN201
        from rich.console import Group
        from rich.text import Text

        from cemctl.commands.views.table import render_rich

        items: list[object] = [Text(self.TITLE, style="bold"), render_rich(self.layout, self.rows)]
        if self.part_rows:
            items += [Text(""), Text(self.PARTS, style="bold")]
            body = render_rich(self.part_layout, self.part_rows)
            if self.two_lines:
                lines = body.split("\n")
                items += [Text(INDENT) + lines[0], Text(INDENT) + lines[1]]
                for name, row in zip(self.names, lines[2:]):
                    items += [Text(self._cut(name), no_wrap=True, overflow="ellipsis"), Text(INDENT) + row]
            else:
                items.append(body)
        items += [Text(n) for n in self.notes]
        if self.out:
            items.append(Text(self.out, style="dim"))
        return Group(*items)  # type: ignore[arg-type]


def register(app: typer.Typer) -> None:
    @app.command("claims")
    def claims(
        scale: Optional[str] = ScaleFilterOption,
        out: Optional[str] = typer.Option(None, "--out", "-o", help="Also write the report (claims.md, the CSVs, "
                                          "claims.png/pdf) into this folder, e.g. reports/claims (replaced only if an "
                                          "earlier `cemctl claims` wrote it); without it nothing is written."),
        power: bool = typer.Option(False, "--power", help="Also the seeds each undecided part needs for 80% power at "
                                   "its margin and adjusted level (from the observed variance, with its "
                                   "uncertainty)."),
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

    @app.command("confirm")
    def confirm(
        experiment: str = typer.Argument(..., help="The experiment whose claim parts to confirm (stage 1: its runs)."),
        scale: Optional[str] = ScaleFilterOption,
        max_seeds: int = typer.Option(16, "--max-seeds", help="At most this many fresh seeds per cell."),
        budget_hours: Optional[float] = typer.Option(None, "--budget-hours", help="At most this many run-hours (by "
                                                     "stage 1's run times): fewer seeds if the power asks for more."),
        power: float = typer.Option(0.8, "--power", help="The power at each part's margin the seeds are planned for."),
        seeds: Optional[str] = typer.Option(None, "--seeds", help="The fresh seeds (default: from the power, after "
                                            "the largest stage-1 seed); never a stage-1 seed."),
        at_edge: bool = typer.Option(False, "--at-edge", help="Confirm an arm whose chosen rate is the edge of its "
                                     "profile (by default refused: extend the profile first)."),
        ladder: Optional[str] = typer.Option(None, "--ladder", help="Model sizes to train too, each arm at the rate "
                                             "transferred from the tuned size: the size ladder (never the decision)."),
        transfer: str = typer.Option("width", "--transfer", help="The ladder's rule: width (the rate scaled by "
                                     "1/width, muP's) or same."),
        out: Optional[str] = typer.Option(None, "--out", "-o", help="The grid file to write (default: "
                                          "<experiment>-confirm.toml beside the experiment's grid)."),
        db: Optional[str] = DbOption,
        runs: Optional[str] = RunsDirOption,
    ) -> None:
        """Make a claim's stage 2 from its lr profiles: a grid of each arm at its chosen rate on fresh seeds, planned
        for power, recorded and registered before it trains."""
        with cli_errors():
            from cemctl.grid.expand import parse_seeds
            from cemctl.services.confirm import confirm_design

            result = confirm_design(db_url(db), experiment, scale=scale, runs_root=runs_dir(runs), out=out,
                                    max_seeds=max_seeds, budget_hours=budget_hours, power=power,
                                    seeds=parse_seeds(seeds) if seeds is not None else None, at_edge=at_edge,
                                    ladder=tuple(x.strip() for x in (ladder or "").split(",") if x.strip()),
                                    transfer=transfer)
        from cem_core.names import printable
        from cemctl.commands.common import stdout_console

        console = stdout_console()
        for line in result.lines:
            console.print(printable(line), markup=False, highlight=False, soft_wrap=not console.is_terminal)
