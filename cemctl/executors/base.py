"""What every executor shares (`cemctl launch`, `cemctl cancel`, `cemctl status`): the job spec,
the trainer command, the executor interface and how a finished job process is judged.

An executor runs `Job`s: one job = one run directory = one training process
(or one `torchrun` group for multi-GPU runs). The launcher builds the jobs
(`trainer_argv` + `code_env`, so the job runs the code snapshot taken at launch
time); executor tests may give any small command instead of the trainer.
Whether recorded jobs are still alive is each executor's own question
(`Executor.alive`, asked for a batch of runs at once: SLURM reads squeue once).
"""

from __future__ import annotations

import abc
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping

from cem_core import runfiles
from cem_core.runfiles import JobRecord


@dataclass
class Job:
    """One run to execute."""

    run_id: str
    run_dir: Path
    argv: list[str] = field(default_factory=list)  # the command; [] means the trainer
    nproc: int = 1  # processes per run (GPUs of a multi-GPU run)
    env: dict[str, str] = field(default_factory=dict)  # extra environment (code snapshot, ...)
    snapshot: str = ""  # code snapshot hash

    def command(self, python: str | None = None) -> list[str]:
        return list(self.argv) if self.argv else trainer_argv(self.run_dir, self.nproc, python=python)


@dataclass
class Submitted:
    """What `Executor.submit` reports per job: the executor's job id, or the reason it did not start."""

    run_id: str
    job_id: str | None
    state: str  # queued | running | done | failed | cancelled | ...
    reason: str = ""


def trainer_argv(run_dir: Path, nproc: int = 1, python: str | None = None) -> list[str]:
    """`python -m cem_core.train RUN_DIR`, or torchrun with `nproc` processes."""
    python = python or sys.executable
    folder = str(Path(run_dir).resolve())
    if nproc <= 1:
        return [python, "-m", "cem_core.train", folder]
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "-m", "cem_core.train", folder]


def code_env(snapshot_dir: Path | str | None, snapshot_hash: str = "") -> dict[str, str]:
    """Environment that makes a job import the code snapshot, not the working tree.

    PYTHONSAFEPATH=1 stops `python -m` from putting the current directory first
    on sys.path (which would import the repository's live code).
    """
    if not snapshot_dir:
        return {}
    env = {"PYTHONPATH": str(Path(snapshot_dir).resolve()), "PYTHONSAFEPATH": "1"}
    if snapshot_hash:
        env["CEMCTL_SNAPSHOT"] = snapshot_hash
    return env


class Executor(abc.ABC):
    """Runs jobs somewhere. Subclasses are registered by name in `cemctl.executors`."""

    name: ClassVar[str]

    @classmethod
    @abc.abstractmethod
    def from_launch(cls, options: Mapping[str, Any], *, grid_table: Mapping[str, Any], source: str, runs_root: Path,
                    on_tick: Callable[..., None] | None = None) -> "Executor":
        """The executor a `cemctl launch` asks for: `options` holds the command line's executor options (each
        executor reads its own and checks them), `grid_table` the grid file's table named after the executor
        (e.g. `[slurm]`; `source` names that file in errors)."""

    @abc.abstractmethod
    def submit(self, jobs: list[Job]) -> list[Submitted]:
        """Start (or queue) the jobs. The local executor runs them to the end in the foreground."""

    @classmethod
    @abc.abstractmethod
    def alive(cls, jobs: list[tuple[Path, JobRecord]]) -> list[bool | None]:
        """For each (run_dir, job.json record): is the job still queued or running?

        None means "cannot tell now" (e.g. squeue failed): callers must not start
        the run a second time on that answer, nor declare it lost.
        """

    @classmethod
    @abc.abstractmethod
    def cancel(cls, run_dir: Path, job: JobRecord) -> str:
        """Stop the recorded job; returns a one-line description of what was done."""

    @classmethod
    def gone_reason(cls, run_dir: Path, job: JobRecord) -> str:
        """Why a job `alive` called gone is not running, in words (the stale reason status records)."""
        return f"{cls.name} job {job.job_id} is no longer queued or running and never reported"


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) is not alive.
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def heartbeat_fresh(run_dir: Path) -> bool:
    """The trainer wrote its heartbeat within the heartbeat timeout."""
    age = runfiles.heartbeat_age_s(run_dir)
    return age is not None and age < runfiles.heartbeat_timeout_s()


def _last_log_line(run_dir: Path) -> str:
    """The last non-empty line of the job's executor.log (the trainer's one-line refusal), '' if none."""
    try:
        data = runfiles.read_run_file(run_dir, runfiles.EXECUTOR_LOG, max_bytes=runfiles.MAX_LOG_BYTES)
    except (OSError, runfiles.RunFileError):
        return ""
    lines = [ln.strip() for ln in data[-8192:].decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:500] if lines else ""


def _has_checkpoint(run_dir: Path) -> bool:
    try:
        return bool(runfiles.list_checkpoints(Path(run_dir) / runfiles.CHECKPOINT_DIR))
    except OSError:
        return False


def _previous_failure(run_dir: Path) -> tuple[str, int | None]:
    """(reason, attempt) of the run's last `failed` event (an earlier attempt's), ("", None) if none."""
    try:
        events = runfiles.read_jsonl(runfiles.confined_path(run_dir, runfiles.EVENTS_FILE))  # never a link out of it
    except (OSError, runfiles.RunFileError):
        return "", None
    for event in reversed(events):
        if event.get("state") == "failed":
            attempt = event.get("attempt")
            return str(event.get("reason") or ""), attempt if isinstance(attempt, int) else None
    return "", None


def exit_state(run_dir: Path, returncode: int | None, experiment: str = "") -> tuple[str, str, bool]:
    """(state, reason, has_result) of a finished job process, from result.json and its exit code.

    The reason is the real one: the trainer's recorded error (its last line names the exception and the
    user's file:line), or its one-line refusal (exit 2) or last words (exit 1 before an attempt could record
    one); a job killed without a result is "resumable from its last checkpoint" only when it has one. A failure
    that will repeat (a refused configuration, the same reason as the previous attempt) says to fix it, then
    `cemctl launch EXPERIMENT --retry-failed` (`experiment`: the one the launch named).
    """
    from cem_core.runfiles.failure import repeat_advice, repeated_line, without_advice

    result = runfiles.read_result(run_dir)
    if runfiles.cancel_requested(run_dir):
        return "cancelled", "cancelled by user", bool(result)
    if result:
        return result.state, (result.error or "" if result.state != "done" else ""), True
    if returncode == 0:
        return "failed", "exited 0 without writing result.json", False
    last = _last_log_line(run_dir)
    said = last[len("error: "):] if last.startswith("error: ") else ""
    if returncode == 2:
        line = said or last or "bad configuration (see its logs)"
        advice = "" if "`cemctl " in line else repeat_advice(experiment)
        return "failed", f"refused to start: {line}{advice}", False
    if returncode == 3:
        return "diverged", "exit code 3 (diverged) without result.json", False
    if returncode == runfiles.EXIT_PREEMPTED:  # the trainer checkpointed its step and recorded a `stale` event
        return "stale", "preempted: it checkpointed its last step and stopped; resumable from that checkpoint", False
    if returncode == 1 and said:  # the trainer's own line: the exception and the user's file:line
        return "failed", said, False
    rc = returncode if returncode is not None else -1
    if rc < 0:
        try:
            what = f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            what = f"killed by signal {-rc}"
    else:
        what = f"exit code {rc}"
    reason = f"{what} before finishing"
    before, attempt = _previous_failure(run_dir)
    if before and without_advice(before).split(";")[0] == reason:
        return "failed", repeated_line(reason, "the same", attempt, experiment), False
    name = experiment or "EXPERIMENT"
    then = ("resumable from its last checkpoint" if _has_checkpoint(run_dir)
            else f"no checkpoint yet: `cemctl launch {name}` starts it again")
    return "failed", f"{reason}; {then}", False
