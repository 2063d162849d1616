"""Executors by name (`cemctl launch --executor local|slurm`, `cemctl cancel`, `cemctl status`).

`get_executor(name)` returns the executor class and rejects unknown names with
a `ConfigError` listing the known ones; entries are lazy ("module:Class"), so
`cemctl status` never pays for submitit. `jobs_alive(items)` asks each
executor about the jobs it recorded, in one batch per executor.

    from cemctl.executors import get_executor
    Local = get_executor("local")
    Local(LocalOptions(workers=2)).submit(jobs)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from cem_core.registry import Registry
from cem_core.runfiles import JobRecord

if TYPE_CHECKING:  # pragma: no cover
    from cemctl.executors.base import Executor

EXECUTORS: Registry[type["Executor"]] = Registry("executor", "--executor")
EXECUTORS.register_lazy("local", "cemctl.executors.local:LocalExecutor",
                        "this machine: a CPU worker pool or one job per GPU (foreground)")
EXECUTORS.register_lazy("slurm", "cemctl.executors.slurm:SlurmExecutor",
                        "job arrays on a SLURM cluster through submitit (returns at once)")


def get_executor(name: str) -> "type[Executor]":
    """The executor class registered under `name`."""
    return EXECUTORS.get(name)


def jobs_alive(items: list[tuple[Path, JobRecord]]) -> list[bool | None]:
    """For each (run_dir, job record): True (queued/running), False (gone) or None (cannot tell now).

    A record that says the job ended, or names no known executor, is not alive.
    Each executor answers for its own jobs in one call (SLURM: one squeue).
    """
    out: list[bool | None] = [False] * len(items)
    by_executor: dict[str, list[int]] = {}
    for i, (_, job) in enumerate(items):
        if job.live and job.executor in EXECUTORS:
            by_executor.setdefault(job.executor, []).append(i)
    for name, idx in by_executor.items():
        answers = get_executor(name).alive([items[i] for i in idx])
        for i, answer in zip(idx, answers):
            out[i] = answer
    return out
