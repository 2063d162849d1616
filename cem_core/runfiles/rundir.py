"""One run directory as an object: paths, the trainer's writers, the one-trainer lock and the heartbeat.

Layout (docs/design.md, "The run directory"):

    config.json      resolved RunConfig (written by the planner)
    events.jsonl     append-only state transitions
    heartbeat.json   liveness, rewritten atomically every ~5 s and at each logged step
    metrics.jsonl    append-only train / val / energy / system lines
    environment.json what the run trained on (cem_core.runfiles.environment)
    checkpoints/     step_XXXXXXXX.pt (cem_core/train/checkpoint.py)
    result.json      terminal result, written once, atomically
    train.log        human-readable log
    job.json         the executor's record (runfiles/job.py)
    .lock            flock held while a trainer works on the run

Torch-free: the trainer (`python -m cem_core.train RUN_DIR`) and cemctl share it.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from cem_core.runfiles.files import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    ENVIRONMENT_FILE,
    EVENTS_FILE,
    HEARTBEAT_FILE,
    LOCK_FILE,
    LOG_FILE,
    METRICS_FILE,
    RESULT_FILE,
    append_event,
    append_jsonl,
    atomic_write_bytes,
    atomic_write_json,
    finite_json,
    hostname,
    iter_jsonl,
)
from cem_core.runfiles.lock import file_lock
from cem_core.runfiles.results import RunResult


_METRICS_REWRITE = threading.Lock()  # an append from another thread (system samples) never lands inside a rewrite


def truncate_metrics(path: str | os.PathLike[str], max_step: int) -> int:
    """Keep only lines with step <= max_step (and drop a truncated tail); rewrite atomically.

    Returns the number of lines kept. Used on resume so that metrics.jsonl continues
    from the checkpoint with no gaps and no duplicates.
    """
    path = Path(path)
    with _METRICS_REWRITE:
        if not path.exists():
            return 0
        kept = [obj for obj in iter_jsonl(path) if int(obj.get("step", 0)) <= max_step]
        atomic_write_bytes(path, "".join(json.dumps(o) + "\n" for o in kept).encode())
    return len(kept)


class RunDir:
    """Paths and writers of one run directory."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.config = self.path / CONFIG_FILE
        self.events = self.path / EVENTS_FILE
        self.heartbeat = self.path / HEARTBEAT_FILE
        self.metrics = self.path / METRICS_FILE
        self.result = self.path / RESULT_FILE
        self.log = self.path / LOG_FILE
        self.checkpoints = self.path / CHECKPOINT_DIR

    @contextlib.contextmanager
    def exclusive(self, *, enabled: bool = True) -> Iterator[None]:
        """Hold an exclusive lock on RUN_DIR/.lock while training: one trainer per run.

        A second trainer of the same run (two `cemctl launch` of one grid at the same
        moment, a requeue racing a manual launch) waits here for the first, then finds
        its result (done: nothing to do) or resumes from its checkpoint. A file system
        without `flock` gives no protection, as before.
        """
        if not enabled:
            yield
            return
        with file_lock(self.path / LOCK_FILE, best_effort=True):
            self.remove_stale_temp_files()
            yield

    def remove_stale_temp_files(self) -> None:
        """Delete the temp files of atomic writes a killed trainer left (`.heartbeat.json.*.tmp`, ...)."""
        for name in (HEARTBEAT_FILE, RESULT_FILE, METRICS_FILE, ENVIRONMENT_FILE):
            for p in self.path.glob(f".{name}.*.tmp"):
                call_quietly(p.unlink)

    def previous_attempts(self) -> int:
        return sum(1 for e in iter_jsonl(self.events) if e.get("state") == "running")

    def append_event(self, state: str, reason: str = "", *, attempt: int, **fields: Any) -> None:
        append_event(self.path, state, reason, attempt=attempt, **fields)

    def append_metrics(self, obj: dict[str, Any]) -> None:
        with _METRICS_REWRITE:
            append_jsonl(self.metrics, obj)

    def write_result(self, result: RunResult) -> None:
        """result.json, once, atomically: a `RunResult` (checked when it was made)."""
        atomic_write_json(self.result, finite_json(result.to_json()))


class Heartbeat:
    """Rewrites heartbeat.json from a daemon thread every `interval_s` and on `beat()`.

    The training loop updates `step`/`tokens` through `update()`; the thread keeps
    the file fresh while a long evaluation or checkpoint runs.
    """

    def __init__(self, path: str | os.PathLike[str], *, total_steps: int, attempt: int,
                 interval_s: float | None = None) -> None:
        self.path = Path(path)
        if interval_s is None:
            interval_s = float(os.environ.get("CEMCTL_HEARTBEAT_S", "5"))
        self.interval_s = interval_s
        self._state: dict[str, Any] = {
            "time": time.time(), "step": 0, "total_steps": total_steps, "tokens": 0,
            "pid": os.getpid(), "host": hostname(), "attempt": attempt,
        }
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def update(self, *, step: int, tokens: int) -> None:
        with self._lock:
            self._state["step"] = step
            self._state["tokens"] = tokens

    def beat(self) -> None:
        with self._lock:
            self._state["time"] = time.time()
            state = dict(self._state)
            try:
                atomic_write_json(self.path, state, durable=False)
            except OSError:
                pass  # a missed heartbeat is not worth failing the run

    def start(self) -> "Heartbeat":
        self.beat()
        self._thread = threading.Thread(target=self._run, name="cemctl-heartbeat", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.beat()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None


def call_quietly(fn: Callable[[], Any]) -> None:
    """Run a best-effort cleanup step; never raise from it."""
    try:
        fn()
    except Exception:  # noqa: BLE001 - cleanup must not mask the real outcome
        pass
