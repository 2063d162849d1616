"""The function a SLURM job runs (`cemctl launch --executor slurm`): one run, checkpointable.

submitit pickles a `TrainJob` and runs it inside the allocation with the code
snapshot first on `PYTHONPATH`. It starts the trainer as a child process
(`python -m cem_core.train RUN_DIR`, or torchrun for multi-GPU runs), records
the attempt in `job.json` / `events.jsonl`, and waits. On a timeout or
preemption signal submitit calls `checkpoint()`: the trainer (which got the
signal too: it finishes its step and checkpoints it, see cem_core/train/loop.py)
is asked to stop (SIGTERM), and the same job is requeued; on its next start the
trainer resumes from that checkpoint. `scontrol requeue` and a preemption send
SIGTERM: the trainer checkpoints the same way, and SLURM starts the job again.
Attempts are bounded by `max_attempts`: past it the run is recorded as failed.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from submitit.helpers import Checkpointable, DelayedSubmission

from cem_core import runfiles
from cemctl.executors.base import exit_state, pid_alive


def slurm_job_id() -> str:
    array_job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array_job and task:
        return f"{array_job}_{task}"
    return os.environ.get("SLURM_JOB_ID", "")


class TrainJob(Checkpointable):
    """Callable run by submitit: `TrainJob()(run_dir, argv, env, max_attempts)`."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def __call__(self, run_dir: str, argv: list[str], env: dict[str, str], max_attempts: int = 4) -> dict[str, Any]:
        rd = Path(run_dir)
        job_id = slurm_job_id()
        job = runfiles.read_job(rd)
        attempt = (job.attempt if job else 0) + 1
        restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        common: dict[str, Any] = {"executor": "slurm", "job_id": job_id, "attempt": attempt}
        if runfiles.cancel_requested(rd):
            runfiles.update_job(rd, state="cancelled", reason="cancelled before it started", job_id=job_id)
            return {"state": "cancelled"}
        result = runfiles.read_result(rd)
        if result:
            runfiles.update_job(rd, state="exited", reason="already finished", job_id=job_id)
            return {"state": result.state}
        if attempt > max_attempts:
            reason = f"gave up after {max_attempts} attempts (requeued {restarts} times)"
            runfiles.update_job(rd, state="exited", reason=reason, job_id=job_id, ended_time=time.time())
            runfiles.append_event(rd, "failed", reason, **common)
            return {"state": "failed", "reason": reason}
        full_env = dict(os.environ)
        full_env.update(env)
        token = secrets.token_hex(12)  # the trainer proves it is this job's with it (cem_core.runfiles.process)
        full_env.update({"CEMCTL_EXECUTOR": "slurm", "CEMCTL_ATTEMPT": str(attempt), "CEMCTL_JOB_ID": job_id,
                         runfiles.TOKEN_ENV: token})
        cpus = os.environ.get("SLURM_CPUS_PER_TASK")
        if cpus and "OMP_NUM_THREADS" not in env and "CEMCTL_NUM_THREADS" not in env:
            full_env["OMP_NUM_THREADS"] = full_env["CEMCTL_NUM_THREADS"] = cpus  # the cores SLURM gave the job
        sys.stdout.write(f"=== attempt {attempt} (restart {restarts}) of job {job_id} on {runfiles.hostname()}: {' '.join(argv)}\n")
        sys.stdout.flush()
        # Same process group as this wrapper: SLURM's signals (requeue, scancel) reach the trainer too.
        self._proc = subprocess.Popen(argv, env=full_env, stdin=subprocess.DEVNULL)
        runfiles.update_job(
            rd, state="running", job_id=job_id, host=runfiles.hostname(), pid=self._proc.pid, attempt=attempt,
            pid_start=runfiles.process_start(self._proc.pid), token=token,
            started_time=time.time(), ended_time=None, exit_code=None, restart_count=restarts, reason="",
        )
        # No "running" event here: the trainer writes it (and counts its attempts from those events).
        try:
            returncode = self._proc.wait()
        finally:
            if self._proc.poll() is None:  # the wrapper is going away: do not leave the trainer behind
                _stop(self._proc, timeout_s=10)
        from cem_core.runfiles.failure import EXPERIMENT_ENV

        state, reason, has_result = exit_state(rd, returncode, env.get(EXPERIMENT_ENV, ""))
        if not has_result and returncode in (-signal.SIGTERM, -signal.SIGKILL, -signal.SIGINT):
            # "stale": not finished, not running; SLURM requeues it (or it was scancelled); resumable.
            state, reason = "stale", f"killed by signal {-returncode} (requeue, preemption, timeout or scancel); resumable from its last checkpoint"
        runfiles.update_job(rd, state="cancelled" if state == "cancelled" else "exited", exit_code=returncode,
                            ended_time=time.time(), reason=reason)
        # The trainer records its terminal events itself (result.json's, and `stale` when it was preempted).
        if not has_result and state != "cancelled" and returncode != runfiles.EXIT_PREEMPTED:
            runfiles.append_event(rd, state, reason, exit_code=returncode, **common)
        return {"state": state, "reason": reason, "exit_code": returncode}

    def checkpoint(self, run_dir: str, argv: list[str], env: dict[str, str], max_attempts: int = 4) -> DelayedSubmission:
        """Timeout / preemption: stop the trainer (it resumes from its checkpoint) and requeue the same job.

        Runs inside submitit's signal handler, which interrupts `Popen.wait()` in `__call__`:
        the child must not be reaped here (Popen's wait lock is held), only signalled.
        """
        if self._proc is not None:  # the trainer checkpoints the step it is in on SIGTERM / SIGUSR2, then exits
            _stop_unreaped(self._proc.pid, timeout_s=60)
        rd = Path(run_dir)
        runfiles.update_job(rd, state="queued", reason="requeued after timeout or preemption")
        runfiles.append_event(rd, "queued", "requeued after timeout or preemption", executor="slurm", job_id=slurm_job_id())
        fresh = TrainJob()
        return DelayedSubmission(fresh, run_dir, argv, env, max_attempts)

    def __getstate__(self) -> dict[str, Any]:
        return {}  # never pickle a Popen

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._proc = None


def _stop(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    try:
        proc.terminate()
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    except ProcessLookupError:
        pass


def _stop_unreaped(pid: int, timeout_s: float) -> None:
    """SIGTERM, then SIGKILL after `timeout_s`, waiting for the process to exit without reaping it."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.time() + timeout_s
    while pid_alive(pid) and time.time() < deadline:
        time.sleep(0.2)
    if pid_alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
