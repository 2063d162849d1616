"""The executor's files in a run directory (`cemctl launch`, `cemctl status`, `cemctl cancel`).

Every executor records where a run's current job is in `<run_dir>/job.json`
(written atomically):

    {"executor": "local" | "slurm", "job_id": str, "host": str, "state": str,
     "attempt": int, "snapshot": str, "submitted_time": unix_s,
     "started_time": unix_s | null, "ended_time": unix_s | null,
     "orchestrator_pid": int | null, "pid": int | null, "exit_code": int | null,
     "reason": str, "logs": [path, ...]}

`state` is the executor's view: queued, running, exited, cancelled. Executors
also append state transitions to `events.jsonl` (the format of docs/design.md,
plus `executor` and `job_id`). A `cancel` file in the run directory asks every
executor not to (re)start the run. Readers here never raise on a missing or
truncated file.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from cem_core import runfiles
from cem_core.runfiles import DEFAULT_HEARTBEAT_TIMEOUT_S, EVENTS_FILE, HEARTBEAT_FILE, RESULT_FILE

JOB_FILE = "job.json"
CANCEL_FILE = "cancel"
EXECUTOR_LOG = "executor.log"


def heartbeat_timeout_s(value: float | None = None) -> float:
    """--heartbeat-timeout-s, else $CEMCTL_HEARTBEAT_TIMEOUT_S, else 120 s."""
    if value is not None:
        return float(value)
    env = os.environ.get("CEMCTL_HEARTBEAT_TIMEOUT_S")
    if env:
        try:
            return float(env)
        except ValueError:
            from cem_core.errors import ConfigError

            raise ConfigError("CEMCTL_HEARTBEAT_TIMEOUT_S", f"must be a number of seconds, got {env!r}") from None
    return DEFAULT_HEARTBEAT_TIMEOUT_S


def hostname() -> str:
    return socket.gethostname().split(".")[0]


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    runfiles.atomic_write_json(path, data, durable=False, indent=1)


read_json = runfiles.read_json_object


def read_job(run_dir: Path) -> dict[str, Any] | None:
    return read_json(Path(run_dir) / JOB_FILE)


def write_job(run_dir: Path, job: dict[str, Any]) -> None:
    write_json_atomic(Path(run_dir) / JOB_FILE, job)


def update_job(run_dir: Path, **fields: Any) -> dict[str, Any]:
    job = read_job(run_dir) or {}
    job.update(fields)
    write_job(run_dir, job)
    return job


def read_heartbeat(run_dir: Path) -> dict[str, Any] | None:
    return read_json(Path(run_dir) / HEARTBEAT_FILE)


def read_result(run_dir: Path) -> dict[str, Any] | None:
    return read_json(Path(run_dir) / RESULT_FILE)


def append_event(run_dir: Path, state: str, reason: str = "", **extra: Any) -> None:
    """One line in events.jsonl (append-only, one write call so lines never interleave)."""
    runfiles.append_event(run_dir, state, reason, host=hostname(), **extra)


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    return runfiles.read_jsonl(Path(run_dir) / EVENTS_FILE)


def last_metrics(run_dir: Path, kinds: tuple[str, ...] = ("train", "val"), tail_bytes: int = 16384) -> dict[str, dict[str, Any]]:
    """The last metrics.jsonl line of each kind, read from the file's tail (cheap on big files)."""
    path = Path(run_dir) / "metrics.jsonl"
    out: dict[str, dict[str, Any]] = {}
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - tail_bytes))
            data = f.read()
    except OSError:
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


def attempts(run_dir: Path) -> int:
    """Number of times a job has started the run (from job.json)."""
    job = read_job(run_dir) or {}
    return int(job.get("attempt") or 0)


def heartbeat_age_s(run_dir: Path, now: float | None = None) -> float | None:
    hb = read_heartbeat(run_dir)
    if not hb or "time" not in hb:
        return None
    return (now or time.time()) - float(hb["time"])


def cancel_requested(run_dir: Path) -> bool:
    return (Path(run_dir) / CANCEL_FILE).exists()


def request_cancel(run_dir: Path, reason: str = "cancelled by user") -> None:
    (Path(run_dir) / CANCEL_FILE).write_text(reason + "\n")


def clear_cancel(run_dir: Path) -> None:
    try:
        (Path(run_dir) / CANCEL_FILE).unlink()
    except FileNotFoundError:
        pass


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


def exit_state(run_dir: Path, returncode: int | None) -> tuple[str, str, bool]:
    """(state, reason, has_result) of a finished job process, from result.json and its exit code.

    A job killed by a signal without result.json is resumable: its reason says so.
    """
    result = read_result(run_dir)
    if cancel_requested(run_dir):
        return "cancelled", "cancelled by user", bool(result)
    if result and result.get("state") in ("done", "diverged", "failed"):
        state = str(result["state"])
        return state, (str(result.get("error") or "") if state != "done" else ""), True
    if returncode == 0:
        return "failed", "exited 0 without writing result.json", False
    if returncode == 3:
        return "diverged", "exit code 3 (diverged) without result.json", False
    rc = returncode if returncode is not None else -1
    if rc < 0:
        import signal

        try:
            what = f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            what = f"killed by signal {-rc}"
    else:
        what = f"exit code {rc}"
    return "failed", f"{what} before finishing; resumable from its last checkpoint", False
