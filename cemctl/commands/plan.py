"""`cemctl plan FILE [--scale tiny|cpu|gpu|paper] [--set KEY=VALUE] [--axis KEY=V1,V2] [--json]`: expand, validate
and record a grid.

Prints one row per run: id, the axes that vary, parameters (total and
non-embedding), tokens, training FLOPs, estimated GPU-hours (at --gpu-tflops x
--mfu) and the state of runs already known. A bad grid exits 2 with one line
naming the file, the key and the allowed values, and writes nothing.
Library: `cemctl.services.plan.plan_experiment`. Never imports torch.
"""

from __future__ import annotations

import json
import sys
from typing import List, Optional

import typer

from cemctl.commands.common import (
    DbOption,
    RunsDirOption,
    ScaleOption,
    cli_errors,
    db_url,
    output_width,
    print_view,
    runs_dir,
    stderr_console,
    stdout_console,
)


def _print_table(report) -> None:  # noqa: ANN001 - PlanReport
    from cemctl.commands.views.plan import PlanView

    _, width = output_width()
    print_view(PlanView(report, width))


def plan_command(
    file: str = typer.Argument(..., help="Grid file (experiments/*.toml)."),
    scale: str = ScaleOption,
    set_: Optional[List[str]] = typer.Option(None, "--set", metavar="KEY=VALUE",
                                             help="Set one config value for every run (beats the grid file); repeatable."),
    axis: Optional[List[str]] = typer.Option(None, "--axis", metavar="KEY=V1,V2,...",
                                             help="Add an axis to the grid (or replace the values of one it has), "
                                             "e.g. --axis model.attn_steps=1,2,4; repeatable."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate and show; write nothing."),
    gpu_tflops: float = typer.Option(989.0, "--gpu-tflops", help="Peak GPU throughput for the GPU-hours estimate "
                                     "(H100 and H200 bf16: 989; A100: 312)."),
    mfu: Optional[float] = typer.Option(None, "--mfu", help="Model FLOPs utilisation for the estimate (default: "
                                        "from an H200: 6.5% at d_model 256 to 39% at 768, CEM models x 0.775)."),
    gpu_mem_gib: float = typer.Option(80.0, "--gpu-mem-gib", metavar="GiB", help="GPU memory for the micro-batch "
                                      "check (H100: 80, H200: 141)."),
    cpu_gflops: Optional[float] = typer.Option(None, "--cpu-gflops", help="Training GFLOP/s per CPU worker for the "
                                               "CPU-hours estimate (default: what runs of the same model size "
                                               "measured on this host, else 30, measured with 2 workers on a "
                                               "2-core machine)."),
    db: Optional[str] = DbOption,
    runs: Optional[str] = RunsDirOption,
) -> None:
    """Expand and validate a grid file, record its runs, show their cost."""
    from cemctl.grid import parse_overrides
    from cemctl.grid.overrides import parse_axes
    from cemctl.services.plan import plan_experiment

    with cli_errors():
        report = plan_experiment(
            file, scale=scale, overrides=parse_overrides(set_ or []), db_url=db_url(db),
            runs_root=runs_dir(runs), gpu_tflops=gpu_tflops, mfu=mfu, cpu_gflops=cpu_gflops,
            gpu_mem_gib=gpu_mem_gib, record=not dry_run, axes=parse_axes(axis or []), calibrate_costs=True,
        )
    from cem_core.names import printable

    for note in report.notes:  # what the costs leave out (a plugin variant's undeclared FLOPs)
        stderr_console().print(printable(note), markup=False, highlight=False, soft_wrap=not sys.stderr.isatty())
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=1, sort_keys=False))
    else:
        _print_table(report)
        for note in report.claim_notes:  # what the grid's own-optimum claims need (nothing is edited); on a
            stdout_console().print(printable(f"note: {note}"), markup=False, highlight=False,  # terminal: between words
                                   soft_wrap=not sys.stdout.isatty())
        stdout_console().print(printable(report.recorded_line()), markup=False, highlight=False,
                               soft_wrap=not sys.stdout.isatty())


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_command)
