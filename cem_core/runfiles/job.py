"""The executor's files in a run directory: `job.json` (a typed `JobRecord`), the `cancel` file,
and cheap readers of the trainer's liveness files (`cemctl launch`, `cemctl status`, `cemctl cancel`).

Every executor records where a run's current job is in `<run_dir>/job.json`
(written atomically). `JobRecord.state` is the executor's view: queued,
running, exited, interrupted, cancelled, lost. A `cancel` file in the run
directory asks every executor not to (re)start the run. The readers here
(`read_job`, `read_heartbeat`) are for showing and liveness: they never
raise on a missing, truncated or refused file. A write never replaces what it could not
read: `update_job` refuses a job.json that is there but cannot be read (`JobUnreadable`),
and what a result.json says is decided by one strict rule
(`cem_core.runfiles.results.read_result_file`), which the launcher, cancel and ingest ask.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cem_core.convert import from_plain
from cem_core.runfiles.files import (
    CANCEL_FILE,
    HEARTBEAT_FILE,
    JOB_FILE,
    METRICS_FILE,
    RunFileError,
    atomic_write_json,
    confined_path,
    read_bytes,
    read_run_json_strict,
    run_json,
)

JOB_STATES = ("queued", "running", "exited", "interrupted", "cancelled", "lost")
LIVE_JOB_STATES = ("queued", "running")


@dataclass
class JobRecord:
    """`job.json`: where the run's current job is and what became of it."""

    executor: str = ""  # local | slurm
    job_id: str | None = None
    host: str | None = None
    state: str = "queued"  # one of JOB_STATES
    attempt: int = 0  # starts of the run by an executor
    snapshot: str = ""  # code snapshot hash
    submitted_time: float | None = None
    started_time: float | None = None
    ended_time: float | None = None
    orchestrator_pid: int | None = None
    orchestrator_start: str = ""  # cem_core.runfiles.process.process_start of the orchestrator
    pid: int | None = None
    pid_start: str = ""  # process_start of the job's process: a reused PID is never taken for it
    token: str = ""  # $CEMCTL_JOB_TOKEN of the job's process (cem_core.runfiles.process)
    exit_code: int | None = None
    reason: str = ""
    slot: str = ""
    restart_count: int | None = None
    logs: list[str] = field(default_factory=list)  # informational; readers never open these paths

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "JobRecord":
        """Tolerant (`cem_core.convert`): unknown keys are dropped, wrongly typed values become defaults."""
        record: JobRecord = from_plain(cls, d, strict=False)
        return record

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def live(self) -> bool:
        """The record says queued or running (whether that is still true is the executor's question)."""
        return self.state in LIVE_JOB_STATES


def read_job(run_dir: str | os.PathLike[str]) -> JobRecord | None:
    d = run_json(run_dir, JOB_FILE)
    return JobRecord.from_dict(d) if d is not None else None


def write_job(run_dir: str | os.PathLike[str], job: JobRecord) -> None:
    atomic_write_json(Path(run_dir) / JOB_FILE, job.to_dict(), durable=False, indent=1)


class JobUnreadable(RunFileError):
    """A job.json that is there but cannot be read: never replaced by a record made from nothing."""


RECOVER_JOB = ("it records where the run's job is: check that no job of this run is still running (`cemctl status`, "
               "squeue), then move the file aside; the next launch writes a new one")


def update_job(run_dir: str | os.PathLike[str], **fields: Any) -> JobRecord:
    """job.json with `fields` changed (a new record when there is none). A job.json that is there but cannot be read
    (not JSON, not an object, refused) raises `JobUnreadable`, one line naming it: its job (a PID, a SLURM id) would
    be lost under a record made from nothing."""
    d = read_run_json_strict(run_dir, JOB_FILE, JobUnreadable, RECOVER_JOB)
    if d is not None and not isinstance(d, dict):
        raise JobUnreadable(f"{Path(run_dir) / JOB_FILE}: must be a JSON object, got {type(d).__name__}; {RECOVER_JOB}")
    job = dataclasses.replace(JobRecord.from_dict(d) if d is not None else JobRecord(), **fields)
    write_job(run_dir, job)
    return job


def read_heartbeat(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    return run_json(run_dir, HEARTBEAT_FILE)


def heartbeat_age_s(run_dir: str | os.PathLike[str], now: float | None = None) -> float | None:
    hb = read_heartbeat(run_dir)
    if not hb or not isinstance(hb.get("time"), (int, float)):
        return None
    return (time.time() if now is None else now) - float(hb["time"])


def last_metrics(run_dir: str | os.PathLike[str], kinds: tuple[str, ...] = ("train", "val"),
                 tail_bytes: int = 16384) -> dict[str, dict[str, Any]]:
    """The last metrics.jsonl line of each kind, read from the file's tail (cheap on big files)."""
    out: dict[str, dict[str, Any]] = {}
    try:
        path = confined_path(run_dir, METRICS_FILE)
        size = path.stat().st_size
        data = read_bytes(path, offset=max(0, size - tail_bytes), max_bytes=tail_bytes)
    except (OSError, RunFileError):
        return out
    for line in reversed(data.splitlines()):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        kind = rec.get("kind") if isinstance(rec, dict) else None
        if kind in kinds and kind not in out:
            out[kind] = rec
        if len(out) == len(kinds):
            break
    return out


def cancel_requested(run_dir: str | os.PathLike[str]) -> bool:
    return os.path.lexists(Path(run_dir) / CANCEL_FILE)


def request_cancel(run_dir: str | os.PathLike[str], reason: str = "cancelled by user") -> None:
    path = Path(run_dir) / CANCEL_FILE
    if path.is_symlink():  # never write through a planted link
        path.unlink()
    atomic_write_json(path, {"reason": reason, "time": time.time()}, durable=False)


def clear_cancel(run_dir: str | os.PathLike[str]) -> None:
    try:
        (Path(run_dir) / CANCEL_FILE).unlink()
    except FileNotFoundError:
        pass
