"""Torch-free reading and writing of a run directory's files (the trainer, `cemctl sync`, executors).

The run directory (docs/design.md, "The run directory") is the ground truth, so
every writer uses the same two mechanisms:

- JSON files are replaced atomically: a temp file in the same folder, fsync,
  rename, fsync of the folder (`durable=False` skips the fsyncs for files that
  are rewritten constantly and only signal liveness, like the heartbeat).
- Logs (events.jsonl, metrics.jsonl) are append-only, one `write` per line;
  readers skip a truncated or garbled line.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

CONFIG_FILE = "config.json"
EVENTS_FILE = "events.jsonl"
HEARTBEAT_FILE = "heartbeat.json"
METRICS_FILE = "metrics.jsonl"
RESULT_FILE = "result.json"
LOG_FILE = "train.log"
CHECKPOINT_DIR = "checkpoints"
LOCK_FILE = ".lock"

# A run whose heartbeat.json is older than this (and has no result) is shown `stale`, not running.
DEFAULT_HEARTBEAT_TIMEOUT_S = 120.0


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename inside `path` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> None:
    """Write `data` to `path` so that readers see either the old or the new file, never half."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; run files are read by other users' tools
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(path.parent)


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, durable: bool = True, indent: int = 2) -> None:
    data = (json.dumps(obj, indent=indent, sort_keys=True, allow_nan=False) + "\n").encode()
    atomic_write_bytes(path, data, durable=durable)


def read_json(path: str | os.PathLike[str]) -> Any | None:
    """The parsed file, or None when it is missing or unreadable."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_json_object(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """A JSON object from `path`, or None if missing, unreadable or not an object."""
    obj = read_json(path)
    return obj if isinstance(obj, dict) else None


def finite_json(obj: Any) -> Any:
    """JSON has no NaN/inf: write them as strings ("nan", "inf")."""
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return str(obj)
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    return obj


def append_jsonl(path: str | os.PathLike[str], obj: dict[str, Any]) -> None:
    """Append one line with a single write (O_APPEND), so concurrent writers never interleave."""
    line = (json.dumps(finite_json(obj), allow_nan=False) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Every complete, parseable object line; a truncated or garbled line is skipped."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    return list(iter_jsonl(path))


def append_event(run_dir: str | os.PathLike[str], state: str, reason: str = "", *,
                 time_s: float | None = None, **fields: Any) -> dict[str, Any]:
    """Append one state transition to `run_dir/events.jsonl`; returns the event.

    Fields: time (unix s), state, reason (one line), host, pid, plus any given
    (attempt, executor, job_id, ...); None values are left out.
    """
    event: dict[str, Any] = {
        "time": time.time() if time_s is None else time_s,
        "state": state,
        "reason": " ".join(str(reason).split()),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    event.update({k: v for k, v in fields.items() if v is not None})
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    append_jsonl(Path(run_dir) / EVENTS_FILE, event)
    return event
