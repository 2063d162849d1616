"""Stop runs (`cemctl cancel RUN|EXPERIMENT`): scancel for SLURM jobs, SIGTERM for local ones.

Every unfinished run of the target (one with no result.json) gets a `cancel` file
(no executor will start it again until the next launch), its live job is
stopped through the executor recorded in its job.json, and a `cancelled`
event; the database is updated from the run directory. The target is resolved
by `cemctl.services.targets.resolve_runs`. A run whose result.json is not a result (damaged,
by `cem_core.runfiles.results.read_result_file`) has ended: it is named, not marked cancelled
(unless a job of it is still live). One run that cannot be cancelled
(its folder is gone or unwritable) is reported and the others go on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cem_core import runfiles
from cem_core.errors import CemError
from cemctl.executors import EXECUTORS, get_executor


@dataclass
class Cancelled:
    run_id: str
    action: str  # what was done, one line


def cancel_target(url: str, runs_root: Path, target: str, *, scale: str | None = None,
                  heartbeat_timeout_s: float | None = None) -> list[Cancelled]:
    """Cancel a run (id or unique prefix) or every unfinished run of an experiment or grid file."""
    from cemctl.db import ingest_run, open_db
    from cemctl.services.targets import resolve_runs

    engine = open_db(url)
    timeout_s = runfiles.heartbeat_timeout_s(heartbeat_timeout_s)
    out: list[Cancelled] = []
    from cem_core.runfiles.results import read_result_file

    for ref in resolve_runs(engine, target, runs_root, scale=scale).runs:
        run_dir = ref.run_dir
        found = read_result_file(run_dir)  # the one rule of what result.json says (launch and ingest ask it too)
        if found.result is not None:
            continue
        job = runfiles.read_job(run_dir)
        if found.mtime is not None and not (job is not None and job.live):  # a result.json that is not a result
            why = found.problem or "result.json cannot be read yet"
            out.append(Cancelled(ref.run_id, f"not cancelled: it has ended ({why}); `cemctl launch --redo-damaged` "
                                 "trains it again"))
            continue
        try:
            if job is not None and job.executor in EXECUTORS:
                action = get_executor(job.executor).cancel(run_dir, job)
            else:
                runfiles.request_cancel(run_dir)
                runfiles.append_event(run_dir, "cancelled", "cancelled by user")
                action = "marked cancelled"
        except OSError as e:
            out.append(Cancelled(ref.run_id, f"not cancelled: {run_dir}: {e.strerror or e}"))
            continue
        try:
            ingest_run(engine, run_dir, heartbeat_timeout_s=timeout_s)
        except CemError:
            pass
        out.append(Cancelled(ref.run_id, action))
    return out
