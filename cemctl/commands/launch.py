"""`cemctl launch FILE|EXPERIMENT`: plan and run every run of a grid that is not done yet.

Idempotent: done runs never run again, live jobs are left alone, killed or
interrupted runs resume from their newest checkpoint. `--executor local`
(default) runs in the foreground with a live view (Ctrl-C stops the jobs,
runs stay resumable; `--detach` runs it in the background); `--executor slurm`
submits job arrays and returns. Before any job starts, every run's data is
prepared (locally: here, first; on SLURM: refused with the `cemctl data prepare`
command to run, unless `--prepare`), so no GPU job ever tokenizes.
Library: `cemctl.services.launch.launcher.launch`.
"""

from __future__ import annotations

import json
import sys
from typing import Any, List, Optional

import typer

from cemctl.commands.common import (
    DbOption,
    HeartbeatTimeoutOption,
    RunsDirOption,
    cli_errors,
    stdout_console,
    db_url,
    stderr_console,
    heartbeat_timeout,
    runs_dir,
    scale_option,
)


def register(app: typer.Typer) -> None:
    @app.command("launch")
    def launch_cmd(
        target: str = typer.Argument(..., help="Grid file (experiments/*.toml) or the name of a planned experiment."),
        executor: str = typer.Option("local", "--executor", "-e", help="Where runs execute: local | slurm."),
        scale: Optional[str] = scale_option(None, "tiny for a grid file, an experiment's planned scale"),
        set_: Optional[List[str]] = typer.Option(None, "--set", help="Set one config value for every run of a grid "
                                                 "file (beats the file); repeatable."),
        axis: Optional[List[str]] = typer.Option(None, "--axis", metavar="KEY=V1,V2,...",
                                                 help="Add an axis to a grid file's (or replace the values of one it "
                                                 "has), e.g. --axis model.attn_steps=1,2,4; repeatable. The experiment "
                                                 "records it: `launch EXPERIMENT` later runs the same runs."),
        seeds: Optional[str] = typer.Option(None, "--seeds", help="Seeds to run, e.g. 0-7 or 0,1,5 (replaces the grid's "
                                            "list; finished runs are kept and not run again)."),
        add_seeds: int = typer.Option(0, "--add-seeds", min=0, help="Run N more seeds after the grid's (e.g. when "
                                      "`cemctl claims --power` asks for them)."),
        retry_failed: bool = typer.Option(False, "--retry-failed", help="Also re-run runs whose result is failed."),
        rerun_outdated: bool = typer.Option(False, "--rerun-outdated", help="Train again the finished runs trained by older model code (`cemctl status` counts them; their files are kept in .outdated-*/)."),
        redo_damaged: bool = typer.Option(False, "--redo-damaged", help="Repair damaged runs (their files moved to .damaged-*/, the recorded config restored) and run them again."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Show what would start; start nothing."),
        run: Optional[List[str]] = typer.Option(None, "--run", help="Only this run id of the experiment (repeatable)."),
        gpus: Optional[str] = typer.Option(None, "--gpus", help="local: GPU indices, e.g. 0,1,3 (default: all visible; 'none' = CPU)."),
        jobs_per_gpu: int = typer.Option(1, "--jobs-per-gpu", min=1, help="local: concurrent jobs per GPU."),
        gpus_per_run: int = typer.Option(1, "--gpus-per-run", min=1, help="local: GPUs per run (torchrun)."),
        workers: Optional[int] = typer.Option(None, "--workers", min=1, help="local, no GPU: CPU workers sharing the cores (default: one per core, one thread each)."),
        prepare: bool = typer.Option(False, "--prepare", help="slurm: prepare missing data on this node before submitting (without it, a launch whose data is not prepared is refused; local launches always prepare first)."),
        data_workers: Optional[int] = typer.Option(None, "--data-workers", min=1, help="Tokenizer processes when data is prepared here [default: the CPU count]."),
        detach: bool = typer.Option(False, "--detach", help="local: run the orchestrator in the background, log to runs/.launch/."),
        partition: Optional[str] = typer.Option(None, "--partition", help="slurm: partition."),
        account: Optional[str] = typer.Option(None, "--account", help="slurm: account."),
        qos: Optional[str] = typer.Option(None, "--qos", help="slurm: quality of service."),
        timeout_min: Optional[int] = typer.Option(None, "--timeout-min", help="slurm: time limit per job, minutes."),
        mem_gb: Optional[float] = typer.Option(None, "--mem-gb", help="slurm: memory per job, GB."),
        gpus_per_job: Optional[int] = typer.Option(None, "--gpus-per-job", help="slurm: GPUs per job (torchrun when > 1)."),
        cpus_per_task: Optional[int] = typer.Option(None, "--cpus-per-task", help="slurm: CPUs per job."),
        array_parallelism: Optional[int] = typer.Option(None, "--array-parallelism", help="slurm: at most N array tasks at once (%N)."),
        max_attempts: Optional[int] = typer.Option(None, "--max-attempts", help="slurm: starts per run, requeues included."),
        sbatch: Optional[List[str]] = typer.Option(None, "--sbatch", help="slurm: extra sbatch flag key=value or key (repeatable)."),
        heartbeat_timeout_s: Optional[float] = HeartbeatTimeoutOption,
        until: bool = typer.Option(False, "--until-decided", help="Then seeds in rounds for the arms of undecided claim parts until every part is decided (alpha spending; docs/claims.md)."),
        max_seeds: Optional[int] = typer.Option(None, "--max-seeds", help="--until-decided: the seed cap per arm (the design's maximum; default 16, a confirmation grid's its registered seeds)."),
        budget_hours: Optional[float] = typer.Option(None, "--budget-hours", help="--until-decided: stop before a round would pass this many run-hours."),
        as_json: bool = typer.Option(False, "--json", help="Print the launch report as JSON."),
        progress_every_s: float = typer.Option(60.0, "--progress-every-s", min=1.0, help="local, without a terminal "
                                               "(pipes, --detach logs, CI): a progress line per running run this often."),
        db: str = DbOption,
        runs: str = RunsDirOption,
    ) -> None:
        """Launch every run of a grid that is not done (idempotent)."""
        with cli_errors():
            from cemctl.executors.local.pinning import parse_gpus
            from cemctl.grid.expand import parse_seeds
            from cemctl.services.launch.launcher import LaunchRequest, detach as run_detached, launch

            overrides = {}
            if set_:
                from cemctl.grid import parse_overrides

                overrides = parse_overrides(list(set_))
            from cemctl.grid.overrides import parse_axes

            axes = parse_axes(list(axis or []))
            slurm = {
                "partition": partition, "account": account, "qos": qos, "timeout_min": timeout_min, "mem_gb": mem_gb,
                "gpus_per_job": gpus_per_job, "cpus_per_task": cpus_per_task, "array_parallelism": array_parallelism,
                "max_attempts": max_attempts, "sbatch": _sbatch_flags(sbatch) if sbatch else None,
            }
            req = LaunchRequest(
                target=target, executor=executor, scale=scale, overrides=overrides, retry_failed=retry_failed,
                redo_damaged=redo_damaged, rerun_outdated=rerun_outdated,
                dry_run=dry_run, run_ids=list(run) if run else None, gpus=parse_gpus(gpus), jobs_per_gpu=jobs_per_gpu,
                gpus_per_run=gpus_per_run, workers=workers, slurm=slurm, heartbeat_timeout_s=heartbeat_timeout(heartbeat_timeout_s),
                prepare=prepare, data_workers=data_workers,
                seeds=parse_seeds(seeds) if seeds is not None else None, add_seeds=add_seeds, axes=axes,
            )
            if detach and not dry_run:
                if executor != "local":
                    from cem_core.errors import ConfigError

                    raise ConfigError("--detach", f"is for the local executor (the {executor} executor returns at once)")
                # Plan and validate here first: bad input fails in the foreground, not in a log file.
                import dataclasses

                check = launch(dataclasses.replace(req, dry_run=True), db_url(db), runs_dir(runs))
                if not check.launched and not until:  # --until-decided may add seeds to a finished grid
                    stdout_console().print(check.summary(), markup=False, soft_wrap=True)
                    return
                argv = [a for a in sys.argv[1:] if a != "--detach"]
                started = run_detached(argv, runs_dir(runs), [s.run_dir for s in check.launched])
                for line in started.summary().splitlines():  # a terminal wraps a line between words; a pipe: one line
                    stdout_console().print(line, markup=False, soft_wrap=not sys.stdout.isatty())
                if started.exit_code:  # it ended already, with its status (2: bad input, 1: a run failed)
                    raise typer.Exit(started.exit_code)
                return
            if until:  # rounds of seeds until the claims are decided (cemctl.services.launch.until_decided)
                from cemctl.commands.until_decided import run_until_decided

                return run_until_decided(req, db_url(db), runs_dir(runs), max_seeds, budget_hours, as_json)
            _run(req, db, runs, as_json, progress_every_s)


def _sbatch_flags(items: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for item in items:
        key, eq, value = item.lstrip("-").partition("=")
        out[key] = value if eq else True
    return out


def selection_line(s) -> str:  # noqa: ANN001 - Selection
    """'  3fa2c1d0e5b7  resume from checkpoint step 40', '  ...  start', '  ...  skip  failed (use --retry-failed ...)':
    the action, and the reason where it says more."""
    from cem_core.names import printable

    reason = (s.reason or "").strip()
    text = reason if reason.startswith(s.action) else f"{s.action}  {reason}".rstrip()
    return printable(f"  {s.run_id}  {text}")


def _run(req, db, runs, as_json: bool, progress_every_s: float) -> None:  # type: ignore[no-untyped-def]
    from cem_core.names import printable
    from cemctl.services.launch.launcher import launch

    out = stdout_console()
    interactive = req.executor == "local" and not req.dry_run and not as_json and sys.stdout.isatty()
    view = None
    if interactive:
        from cemctl.commands.views.launch import LiveLaunchView

        view = LiveLaunchView(out)
    elif req.executor == "local" and not req.dry_run and not as_json:
        from cemctl.commands.views.launch import LogLaunchView

        view = LogLaunchView(lambda line: print(line, flush=True), every_s=progress_every_s)  # type: ignore[assignment]

    def say(line: str) -> None:
        if as_json:
            stderr_console().print(printable(line), markup=False, highlight=False, soft_wrap=True)
        else:  # a terminal wraps it between words (a hash or path is never cut); a pipe gets one line
            out.print(printable(line), markup=False, highlight=False, soft_wrap=not out.is_terminal)

    def show_selection(report) -> None:  # type: ignore[no-untyped-def]
        if view is not None:
            view.set_runs(report.axes, [s.run_id for s in report.launched],
                          finished_before=[s.run_dir for s in report.selections if not s.launches])
        if as_json:
            return
        shown = [s for s in report.selections if s.launches or report.dry_run or s.reason != "done"]
        plain = [s for s in shown if s.action == "start" and s.reason in ("start", "")]
        if len(plain) > 3:  # forty "start" lines say less than one
            say(f"  start   {len(plain)} runs")
            shown = [s for s in shown if s not in plain]
        for s in shown:  # a resume, a retry or a skip with its reason: a line each
            say(selection_line(s))
        if report.dry_run or not report.launched:
            say(report.summary())
        elif req.executor == "local" and not req.gpus:  # what runs here already measured (cemctl.services.plan)
            from cemctl.commands.views.plan import default_cpu_workers
            from cemctl.services.plan import launch_estimate

            line = launch_estimate(db_url(db), [s.run_dir for s in report.launched],
                                   req.workers or default_cpu_workers())
            if line:
                say(line)

    def run() -> Any:
        return launch(req, db_url(db), runs_dir(runs), on_selected=show_selection, on_tick=view, on_data=say)

    if interactive:
        with view:  # type: ignore[union-attr]
            report = run()
    else:
        report = run()
    if as_json:
        print(json.dumps(report.to_json()))
    elif report.submitted:
        say(report.summary())
    if report.failed:  # scripts and pipelines (--json included) see a failed run in the exit code
        stderr_console().print(printable(report.failure_summary()), markup=False, highlight=False,
                               soft_wrap=not sys.stderr.isatty())
        raise typer.Exit(1)
