"""Stop runs (`cemctl cancel RUN|EXPERIMENT`): scancel for SLURM jobs, SIGTERM for local ones.

Every unfinished run of the target (not done / diverged / failed) gets a
`cancel` file (no executor will start it again until the next launch), its
live job is stopped through the executor recorded in its job.json, and a
`cancelled` event; the database is updated from the run directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cem_core.errors import CemError
from cemctl.executors import get_executor, jobfile


@dataclass
class Cancelled:
    run_id: str
    action: str  # what was done, one line


def cancel_target(url: str, runs_root: Path, target: str) -> list[Cancelled]:
    """Cancel a run (id or unique prefix) or every unfinished run of an experiment."""
    from cemctl.db import get_experiment, ingest_run, list_runs, open_db

    engine = open_db(url)
    runs: list[tuple[str, Path]]
    if get_experiment(engine, target) is not None:
        runs = [(r.id, Path(r.run_dir) if r.run_dir else Path(runs_root) / r.id) for r in list_runs(engine, experiment=target)]
    else:
        from cemctl.status.logs import find_run_dir

        try:
            run_dir = find_run_dir(target, Path(runs_root), url)
        except CemError:
            raise CemError(f"cancel: {target!r} is neither an experiment nor a run (see `cemctl status`)") from None
        runs = [(run_dir.name, run_dir)]
    out: list[Cancelled] = []
    for run_id, run_dir in runs:
        result = jobfile.read_result(run_dir)
        if result and result.get("state") in ("done", "diverged", "failed"):
            continue
        job = jobfile.read_job(run_dir) or {}
        name = job.get("executor")
        if name in ("local", "slurm"):
            action = get_executor(name).cancel(run_dir, job)
        else:
            jobfile.request_cancel(run_dir)
            jobfile.append_event(run_dir, "cancelled", "cancelled by user")
            action = "marked cancelled"
        try:
            ingest_run(engine, run_dir, heartbeat_timeout_s=jobfile.heartbeat_timeout_s())
        except CemError:
            pass
        out.append(Cancelled(run_id, action))
    return out
