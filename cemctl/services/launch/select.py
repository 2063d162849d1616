"""Which runs a launch (re)starts (`cemctl launch`): idempotent, from the run directories.

A run is started when it has no terminal result and no live job:
- result.json `done` (or `diverged`): never again;
- result.json `failed`: only with `--retry-failed` (the trainer resumes it);
- a job still queued or running (the executor recorded in job.json says so:
  a live local process, or the SLURM job in `squeue`): left alone;
- a damaged run (its files contradict the database, or fail their schema:
  `cem_core.runfolder`): skipped with the reason unless `--redo-damaged`;
- a finished run trained by older model code (`cemctl.db.outdated`):
  skipped as done unless `--rerun-outdated` (the launcher sets its files aside);
- anything else (planned, queued by a dead orchestrator, stale, killed,
  cancelled, interrupted): started, resuming from its newest checkpoint.

Whether recorded jobs are alive is asked of their executors in one batch
(`cemctl.executors.jobs_alive`); "cannot tell" never starts a run twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from cem_core import runfiles
from cem_core.runfiles import RunState
from cemctl.executors import jobs_alive

START, RESUME, RETRY, SKIP = "start", "resume", "retry", "skip"


@dataclass
class Selection:
    run_id: str
    run_dir: Path
    action: str  # start | resume | retry | skip
    reason: str
    outdated: bool = False  # finished, trained by older model code (cemctl.db.outdated)

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
                rerun_outdated: bool = False, now: float | None = None) -> list[Selection]:
    """A Selection for every (run_id, run_dir), in the given order.

    `damaged` maps run ids the database found damaged to the reason: they are
    skipped with it unless `redo_damaged` (the launcher repairs them first).
    A finished run trained by older model code is judged from the result.json read here (its recorded code
    fingerprint) and marked `outdated`: skipped with that said, or with `rerun_outdated` started again (the
    launcher sets its files aside first).
    """
    from cemctl.db.outdated import judge

    from cem_core.runfiles.results import read_result_file

    damaged = dict(damaged or {})
    files = {run_id: read_result_file(Path(run_dir), now=now) for run_id, run_dir in runs}
    results = {run_id: found.result for run_id, found in files.items()}
    for run_id, found in files.items():  # the one rule of what a result is (ingest calls the same run damaged)
        if found.problem and run_id not in damaged:
            damaged[run_id] = found.problem
    stale = judge((run_id, res.code_fingerprint, partial(_saved_config, Path(run_dir)))
                  for run_id, run_dir in runs for res in (results[run_id],)
                  if res is not None and RunState(res.state).final and run_id not in damaged)
    older = {rid: f"trained by older model code ({o.recorded}; this code is {o.current})" for rid, o in stale.items()}
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
        if files[run_id].pending and run_id not in damaged:
            out.append(Selection(run_id, run_dir, SKIP, "result.json cannot be read yet (not valid JSON); judged "
                                 "again at the next launch (never started over: its file would be replaced)"))
            continue
        result = results[run_id]
        state = result.state if result is not None else None
        if run_id in older and rerun_outdated:
            out.append(Selection(run_id, run_dir, RETRY, f"rerun: {older[run_id]}", outdated=True))
            continue
        why = f", {older[run_id]} (use --rerun-outdated to train it again)" if run_id in older else ""
        if state == "done" and run_id not in damaged:
            out.append(Selection(run_id, run_dir, SKIP, "done" + why, outdated=bool(why)))
            continue
        if state == "diverged" and run_id not in damaged:
            out.append(Selection(run_id, run_dir, SKIP, "diverged (a result, not retried)" + why, outdated=bool(why)))
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
        previous = results[run_id]
        failed = previous is not None and previous.state == "failed"
        if run_id in damaged:
            result_list.append(Selection(run_id, run_dir, RETRY, f"redo damaged run ({damaged[run_id]})"))
        elif failed:
            result_list.append(Selection(run_id, run_dir, RETRY, "retry failed run" + (f" from checkpoint step {step}" if step else "")))
        elif step:
            result_list.append(Selection(run_id, run_dir, RESUME, f"resume from checkpoint step {step}"))
        else:
            result_list.append(Selection(run_id, run_dir, START, "start"))
    return result_list


def _saved_config(run_dir: Path) -> Any:
    return runfiles.read_run_config(run_dir).config
