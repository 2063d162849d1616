"""A run's logs (`cemctl logs RUN [--follow]`): train.log plus the executor's stdout/stderr.

`log_files(run_dir, runs_root)` lists them: the run's own train.log and
executor.log, and for a SLURM job its stdout/stderr, found by the job id under
the runs root's `.slurm/` folder (paths written inside job.json are never
opened). Every file is read through `cem_core.runfiles`: regular files inside
their folder only, never following a symlink out of it and never blocking on a
special file; the `.slurm` folder itself must lie inside the runs root (a link
out of it is refused); a refused file is named with the reason instead of
printed. Every line is printed with its control characters escaped
(`cem_core.names.printable`, tabs kept): a log cannot drive the terminal.
`tail_logs` prints the last lines of each under a header; `follow_logs` keeps
printing new lines (Ctrl-C to stop). The trainer writes each log record to train.log
and to its stdout (executor.log, or SLURM's file): a record already printed from one
file is not printed again from another, so every line shows once.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Callable, Iterator

from cem_core import runfiles
from cem_core.names import printable
from cem_core.runfiles import RunFileError

SLURM_FOLDER = ".slurm"  # cemctl.services.launch.launcher gives this folder to the SLURM executor


def find_run_dir(run: str, runs_root: Path, url: str | None = None) -> Path:
    """The run directory of a run id (or a unique prefix of one), through the one target resolver."""
    from cemctl.db.engine import DatabaseError, open_existing_db
    from cemctl.services.targets import resolve_runs

    engine = None
    if url is not None:
        try:
            engine = open_existing_db(url)
        except DatabaseError as e:
            if "no results database" not in str(e):
                raise
    if engine is None:  # no database yet: the runs folder alone
        from cemctl.db.engine import open_db

        engine = open_db("sqlite://", allow_memory=True)  # scratch: resolve_runs then looks in runs_root
    return resolve_runs(engine, run, runs_root, runs_only=True).runs[0].run_dir


def _slurm_logs(run_dir: Path, runs_root: Path | None) -> list[tuple[Path, Path]]:
    """(folder, file) of the current SLURM job's stdout/stderr, located by its job id (never by a recorded path)."""
    from cemctl.db.roots import DefaultRunsRoot

    job = runfiles.read_job(run_dir)
    if job is None or job.executor != "slurm" or not job.job_id:
        return []
    if runs_root is None or isinstance(runs_root, DefaultRunsRoot):
        runs_root = Path(run_dir).parent  # the run's own runs folder (<runs root>/<run id>)
    array_id, _, task = str(job.job_id).partition("_")
    if not array_id.isdigit() or (task and not task.isdigit()):
        return []
    folder = Path(runs_root) / SLURM_FOLDER / str(job.job_id)  # submitit's folder "%j", files "%j_%t_log.*"
    real_root = os.path.realpath(runs_root)
    if not os.path.realpath(folder).startswith(real_root + os.sep):  # .slurm (or the job's folder) linked out
        raise RunFileError(f"{folder}: refused: it leads outside the runs folder (to {os.path.realpath(folder)})")
    return [(folder, folder / f"{job.job_id}_0_log.{ext}") for ext in ("out", "err")]


_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ")  # cem_core.train.console.FORMAT


class _Once:
    """Remembers the log records printed (timestamped lines); other lines always pass."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def new(self, line: str) -> bool:
        if not _RECORD.match(line):
            return True
        if line in self.seen:
            return False
        self.seen.add(line)
        return True


def log_files(run_dir: Path, runs_root: Path | None = None, refused: list[str] | None = None) -> list[tuple[Path, Path]]:
    """(confining folder, file) of each log a run may have, in print order; a refused SLURM folder is left out
    (its reason appended to `refused`)."""
    run_dir = Path(run_dir)
    own = [(run_dir, run_dir / runfiles.LOG_FILE), (run_dir, run_dir / runfiles.EXECUTOR_LOG)]
    try:
        return own + _slurm_logs(run_dir, runs_root)
    except RunFileError as e:
        if refused is not None:
            refused.append(str(e))
        return own


def _shown(line: str) -> str:
    return printable(line, keep="\t")


TAIL_LINE_BYTES = 4096  # a log's last n lines are read from at most n times this many bytes at its end,
MAX_TAIL_BYTES = 8 << 20  # and never more than this: the time and memory of a tail do not grow with the log (a 600 MB
# train.log costs what a small one does)


def _read_tail(folder: Path, path: Path, n: int, *, budget: int | None = None) -> list[str]:
    """The last `n` lines of a log (n <= 0: every line, unless `budget` bounds the bytes), read from its end; a first
    line cut by the window is left out."""
    if n <= 0 and budget is None:
        data = runfiles.read_run_file(folder, path.name, max_bytes=runfiles.MAX_LOG_BYTES)
        start = 0
    else:
        budget = budget or min(MAX_TAIL_BYTES, n * TAIL_LINE_BYTES)
        with runfiles.open_run_file(folder, path.name) as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - budget)
            f.seek(start)
            data = f.read(size - start)
    if start and b"\n" in data:
        data = data[data.index(b"\n") + 1:]
    lines = data.decode(errors="replace").splitlines()
    return [_shown(ln) for ln in (lines if n <= 0 else lines[-n:])]


def tail_logs(run_dir: Path, lines: int = 50, write: Callable[[str], None] = print,
              runs_root: Path | None = None) -> int:
    """Print each log's last lines under a `==> file <==` header; returns how many files were shown."""
    found = 0
    once = _Once()
    refused: list[str] = []
    for folder, path in log_files(run_dir, runs_root, refused):
        if not os.path.lexists(path):
            continue
        try:
            tail = [line for line in _read_tail(folder, path, lines) if once.new(line)]
        except (RunFileError, OSError) as e:
            write(_shown(f"==> {path} <== not shown: {str(e).split(': ', 1)[-1]}"))
            continue
        found += 1
        write(_shown(f"==> {path} <=="))
        for line in tail:
            write(line)
    for reason in refused:
        write(_shown(f"==> SLURM logs not shown: {reason}"))
    return found


def follow_logs(run_dir: Path, write: Callable[[str], None] = print, poll_s: float = 0.5,
                stop: Callable[[], bool] | None = None, runs_root: Path | None = None,
                on_ready: Callable[[], None] | None = None) -> None:
    """Print new lines of every log as they appear (new log files of a requeued job included)."""
    offsets: dict[Path, int] = {}
    once = _Once()
    for folder, path in log_files(run_dir, runs_root):
        try:
            offsets[path] = path.stat().st_size
        except OSError:
            offsets[path] = 0
        try:  # the records already on the screen (tail_logs printed them) are not printed again
            for line in _read_tail(folder, path, 0, budget=MAX_TAIL_BYTES):
                once.new(line)
        except (RunFileError, OSError):
            pass
    current: Path | None = None
    if on_ready is not None:  # from here on, every new line is printed
        on_ready()
    while not (stop and stop()):
        for folder, path in log_files(run_dir, runs_root):
            offsets.setdefault(path, 0)
            for line in map(_shown, _new_lines(folder, path, offsets)):
                if not once.new(line):
                    continue
                if path != current:
                    write(_shown(f"==> {path} <=="))
                    current = path
                write(line)
        time.sleep(poll_s)


def _new_lines(folder: Path, path: Path, offsets: dict[Path, int]) -> Iterator[str]:
    try:
        size = path.stat().st_size
    except OSError:
        return
    if size < offsets[path]:
        offsets[path] = 0  # rewritten
    if size == offsets[path]:
        return
    try:
        data = runfiles.read_run_file(folder, path.name, offset=offsets[path], max_bytes=runfiles.MAX_LOG_BYTES)
    except (RunFileError, OSError):
        return
    end = data.rfind(b"\n") + 1
    offsets[path] += end
    yield from data[:end].decode(errors="replace").splitlines()
