"""Launch an experiment's runs (`cemctl launch FILE|EXPERIMENT`): the one library call behind the command.

    report = launch(LaunchRequest(target="experiments/demo.toml", executor="local"), db_url, runs_root)

Steps: plan (a grid file is validated, its run dirs' config.json written and
the runs recorded, `cemctl.grid.plan_experiment`; an experiment name reuses
the recorded runs), sync the run dirs, select what to (re)start
(`select.py`: done runs never run twice), snapshot the code
(`snapshot.py`), then hand the jobs to the executor: the local executor runs
them in the foreground (with a live progress view) and returns when they
end; the SLURM executor submits arrays and returns at once. `dry_run` stops
after the selection. SLURM options: the grid file's `[slurm]` table, then
the command line.
"""

from __future__ import annotations

import os
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cem_core.errors import CemError, ConfigError
from cemctl.executors import get_executor
from cemctl.executors.base import Job, Submitted, code_env
from cemctl.launch.select import Selection, select_runs


@dataclass
class LaunchRequest:
    target: str  # grid file or experiment name
    executor: str = "local"
    scale: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)  # --set key=value
    retry_failed: bool = False
    dry_run: bool = False
    run_ids: list[str] | None = None  # only these runs of the experiment
    # local executor
    gpus: list[int] | None = None
    jobs_per_gpu: int = 1
    gpus_per_run: int = 1
    workers: int | None = None
    # slurm executor: SlurmOptions fields given on the command line (None = from the grid file)
    slurm: dict[str, Any] = field(default_factory=dict)
    heartbeat_timeout_s: float | None = None
    snapshot: bool = True  # run jobs from a code snapshot (tests of the executor may turn it off)
    job_env: dict[str, str] = field(default_factory=dict)  # extra environment for every job


@dataclass
class LaunchReport:
    experiment: str
    executor: str
    selections: list[Selection]
    submitted: list[Submitted] = field(default_factory=list)
    snapshot: str = ""
    dry_run: bool = False

    @property
    def launched(self) -> list[Selection]:
        return [s for s in self.selections if s.launches]

    def summary(self) -> str:
        n = len(self.launched)
        skipped = len(self.selections) - n
        verb = "would launch" if self.dry_run else "launched"
        text = f"{self.experiment}: {verb} {n} of {len(self.selections)} runs with the {self.executor} executor"
        if skipped:
            text += f" ({skipped} skipped)"
        if self.submitted:
            states: dict[str, int] = {}
            for s in self.submitted:
                states[s.state] = states.get(s.state, 0) + 1
            text += "; " + ", ".join(f"{k} {v}" for k, v in sorted(states.items()))
        if self.snapshot:
            text += f"; code snapshot {self.snapshot}"
        return text

    def to_json(self) -> dict[str, Any]:
        by_id = {s.run_id: s for s in self.submitted}
        return {
            "experiment": self.experiment, "executor": self.executor, "dry_run": self.dry_run, "snapshot": self.snapshot,
            "runs": [
                {
                    "run_id": s.run_id, "action": s.action, "reason": s.reason,
                    "job_id": by_id[s.run_id].job_id if s.run_id in by_id else None,
                    "state": by_id[s.run_id].state if s.run_id in by_id else None,
                    "end_reason": by_id[s.run_id].reason if s.run_id in by_id else None,
                }
                for s in self.selections
            ],
        }


@dataclass
class Target:
    experiment: str
    runs: list[tuple[str, Path]]  # (run_id, run_dir), grid order
    slurm_table: dict[str, Any]
    source: str  # file name for error messages


def looks_like_file(target: str) -> bool:
    return target.endswith(".toml") or os.sep in target or Path(target).is_file()


def resolve_target(engine: Any, url: str, runs_root: Path, req: LaunchRequest) -> Target:
    """Plan a grid file (records it) or look up a recorded experiment."""
    from cemctl.db import get_experiment, list_runs

    if looks_like_file(req.target):
        from cemctl.grid import DEFAULT_SCALE, plan_experiment
        from cemctl.grid.spec import parse_toml

        report = plan_experiment(
            req.target, scale=req.scale or DEFAULT_SCALE, overrides=req.overrides, db_url=url, runs_root=runs_root,
        )
        doc, _ = parse_toml(req.target)
        slurm = doc.get("slurm", {})
        if not isinstance(slurm, dict):
            raise ConfigError("slurm", "must be a table ([slurm])", source=req.target)
        runs = [(pr.run_id, runs_root / pr.run_id) for pr in report.plan.runs]
        return Target(report.plan.name, runs, slurm, req.target)
    if req.scale or req.overrides:
        raise ConfigError("--scale/--set", f"apply to a grid file; {req.target!r} is a recorded experiment (give its grid file to re-plan)")
    exp = get_experiment(engine, req.target)
    rows = list_runs(engine, experiment=req.target)  # raises for an unknown name, listing the known ones
    slurm: dict[str, Any] = {}
    if exp is not None and exp.grid_text:
        try:
            slurm = tomllib.loads(exp.grid_text).get("slurm", {}) or {}
        except tomllib.TOMLDecodeError:
            slurm = {}
    runs = [(r.id, Path(r.run_dir) if r.run_dir else runs_root / r.id) for r in rows]
    return Target(req.target, runs, slurm, exp.grid_path if exp is not None and exp.grid_path else req.target)


def build_executor(req: LaunchRequest, target: Target, runs_root: Path, on_tick: Callable[..., None] | None) -> Any:
    cls = get_executor(req.executor)  # rejects unknown names
    if req.executor == "local":
        from cemctl.executors.local import LocalOptions

        opts = LocalOptions(gpus=req.gpus, jobs_per_gpu=req.jobs_per_gpu, gpus_per_run=req.gpus_per_run, workers=req.workers)
        return cls(opts, on_tick=on_tick)
    from cemctl.executors.slurm import SlurmOptions

    opts = SlurmOptions.from_mapping(target.slurm_table, source=target.source).merged(req.slurm)
    return cls(opts, folder=runs_root / ".slurm")


def launch(
    req: LaunchRequest,
    url: str,
    runs_root: Path | str,
    *,
    on_selected: Callable[[LaunchReport], None] | None = None,
    on_tick: Callable[..., None] | None = None,
) -> LaunchReport:
    """Plan, select, snapshot and run/submit. Returns what was (or would be) launched."""
    from cemctl.db import open_db, sync_runs
    from cemctl.executors import jobfile
    from cemctl.launch.snapshot import take_snapshot

    get_executor(req.executor)  # bad executor name: fail before planning anything
    runs_root = Path(runs_root).resolve()
    engine = open_db(url)
    target = resolve_target(engine, url, runs_root, req)
    runs = target.runs
    if req.run_ids is not None:
        wanted = set(req.run_ids)
        unknown = wanted - {rid for rid, _ in runs}
        if unknown:
            raise CemError(f"run: {sorted(unknown)[0]!r} is not a run of {target.experiment}")
        runs = [r for r in runs if r[0] in wanted]
    timeout_s = jobfile.heartbeat_timeout_s(req.heartbeat_timeout_s)
    executor = build_executor(req, target, runs_root, on_tick)  # bad options fail here, dry run included
    selections = select_runs(runs, retry_failed=req.retry_failed)
    report = LaunchReport(target.experiment, req.executor, selections, dry_run=req.dry_run)
    if req.dry_run or not report.launched:
        if on_selected:
            on_selected(report)
        return report
    env: dict[str, str] = {}
    snap_hash = ""
    if req.snapshot:
        snap = take_snapshot(runs_root)
        env = code_env(snap.path, snap.hash)
        snap_hash = snap.hash
    env.update(req.job_env)
    env.setdefault("CEMCTL_HEARTBEAT_TIMEOUT_S", str(timeout_s))
    report.snapshot = snap_hash
    jobs = []
    for sel in report.launched:
        jobfile.clear_cancel(sel.run_dir)
        jobs.append(Job(run_id=sel.run_id, run_dir=sel.run_dir, nproc=max(1, req.gpus_per_run), env=dict(env), snapshot=snap_hash))
    if on_selected:
        on_selected(report)
    try:
        report.submitted = executor.submit(jobs)
    finally:
        sync_runs(engine, runs_root, heartbeat_timeout_s=timeout_s, run_ids=[j.run_id for j in jobs])
    return report


def detach(argv: list[str], runs_root: Path | str) -> tuple[int, Path]:
    """Run `cemctl launch ...` (argv without --detach) in the background, logging to a file.

    Returns (pid, log path). The orchestrator survives the terminal closing (new session).
    """
    import subprocess

    logs = Path(runs_root).resolve() / ".launch"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"launch-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cemctl.cli", *argv], stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, cwd=os.getcwd(),
        )
    return proc.pid, log_path
