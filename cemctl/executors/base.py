"""What every executor shares (`cemctl launch`, `cemctl cancel`): the job spec and the trainer command.

An executor runs `Job`s: one job = one run directory = one training process
(or one `torchrun` group for multi-GPU runs). The launcher builds the jobs
(`trainer_argv` + `code_env`, so the job runs the code snapshot taken at launch
time); executor tests may give any small command instead of the trainer.
"""

from __future__ import annotations

import abc
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar


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
    run_dir = str(Path(run_dir).resolve())
    if nproc <= 1:
        return [python, "-m", "cem_core.train", run_dir]
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "-m", "cem_core.train", run_dir]


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

    @abc.abstractmethod
    def submit(self, jobs: list[Job]) -> list[Submitted]:
        """Start (or queue) the jobs. The local executor runs them to the end in the foreground."""

    @classmethod
    @abc.abstractmethod
    def is_active(cls, run_dir: Path, job: dict[str, Any]) -> bool:
        """Whether the job recorded in `job.json` is still queued or running."""

    @classmethod
    @abc.abstractmethod
    def cancel(cls, run_dir: Path, job: dict[str, Any]) -> str:
        """Stop the recorded job; returns a one-line description of what was done."""
