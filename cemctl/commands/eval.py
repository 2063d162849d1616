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


def _count(value: float) -> str:
    """233600 -> '234k' (3 significant digits)."""
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= div:
            return f"{value / div:.3g}{suffix}"
    return f"{value:.3g}"


def _table(rows: list[dict[str, Any]], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left", caption="* = the T the model was trained with",
                  caption_justify="left")
    for col in ("run", "varied", "T", "attn/MLP T", "test ppl", "vs trained", "FLOPs/token"):
        table.add_column(col, justify="left" if col in ("run", "varied") else "right", no_wrap=True)
    for r in rows:
        ppl = r.get("test_ppl")
        base = r.get("_trained_ppl")
        delta = f"{ppl - base:+.3f}" if ppl is not None and base is not None else ""
        trained = r["attn_steps"] == r["trained_attn_steps"] and r["mlp_steps"] == r["trained_mlp_steps"]
        table.add_row(r["_run"], r["sublayer"], f"{r['eval_steps']}{'*' if trained else ''}",
                      f"{r['attn_steps']}/{r['mlp_steps']}", f"{ppl:.3f}" if ppl is not None else "non-finite",
                      delta, _count(float(r["flops_per_token"])))
    return table


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
    stdout_console().print(_table(report.rows, f"test-time recursion: {report.kind} {report.name}"))
    stdout_console().print(f"{len(report.rows)} evaluations of {report.evaluated_runs} run(s) stored in evals.json and the "
                  "results database" + (f"; {len(report.notes)} run(s) skipped or failed" if report.notes else ""),
                  markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)
