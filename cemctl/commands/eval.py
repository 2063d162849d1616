"""`cemctl eval RUN|EXPERIMENT --steps 1,2,4,8 [--sublayer attention|mlp|both]`: test-time recursion scaling.

Evaluates the final weights of a finished CEM run with other numbers of
recursive steps T (library: `cemctl.services.eval.evaluate_target`), ingests
the rows into the results database (`evals` table) and prints T against test
perplexity and FLOPs per token. `cemctl report` then draws them.

RUN is a run id (or unique prefix); EXPERIMENT evaluates every finished run of
the experiment that has CEM sublayers and skips the others with a note.
Unknown runs, runs that are not done and models without a CEM sublayer are
refused with one line and exit code 2. torch is imported only when the command runs.
"""

from __future__ import annotations

from typing import Any, Optional

import typer

from cemctl.commands.common import (
    DbOption,
    RunsDirOption,
    ScaleFilterOption,
    cli_errors,
    stdout_console,
    db_url,
    stderr_console,
    runs_dir,
)


class EvalView:
    """T against test perplexity, a plain table like every other command's (`cemctl.commands.views.table`): fitted
    to the terminal, aligned lines in a pipe. The T a run was trained with is starred."""

    def __init__(self, rows: list[dict[str, Any]], title: str, width: int | None) -> None:
        from cemctl.commands.views import formats as F
        from cemctl.commands.views.table import Cell, Column, fit

        self.title = title
        cols = [Column("run", "run", required=True), Column("varied", "varied", priority=2),
                Column("T", "T", align="right", required=True), Column("depths", "attn/MLP T", align="right", priority=3),
                Column("ppl", "test ppl", align="right", required=True),
                Column("delta", "vs trained", align="right", priority=1),
                Column("flops", "FLOPs/token", align="right", priority=2)]
        self.cells = []
        for r in rows:
            ppl, base = r.get("test_ppl"), r.get("_trained_ppl")
            trained = r["attn_steps"] == r["trained_attn_steps"] and r["mlp_steps"] == r["trained_mlp_steps"]
            self.cells.append({
                "run": Cell(str(r["_run"]), "dim"), "varied": Cell(str(r["sublayer"])),
                "T": Cell(f"{r['eval_steps']}{'*' if trained else ''}", "bold" if trained else ""),
                "depths": Cell(f"{r['attn_steps']}/{r['mlp_steps']}"),
                "ppl": Cell(f"{ppl:.3f}" if ppl is not None else "non-finite"),
                "delta": Cell(f"{ppl - base:+.3f}" if ppl is not None and base is not None else ""),
                "flops": Cell(F.count(float(r["flops_per_token"]))),
            })
        self.layout = fit(cols, self.cells, width)

    def plain_lines(self) -> list[str]:
        from cemctl.commands.views.table import render_plain

        return [self.title, *render_plain(self.layout, self.cells), "* = the T the model was trained with"]

    def rich(self) -> Any:
        from rich.console import Group
        from rich.text import Text

        from cemctl.commands.views.table import render_rich

        return Group(Text(self.title, style="bold"), render_rich(self.layout, self.cells),
                     Text("* = the T the model was trained with", style="dim"))


def eval_command(
    target: str = typer.Argument(..., help="Run id (or unique prefix), experiment name or grid file."),
    steps: str = typer.Option(..., "--steps", help="Recursion steps T to evaluate, comma-separated (e.g. 1,2,4,8)."),
    sublayer: str = typer.Option("both", "--sublayer", help="Which CEM sublayer's T to vary: attention, mlp or both "
                                 "(both = every CEM sublayer the model has)."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu, cuda or cuda:N [default: $CEMCTL_DEVICE, else CUDA when available]."),
    scale: Optional[str] = ScaleFilterOption,
    db: Optional[str] = DbOption,
    runs: Optional[str] = RunsDirOption,
) -> None:
    """Test perplexity of trained CEM models at other recursion depths T (stored in the database for `report`)."""
    with cli_errors():
        from cemctl.services.eval import evaluate_target

        report = evaluate_target(db_url(db), target, runs_dir(runs), steps=steps, sublayer=sublayer, device=device,
                                 scale=scale)
    from cem_core.names import printable

    for note in report.notes:
        stderr_console().print(printable(note), markup=False, highlight=False)
    from cem_core.names import plural
    from cemctl.commands.common import output_width, print_view

    _, width = output_width()
    print_view(EvalView(report.rows, printable(f"test-time recursion: {report.kind} {report.name}"), width))
    skipped = f"; {plural(len(report.notes), 'run')} skipped or failed" if report.notes else ""
    stdout_console().print(f"{plural(len(report.rows), 'evaluation')} of {plural(report.evaluated_runs, 'run')} stored "
                           f"in evals.json and the results database{skipped}", markup=False, highlight=False,
                           soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)
