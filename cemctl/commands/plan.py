"""`cemctl plan FILE [--scale tiny|paper] [--set key=value ...] [--json]`: expand, validate and record a grid.

Prints one row per run: id, the axes that vary, parameters (total and
non-embedding), tokens, training FLOPs, estimated GPU-hours (at --gpu-tflops x
--mfu) and the state of runs already known. A bad grid exits 2 with one line
naming the file, the key and the allowed values, and writes nothing.
Library: `cemctl.services.plan.plan_experiment`. Never imports torch.
"""

from __future__ import annotations

import json
from typing import List, Optional

import typer

from cemctl.commands.common import DbOption, RunsDirOption, cli_errors, console, db_url, runs_dir


def _si(n: float) -> str:
    for unit, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.3g}"


def _params(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}k"


def _short(key: str, keys: list[str]) -> str:
    tail = key.split(".")[-1]
    return tail if sum(k.split(".")[-1] == tail for k in keys) == 1 else key


def _print_table(report) -> None:  # noqa: ANN001 - PlanReport
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    plan = report.plan
    varied = plan.varied
    from cem_core.names import printable

    title = f"{plan.name} ({plan.figure}, scale {plan.scale}): {len(report.rows)} runs, {report.new_runs} new"
    table = Table(title=title, title_justify="left", show_lines=False)
    table.add_column("run", no_wrap=True)
    for key in varied:
        table.add_column(_short(key, varied), no_wrap=True)
    for name in ("params", "non-emb", "tokens", "FLOPs", "GPU-h", "CPU-h"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("state", no_wrap=True)
    marked = any(r["marks"] for r in report.rows)
    if marked:
        table.add_column("note", no_wrap=True)
    for r in report.rows:
        table.add_row(
            r["run_id"],
            *[Text(printable(r["axes"].get(k))) for k in varied],  # Text: user text is never rich markup
            _params(r["params_total"]),
            _params(r["params_non_embedding"]),
            _si(r["tokens"]),
            _si(r["train_flops"]),
            f"{r['gpu_hours']:.2g}",
            f"{r['cpu_hours']:.2g}",
            ("new" if r["new"] else r["state"]),
            *([Text(printable("; ".join(r["marks"])))] if marked else []),
        )
    out = console if console.is_terminal else Console(width=max(console.width, 200))
    out.print(table)
    t = report.totals
    out.print(
        f"total: {t['runs']} runs, {_si(t['tokens'])} tokens, {_si(t['train_flops'])} FLOPs, "
        f"{t['gpu_hours']:.3g} GPU-hours at {t['gpu_tflops']:g} TFLOP/s x {t['mfu']:g} MFU; "
        f"not done yet: {t['cpu_hours']:.3g} CPU-hours at {t['cpu_gflops']:g} GFLOP/s per worker "
        f"(about {60 * t['cpu_hours'] / 2:.0f} min with --workers 2)"
        + (f"; {plan.excluded} excluded" if plan.excluded else "")
        + (f"; {plan.duplicates} duplicates merged" if plan.duplicates else ""),
        highlight=False,
        soft_wrap=True,
    )


def plan_command(
    file: str = typer.Argument(..., help="Grid file (experiments/*.toml)."),
    scale: str = typer.Option("tiny", "--scale", help="Scale preset of the grid: tiny, cpu, gpu or paper."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override key=value (beats the grid file); repeatable."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate and show; write nothing."),
    gpu_tflops: float = typer.Option(312.0, "--gpu-tflops", help="Peak GPU throughput for the GPU-hours estimate (A100 bf16: 312, H100: 989)."),
    mfu: float = typer.Option(0.4, "--mfu", help="Assumed model FLOPs utilisation for the estimate."),
    cpu_gflops: float = typer.Option(30.0, "--cpu-gflops", help="Training GFLOP/s per CPU worker for the CPU-hours "
                                     "estimate (30: measured with 2 workers on a 2-core machine)."),
    db: Optional[str] = DbOption,
    runs: Optional[str] = RunsDirOption,
) -> None:
    """Expand and validate a grid file, record its runs, show their cost."""
    from cemctl.grid import parse_overrides
    from cemctl.services.plan import plan_experiment

    with cli_errors():
        report = plan_experiment(
            file, scale=scale, overrides=parse_overrides(set_ or []), db_url=db_url(db),
            runs_root=runs_dir(runs), gpu_tflops=gpu_tflops, mfu=mfu, cpu_gflops=cpu_gflops,
            record=not dry_run,
        )
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=1, sort_keys=False))
    else:
        _print_table(report)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_command)
