"""The files of one run directory (`python -m cem_core.train RUN_DIR`, read by `cemctl status/sync`).

Layout (docs/design.md, "The run directory"):

    config.json      resolved RunConfig (written by the planner)
    events.jsonl     append-only state transitions
    heartbeat.json   liveness, rewritten atomically every ~5 s and at each logged step
    metrics.jsonl    append-only train / val lines
    checkpoints/     step_XXXXXXXX.pt (see checkpoint.py)
    result.json      terminal result, written once, atomically
    train.log        human-readable log

Every JSON file is written atomically (temp file in the same folder + fsync +
rename), so a reader never sees half a file. The append-only logs are flushed
line by line; readers ignore a truncated last line.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from cem_core.config import RunConfig, load_run_config
from cem_core.errors import ConfigError

CONFIG_FILE = "config.json"
EVENTS_FILE = "events.jsonl"
HEARTBEAT_FILE = "heartbeat.json"
METRICS_FILE = "metrics.jsonl"
RESULT_FILE = "result.json"
LOG_FILE = "train.log"
CHECKPOINT_DIR = "checkpoints"
LOCK_FILE = ".lock"

TERMINAL_STATES = ("done", "diverged", "failed")


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
    """Write `data` to `path` so that readers see either the old or the new file, never half.

    `durable=False` skips the fsyncs (the heartbeat: rewritten every step, only liveness).
    """
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


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, durable: bool = True) -> None:
    data = (json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n").encode()
    atomic_write_bytes(path, data, durable=durable)


def read_json(path: str | os.PathLike[str]) -> Any | None:
    """The parsed file, or None when it is missing or unreadable."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _finite(obj: Any) -> Any:
    """JSON has no NaN/inf: write them as strings ("nan", "inf")."""
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    return obj


def append_jsonl(path: str | os.PathLike[str], obj: dict[str, Any]) -> None:
    """Append one line and flush it (the logs are append-only)."""
    line = json.dumps(_finite(obj), sort_keys=False, allow_nan=False) + "\n"
    with open(path, "a") as f:
        f.write(line)
        f.flush()


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every complete, parseable line; a truncated or garbled line is skipped."""
    return list(iter_jsonl(path))


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
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


def truncate_metrics(path: str | os.PathLike[str], max_step: int) -> int:
    """Keep only lines with step <= max_step (and drop a truncated tail); rewrite atomically.

    Returns the number of lines kept. Used on resume so that metrics.jsonl continues
    from the checkpoint with no gaps and no duplicates.
    """
    path = Path(path)
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

    def load_config(self) -> RunConfig:
        """The run's config; `ConfigError` (one line) when missing or invalid."""
        if not self.path.is_dir():
            raise ConfigError("RUN_DIR", f"run directory {str(self.path)!r} does not exist")
        if not self.config.is_file():
            raise ConfigError(CONFIG_FILE, f"missing in run directory {str(self.path)!r} (the planner writes it)")
        try:
            return load_run_config(str(self.config))
        except ValueError as e:  # JSONDecodeError; ConfigError is also a ValueError
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(CONFIG_FILE, f"is not valid JSON ({e})", source=str(self.config)) from None

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
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                pass
            self.remove_stale_temp_files()
            yield
        finally:
            os.close(fd)  # releases the lock

    def remove_stale_temp_files(self) -> None:
        """Delete the temp files of atomic writes a killed trainer left (`.heartbeat.json.*.tmp`, ...)."""
        for name in (HEARTBEAT_FILE, RESULT_FILE, METRICS_FILE):
            for p in self.path.glob(f".{name}.*.tmp"):
                call_quietly(p.unlink)

    def previous_attempts(self) -> int:
        return sum(1 for e in iter_jsonl(self.events) if e.get("state") == "running")

    def append_event(self, state: str, reason: str = "", *, attempt: int) -> None:
        append_jsonl(self.events, {
            "time": time.time(), "state": state, "reason": reason, "attempt": attempt,
            "host": socket.gethostname(), "pid": os.getpid(),
        })

    def append_metrics(self, obj: dict[str, Any]) -> None:
        append_jsonl(self.metrics, obj)

    def read_result(self) -> dict[str, Any] | None:
        return read_json(self.result)

    def write_result(self, result: dict[str, Any]) -> None:
        atomic_write_json(self.result, _finite(result))


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
            "pid": os.getpid(), "host": socket.gethostname(), "attempt": attempt,
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
