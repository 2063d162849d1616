"""Which runs a launch (re)starts (`cemctl launch`): idempotent, from the run directories.

A run is started when it has no terminal result and no live job:
- result.json `done` (or `diverged`): never again;
- result.json `failed`: only with `--retry-failed` (the trainer resumes it);
- a job still queued or running (the executor recorded in job.json says so:
  a live local process, or the SLURM job in `squeue`): left alone;
- anything else (planned, queued by a dead orchestrator, stale, killed,
  cancelled, interrupted): started, resuming from its newest checkpoint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from cemctl.executors import jobfile

START, RESUME, RETRY, SKIP = "start", "resume", "retry", "skip"
_CKPT = re.compile(r"step_(\d+)\.pt$")


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
    steps = []
    try:
        for p in (Path(run_dir) / "checkpoints").iterdir():
            m = _CKPT.search(p.name)
            if m:
                steps.append(int(m.group(1)))
    except OSError:
        return None
    return max(steps) if steps else None


def select_runs(runs: list[tuple[str, Path]], *, retry_failed: bool = False) -> list[Selection]:
    """A Selection for every (run_id, run_dir), in the given order."""
    from cemctl.executors import get_executor

    squeue: dict[str, tuple[str, str]] | None = None
    out: list[Selection] = []
    for run_id, run_dir in runs:
        run_dir = Path(run_dir)
        result = jobfile.read_result(run_dir)
        state = (result or {}).get("state")
        if state == "done":
            out.append(Selection(run_id, run_dir, SKIP, "done"))
            continue
        if state == "diverged":
            out.append(Selection(run_id, run_dir, SKIP, "diverged (a result, not retried)"))
            continue
        if state == "failed" and not retry_failed:
            out.append(Selection(run_id, run_dir, SKIP, "failed (use --retry-failed to run it again)"))
            continue
        job = jobfile.read_job(run_dir)
        if job and job.get("executor") in ("local", "slurm") and job.get("state") in ("queued", "running"):
            if job["executor"] == "slurm":
                from cemctl.executors.slurm import SlurmError, SlurmExecutor, squeue_states

                if squeue is None:
                    try:
                        squeue = squeue_states()
                    except SlurmError:  # no squeue here: is_active falls back to the heartbeat
                        squeue = {"<unavailable>": ("", "")}
                if "<unavailable>" in squeue:
                    # No squeue: a job that never reported may still be pending; do not start it twice.
                    # A job that ran is judged by its heartbeat.
                    if job["state"] == "queued" and jobfile.heartbeat_age_s(run_dir) is None:
                        out.append(Selection(run_id, run_dir, SKIP, f"SLURM job {job.get('job_id')} may still be queued (squeue failed); cancel it first"))
                        continue
                    active = SlurmExecutor.is_active(run_dir, job, queue=None)
                else:
                    active = SlurmExecutor.is_active(run_dir, job, queue=squeue)
            else:
                active = get_executor("local").is_active(run_dir, job)
            if active:
                out.append(Selection(run_id, run_dir, SKIP, f"already {job['state']} ({job['executor']} job {job.get('job_id')})"))
                continue
        step = newest_checkpoint_step(run_dir)
        if state == "failed":
            out.append(Selection(run_id, run_dir, RETRY, "retry failed run" + (f" from checkpoint step {step}" if step else "")))
        elif step:
            out.append(Selection(run_id, run_dir, RESUME, f"resume from checkpoint step {step}"))
        else:
            out.append(Selection(run_id, run_dir, START, "start"))
    return out
