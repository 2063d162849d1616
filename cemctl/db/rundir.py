"""Torch-free readers and writers of a run directory's files (`cemctl plan`, `sync`, executors).

The run directory (docs/design.md) is the ground truth; these helpers write
JSON atomically (temp file + rename) and append one event line per call.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

CONFIG_FILE = "config.json"
EVENTS_FILE = "events.jsonl"
HEARTBEAT_FILE = "heartbeat.json"
METRICS_FILE = "metrics.jsonl"
RESULT_FILE = "result.json"


def atomic_write_json(path: Path | str, obj: Any, *, fsync: bool = True) -> None:
    """Write JSON to `path` via a temp file in the same folder and a rename.

    Readers never see a partial file. `fsync=False` skips forcing the data to disk
    (much faster for many files that can be written again, e.g. planned configs).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_json(path: Path | str) -> dict[str, Any] | None:
    """A JSON object from `path`, or None if missing, unreadable or not an object."""
    try:
        with open(path) as f:
            obj = json.load(f)
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def append_event(run_dir: Path | str, state: str, reason: str = "", *, time_s: float | None = None, **fields: Any) -> dict[str, Any]:
    """Append one state transition to `run_dir/events.jsonl` (one write, one line)."""
    event: dict[str, Any] = {
        "time": time.time() if time_s is None else time_s,
        "state": state,
        "reason": " ".join(str(reason).split()),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    event.update({k: v for k, v in fields.items() if v is not None})
    line = (json.dumps(event, sort_keys=True) + "\n").encode()
    path = Path(run_dir) / EVENTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return event
