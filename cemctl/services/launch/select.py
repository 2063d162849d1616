"""Which runs a launch (re)starts (`cemctl launch`): idempotent, from the run directories.

A run is started when it has no terminal result and no live job:
- result.json `done` (or `diverged`): never again;
- result.json `failed`: only with `--retry-failed` (the trainer resumes it);
- a job still queued or running (the executor recorded in job.json says so:
  a live local process, or the SLURM job in `squeue`): left alone;
- a damaged run (its files contradict the database, or fail their schema:
  `cemctl.db.state`): skipped with the reason unless `--redo-damaged`;
- a finished run trained by older model code (`cemctl.db.outdated`):
  skipped as done unless `--rerun-outdated` (the launcher sets its files aside);
- anything else (planned, queued by a dead orchestrator, stale, killed,
  cancelled, interrupted): started, resuming from its newest checkpoint.

Whether recorded jobs are alive is asked of their executors in one batch
(`cemctl.executors.jobs_alive`); "cannot tell" never starts a run twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cem_core import runfiles
from cemctl.executors import jobs_alive

START, RESUME, RETRY, SKIP = "start", "resume", "retry", "skip"


@dataclass
class Selection:
    run_id: str
    run_dir: Path
    action: str  # start | resume | retry | skip
    reason: str

    @property
    def launches(self) -> bool:
        return self.action != SKIP


def newest_checkpoint_step(run_dir: Path) -> int | None:
    try:
        found = runfiles.list_checkpoints(Path(run_dir) / runfiles.CHECKPOINT_DIR)
    except OSError:
        return None
    return found[-1][0] if found else None


def select_runs(runs: list[tuple[str, Path]], *, retry_failed: bool = False,
                damaged: dict[str, str] | None = None, redo_damaged: bool = False,
                outdated: dict[str, str] | None = None) -> list[Selection]:
    """A Selection for every (run_id, run_dir), in the given order.

    `damaged` maps run ids the database found damaged to the reason: they are
    skipped with it unless `redo_damaged` (the launcher repairs them first).
    `outdated` maps finished runs to rerun (trained by older code) to why: they start again (the launcher sets
    their files aside first).
    """
    damaged = damaged or {}
    outdated = outdated or {}
    out: list[Selection | None] = []
    pending: list[tuple[int, Path, runfiles.JobRecord]] = []
    for run_id, run_dir in runs:
        run_dir = Path(run_dir)
        if run_id in damaged and not redo_damaged:
            out.append(Selection(run_id, run_dir, SKIP, f"damaged: {damaged[run_id]} (use --redo-damaged to run it again)"))
            continue
        if not run_dir.is_dir():
            out.append(Selection(run_id, run_dir, SKIP, f"damaged: run directory {run_dir} is gone"))
            continue
        result = runfiles.read_result(run_dir)
        state = (result or {}).get("state")
        if run_id in outdated and state in ("done", "diverged") and run_id not in damaged:
            out.append(Selection(run_id, run_dir, RETRY, f"rerun: {outdated[run_id]}"))
            continue
        if state == "done" and run_id not in damaged:
            out.append(Selection(run_id, run_dir, SKIP, "done"))
            continue
        if state == "diverged" and run_id not in damaged:
            out.append(Selection(run_id, run_dir, SKIP, "diverged (a result, not retried)"))
            continue
        if state == "failed" and not retry_failed:
            out.append(Selection(run_id, run_dir, SKIP, "failed (use --retry-failed to run it again)"))
            continue
        job = runfiles.read_job(run_dir)
        if job is not None and job.live:
            pending.append((len(out), run_dir, job))
        out.append(None)
    alive = jobs_alive([(d, j) for _, d, j in pending])
    waiting = {i: (job, answer) for (i, _, job), answer in zip(pending, alive)}
    result_list: list[Selection] = []
    for i, (run_id, run_dir) in enumerate(runs):
        sel = out[i]
        if sel is not None:
            result_list.append(sel)
            continue
        run_dir = Path(run_dir)
        if i in waiting:
            job, answer = waiting[i]
            if answer is None:
                result_list.append(Selection(run_id, run_dir, SKIP, f"{job.executor} job {job.job_id} may still be "
                                             "queued (its executor cannot tell now); cancel it first"))
                continue
            if answer:
                result_list.append(Selection(run_id, run_dir, SKIP, f"already {job.state} ({job.executor} job {job.job_id})"))
                continue
        step = newest_checkpoint_step(run_dir)
        failed = (runfiles.read_result(run_dir) or {}).get("state") == "failed"
        if run_id in damaged:
            result_list.append(Selection(run_id, run_dir, RETRY, f"redo damaged run ({damaged[run_id]})"))
        elif failed:
            result_list.append(Selection(run_id, run_dir, RETRY, "retry failed run" + (f" from checkpoint step {step}" if step else "")))
        elif step:
            result_list.append(Selection(run_id, run_dir, RESUME, f"resume from checkpoint step {step}"))
        else:
            result_list.append(Selection(run_id, run_dir, START, "start"))
    return result_list
