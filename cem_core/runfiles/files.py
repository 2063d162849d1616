"""The run directory's vocabulary and its safe readers and writers (the trainer, every `cemctl` command).

File names, the run states and their sets, and the two write mechanisms every
writer uses:

- JSON files are replaced atomically: a temp file in the same folder, fsync,
  rename, fsync of the folder (`durable=False` skips the fsyncs for files that
  are rewritten constantly and only signal liveness, like the heartbeat).
- Logs (events.jsonl, metrics.jsonl) are append-only, one `write` per line;
  readers skip a truncated or garbled line.

Reads are confined: `read_run_file` reads only a regular file inside the run's
own directory (a symlink leaving it, a FIFO, a device or a directory is refused
with `RunFileError`), opened without blocking and cut at a size cap, so no
command follows a planted link out of a run or hangs on a special file.
"""

from __future__ import annotations

import enum
import fcntl
import json
import math
import numbers
import os
import re
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

from cem_core.errors import CemError, ConfigError

CONFIG_FILE = "config.json"
EVENTS_FILE = "events.jsonl"
HEARTBEAT_FILE = "heartbeat.json"
METRICS_FILE = "metrics.jsonl"
RESULT_FILE = "result.json"
EVALS_FILE = "evals.json"
ENVIRONMENT_FILE = "environment.json"  # what the run trained on (cem_core.runfiles.environment)
LOG_FILE = "train.log"
JOB_FILE = "job.json"
CANCEL_FILE = "cancel"
EXECUTOR_LOG = "executor.log"
CHECKPOINT_DIR = "checkpoints"
CHECKPOINT_RE = re.compile(r"^step_(\d{8})\.pt$")  # RUN_DIR/checkpoints/step_XXXXXXXX.pt (optimizer step)
LOCK_FILE = ".lock"

# Size caps of what a reader takes in (a larger file is refused, never read whole).
MAX_JSON_BYTES = 16 << 20
MAX_LOG_BYTES = 1 << 30

# A run whose heartbeat.json is older than this (and has no result) is shown `stale`, not running.
DEFAULT_HEARTBEAT_TIMEOUT_S = 120.0

# The trainer's exit code after a preemption signal (SIGTERM, SIGUSR1, SIGUSR2): it finished its step, wrote a
# checkpoint and recorded a `stale` event; an executor restarts (local) or SLURM requeues the run from there.
EXIT_PREEMPTED = 4


class RunState(str, enum.Enum):
    """A run's state (docs/design.md): planned -> queued -> running -> done | diverged | failed; stale; cancelled;
    damaged. The groups a command asks about are properties: `RunState(state).final`."""

    PLANNED = "planned"
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    DIVERGED = "diverged"
    FAILED = "failed"
    STALE = "stale"
    CANCELLED = "cancelled"
    DAMAGED = "damaged"

    def __str__(self) -> str:
        return self.value

    @property
    def has_result(self) -> bool:
        """What result.json may say: the trainer's outcomes."""
        return self in (RunState.DONE, RunState.DIVERGED, RunState.FAILED)

    @property
    def terminal(self) -> bool:
        """No job will run it again without being asked (a result, or the user stopped it)."""
        return self.has_result or self is RunState.CANCELLED

    @property
    def final(self) -> bool:
        """A result a launch never redoes (failed runs are retried with --retry-failed)."""
        return self in (RunState.DONE, RunState.DIVERGED)

    @property
    def active(self) -> bool:
        """A job holds (or waits for) a worker."""
        return self in (RunState.QUEUED, RunState.RUNNING)

    @property
    def ended(self) -> bool:
        """An outcome (kept when an edited grid no longer holds the run)."""
        return self.has_result or self is RunState.DAMAGED

    @property
    def troubled(self) -> bool:
        """It stopped short of a result or its files cannot be trusted: its record says why (`reason`)."""
        return self in (RunState.FAILED, RunState.STALE, RunState.DIVERGED, RunState.CANCELLED, RunState.DAMAGED)

    @property
    def in_flight(self) -> bool:
        """Not ended yet: its folder may say more than the database (`cemctl.records.live`)."""
        return self in (RunState.PLANNED, RunState.QUEUED, RunState.RUNNING, RunState.STALE)


def _group(name: str) -> tuple[str, ...]:
    return tuple(s.value for s in RunState if getattr(s, name))


RUN_STATES: tuple[str, ...] = tuple(s.value for s in RunState)
RESULT_STATES = _group("has_result")
TERMINAL_STATES = _group("terminal")
FINAL_STATES = _group("final")
ACTIVE_STATES = _group("active")
ENDED_STATES = _group("ended")
TROUBLED_STATES = _group("troubled")
IN_FLIGHT_STATES = _group("in_flight")


_INT64 = (-(1 << 63), (1 << 63) - 1)


def number(value: Any, kind: type = float) -> Any:
    """The one rule for a usable number (a run file's, a record's, a column's): an int or float, not a bool, finite;
    with `kind=int` also whole and within 64 bits (what a database column holds). Returns it as `kind` (a float
    stays a float with `kind=float`), else None: an unusable number drops that field, never the run."""
    if isinstance(value, bool) or not isinstance(value, (int, float, numbers.Real)):
        return None
    if kind is int:
        if isinstance(value, int):
            return int(value) if _INT64[0] <= value <= _INT64[1] else None
        x = float(value)
        if not math.isfinite(x) or x != int(x):
            return None
        return int(x) if _INT64[0] <= x <= _INT64[1] else None
    x = float(value)
    return x if math.isfinite(x) else None


class RunFileError(CemError):
    """A run file that may not be read: outside its run directory, not a regular file, or too large."""


def hostname() -> str:
    """The one hostname form of every run file (job.json, events, heartbeat, result): the short name."""
    import socket

    return socket.gethostname().split(".")[0]


# ---------------------------------------------------------------------------
# Confined reads


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def confined_path(run_dir: str | os.PathLike[str], name: str | os.PathLike[str]) -> Path:
    """`run_dir/name` with every symlink resolved, refused (RunFileError) if it leaves `run_dir`."""
    root = Path(os.path.realpath(run_dir))
    path = Path(os.path.realpath(Path(run_dir) / name))
    if not _inside(path, root):
        raise RunFileError(f"{Path(run_dir) / name}: refused: it leads outside the run directory (to {path})")
    return path


def read_bytes(path: str | os.PathLike[str], *, max_bytes: int = MAX_JSON_BYTES, offset: int = 0) -> bytes:
    """The bytes of a regular file (from `offset`), opened without blocking; RunFileError for anything else.

    A FIFO, socket, device or directory is refused without waiting for a writer;
    a file larger than `max_bytes` (after `offset`) is refused, not read. A
    missing file raises FileNotFoundError.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RunFileError(f"{path}: refused: not a regular file")
        size = st.st_size - offset
        if size > max_bytes:
            raise RunFileError(f"{path}: refused: {st.st_size} bytes, more than the {max_bytes}-byte limit")
        if offset:
            os.lseek(fd, offset, os.SEEK_SET)
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_run_file(run_dir: str | os.PathLike[str], name: str, *, max_bytes: int = MAX_JSON_BYTES,
                  offset: int = 0) -> bytes:
    """The bytes of `run_dir/name` if it is a regular file inside the run directory (RunFileError otherwise)."""
    return read_bytes(confined_path(run_dir, name), max_bytes=max_bytes, offset=offset)


def open_run_file(run_dir: str | os.PathLike[str], name: str | os.PathLike[str]) -> BinaryIO:
    """`run_dir/name` opened for reading if it is a regular file inside the run directory (RunFileError otherwise).

    For files too large to read whole (checkpoints): the same confinement as `read_run_file` (a symlink out of
    the run, a FIFO, a device, a folder are refused, without blocking), then an ordinary blocking file object.
    """
    path = confined_path(run_dir, name)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RunFileError(f"{path}: refused: not a regular file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_json(path: str | os.PathLike[str]) -> Any | None:
    """The parsed file, or None when it is missing, unreadable, refused or not JSON."""
    try:
        return json.loads(read_bytes(path))
    except (OSError, ValueError, RunFileError):
        return None


def read_json_object(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """A JSON object from `path`, or None if missing, unreadable or not an object."""
    obj = read_json(path)
    return obj if isinstance(obj, dict) else None


def run_json(run_dir: str | os.PathLike[str], name: str) -> dict[str, Any] | None:
    """A JSON object from a run file, confined to the run directory; None when missing, refused or bad."""
    try:
        obj = json.loads(read_run_file(run_dir, name))
    except (OSError, ValueError, RunFileError):
        return None
    return obj if isinstance(obj, dict) else None


def read_run_json_strict(run_dir: str | os.PathLike[str], name: str, error: type[RunFileError], recover: str, *,
                         max_bytes: int = MAX_JSON_BYTES, recover_refused: str | None = None,
                         missing: Any = None) -> Any:
    """The parsed JSON of `run_dir/name` for a strict reader (tags.json, evals.json): `missing` when there is no
    such file; a file that is there but cannot be read (refused: a link out of the run, not a regular file, too
    large; unreadable; not JSON) raises `error`, one line naming the file and ending with how to `recover`
    (`recover_refused` for a refused one, where there is nothing to fix by hand). The caller checks the shape."""
    path = Path(run_dir) / name
    try:
        data = read_run_file(run_dir, name, max_bytes=max_bytes)
    except FileNotFoundError:
        return missing
    except RunFileError as e:
        raise error(f"{e}; {recover_refused or recover}") from None
    except OSError as e:
        raise error(f"{path}: cannot be read ({e.strerror or e}); {recover}") from None
    try:
        return json.loads(data)
    except ValueError as e:
        raise error(f"{path}: is not valid JSON ({e}); {recover}") from None


def iter_jsonl(path: str | os.PathLike[str], *, max_bytes: int = MAX_LOG_BYTES) -> Iterator[dict[str, Any]]:
    """Every complete, parseable object line; a truncated or garbled line is skipped."""
    try:
        raw = read_bytes(path, max_bytes=max_bytes)
    except (OSError, RunFileError):
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


# ---------------------------------------------------------------------------
# Writes


def publish_dir(tmp: str | os.PathLike[str], final: str | os.PathLike[str]) -> bool:
    """Make the finished folder `tmp` visible as `final` in one rename, durably: every file and folder in it synced
    first, the parent folder after. `final` is never replaced (an empty folder included): when it exists already
    (another writer published it first) nothing is renamed and False is returned; the caller removes `tmp`. The one
    way a folder is put in place (data cache generations, code snapshots, imported plugin sources)."""
    for dirpath, _dirnames, filenames in os.walk(tmp):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(dirpath)
    if os.path.lexists(final):
        return False
    try:
        os.rename(tmp, final)
    except OSError:
        if os.path.lexists(final):  # published meanwhile by another writer (a folder with files: not replaced)
            return False
        raise
    fsync_dir(Path(final).parent)
    return True


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


def checkpoint_name(step: int) -> str:
    """The file name of the checkpoint after optimizer step `step` (inside RUN_DIR/checkpoints)."""
    return f"step_{int(step):08d}.pt"


def list_checkpoints(ckpt_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint file in `ckpt_dir`, oldest first (temp files and other names ignored)."""
    d = Path(ckpt_dir)
    if not d.is_dir():
        return []
    out = []
    for p in d.iterdir():
        m = CHECKPOINT_RE.match(p.name)
        if m and p.is_file():
            out.append((int(m.group(1)), p))
    return sorted(out)


def test_write_pause() -> None:
    """`CEMCTL_TEST_WRITE_PAUSE_S=x` (tests only): hold every atomic write x seconds between its temp file and
    the rename, so a crash test's kill lands inside the write window every time, on any machine."""
    value = os.environ.get("CEMCTL_TEST_WRITE_PAUSE_S")
    if value:
        time.sleep(float(value))


def atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], None], *, durable: bool = True,
                 pause: bool = True, before_replace: Callable[[Path], None] | None = None,
                 exclusive: bool = False) -> None:
    """Write `path` through `write(file)` so that readers see either the old or the new file, never half: a temp
    file beside it (`.<name>.<random>.tmp`) renamed over it. `durable`: fsync the file and its folder; `pause`:
    the crash tests' write window (`test_write_pause`); `before_replace(tmp)`: a last check of the finished temp
    file (it raises to keep the old file). The one atomic write of cemctl (run files, checkpoints, data caches,
    the GP cache, bench tables, the code fingerprint cache, owned output files, manifests). `exclusive`: never
    replace a file that is there (FileExistsError; the finished file is linked into place, not renamed over)."""
    def fill(fd: int, tmp: Path) -> None:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            if durable:
                os.fsync(f.fileno())

    _replace_with_temp(Path(path), fill, durable=durable, pause=pause, before_replace=before_replace,
                       exclusive=exclusive)


def atomic_write_path(path: str | os.PathLike[str], write: Callable[[Path], None], *, durable: bool = True,
                      pause: bool = True, before_replace: Callable[[Path], None] | None = None) -> None:
    """`atomic_write` for a writer that wants a file name (`frame.to_parquet(tmp)`, `tarfile.open(tmp, "w:gz")`):
    `write(tmp)` fills the temp file beside `path`, which is then renamed over it."""
    def fill(fd: int, tmp: Path) -> None:
        os.close(fd)
        write(tmp)
        if durable:
            sync_fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(sync_fd)
            finally:
                os.close(sync_fd)

    _replace_with_temp(Path(path), fill, durable=durable, pause=pause, before_replace=before_replace)


def _replace_with_temp(path: Path, fill: Callable[[int, Path], None], *, durable: bool, pause: bool,
                       before_replace: Callable[[Path], None] | None, exclusive: bool = False) -> None:
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; run files are read by other users' tools
        fill(fd, tmp)
        if before_replace is not None:
            before_replace(tmp)
        if pause:
            test_write_pause()
        if exclusive:
            os.link(tmp, path)  # FileExistsError when the name is taken: nothing is replaced
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(path.parent)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, durable: bool = True, pause: bool = True,
                       before_replace: Callable[[Path], None] | None = None, exclusive: bool = False) -> None:
    """Write `data` to `path` so that readers see either the old or the new file, never half (`atomic_write`)."""
    def write(f: BinaryIO) -> None:
        f.write(data)

    atomic_write(path, write, durable=durable, pause=pause, before_replace=before_replace, exclusive=exclusive)


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, durable: bool = True, indent: int = 2,
                      make_parents: bool = False) -> None:
    if make_parents:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(obj, indent=indent, sort_keys=True, allow_nan=False) + "\n").encode()
    atomic_write_bytes(path, data, durable=durable)


def finite_json(obj: Any) -> Any:
    """JSON has no NaN/inf: write them as strings ("nan", "inf")."""
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return str(obj)
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    return obj


def append_jsonl(path: str | os.PathLike[str], obj: dict[str, Any], *, sort_keys: bool = False,
                 durable: bool = False) -> None:
    """Append one line with a single write (O_APPEND), so concurrent writers never interleave; `durable`: fsync it
    (a record that must survive a crash, e.g. a claim's registration)."""
    line = (json.dumps(finite_json(obj), allow_nan=False, sort_keys=sort_keys) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RunFileError(f"{path}: refused: not a regular file")
        os.write(fd, line)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def append_event(run_dir: str | os.PathLike[str], state: str, reason: str = "", *,
                 time_s: float | None = None, **fields: Any) -> dict[str, Any]:
    """Append one state transition to `run_dir/events.jsonl`; returns the event.

    Fields: time (unix s), state, reason (one line), host, pid, plus any given
    (attempt, executor, job_id, ...); None values are left out.
    """
    event: dict[str, Any] = {
        "time": time.time() if time_s is None else time_s,
        "state": str(state),
        "reason": " ".join(str(reason).split()),
        "host": hostname(),
        "pid": os.getpid(),
    }
    event.update({k: v for k, v in fields.items() if v is not None})
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    append_jsonl(Path(run_dir) / EVENTS_FILE, event)
    return event


def heartbeat_timeout_s(value: float | None = None) -> float:
    """--heartbeat-timeout-s, else $CEMCTL_HEARTBEAT_TIMEOUT_S, else 120 s (every command and executor)."""
    if value is None:
        env = os.environ.get("CEMCTL_HEARTBEAT_TIMEOUT_S")
        if not env:
            return DEFAULT_HEARTBEAT_TIMEOUT_S
        try:
            value = float(env)
        except ValueError:
            raise ConfigError("CEMCTL_HEARTBEAT_TIMEOUT_S", f"must be a number of seconds, got {env!r}") from None
        key = "CEMCTL_HEARTBEAT_TIMEOUT_S"
    else:
        key = "--heartbeat-timeout-s"
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(key, f"must be a positive, finite number of seconds, got {value}")
    return value
