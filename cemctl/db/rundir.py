"""Torch-free readers and writers of a run directory's files (`cemctl plan`, `sync`, executors).

The run directory (docs/design.md) is the ground truth; these helpers write
JSON atomically (temp file + rename) and append one event line per call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cem_core import runfiles
from cem_core.runfiles import (  # noqa: F401 - the run-directory vocabulary, shared with the trainer
    CONFIG_FILE,
    EVENTS_FILE,
    HEARTBEAT_FILE,
    METRICS_FILE,
    RESULT_FILE,
    append_event,
    read_json_object as read_json,
)


def atomic_write_json(path: Path | str, obj: Any, *, fsync: bool = True) -> None:
    """Write JSON to `path` via a temp file in the same folder and a rename (parents created).

    Readers never see a partial file. `fsync=False` skips forcing the data to disk
    (much faster for many files that can be written again, e.g. planned configs).
    """
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    runfiles.atomic_write_json(path, obj, durable=fsync, indent=1)
