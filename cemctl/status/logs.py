"""A run's logs (`cemctl logs RUN [--follow]`): train.log plus the executor's stdout/stderr.

`log_files(run_dir)` lists them (train.log, then what job.json records: the
local executor's executor.log, or SLURM's stdout/stderr files of the current
job); `tail_logs` prints the last lines of each under a header; `follow_logs`
keeps printing new lines as they are written (Ctrl-C to stop).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Callable, Iterator

from cem_core.errors import CemError
from cemctl.executors import jobfile


_RUN_ARG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def find_run_dir(run: str, runs_root: Path, url: str | None = None) -> Path:
    """The run directory of a run id (or a unique prefix of one); never a folder outside `runs_root` by name."""
    if not _RUN_ARG.fullmatch(run or ""):  # "../x", "/etc", "a/b": a run id is a plain name
        raise CemError(f"run: {run!r} is not a run id (letters, digits, '.', '_', '-'; see `cemctl status` for run ids)")
    direct = Path(runs_root) / run
    if (direct / "config.json").exists() or (direct / jobfile.JOB_FILE).exists():
        return direct
    if url is not None:
        from cemctl.db import get_run, open_db

        engine = open_db(url)
        row = get_run(engine, run)
        if row is not None and row.run_dir:
            return Path(row.run_dir)
    matches = [p for p in Path(runs_root).glob(f"{run}*") if p.is_dir() and not p.name.startswith(".")] if run else []
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise CemError(f"run: {run!r} matches {len(matches)} runs ({', '.join(sorted(p.name for p in matches)[:5])}, ...); give more of the id")
    raise CemError(f"run: no run {run!r} in {runs_root} (see `cemctl status` for run ids)")


def log_files(run_dir: Path) -> list[Path]:
    run_dir = Path(run_dir).resolve()
    files = [run_dir / "train.log"]
    job = jobfile.read_job(run_dir) or {}
    for p in [*(job.get("logs") or []), run_dir / jobfile.EXECUTOR_LOG]:
        path = Path(p).resolve()
        if path not in files and (path.exists() or str(p) in (job.get("logs") or [])):
            files.append(path)
    return files


def tail_lines(path: Path, n: int) -> list[str]:
    """The last `n` lines of a file (all when n <= 0), read from the end."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if n <= 0:
                f.seek(0)
                data = f.read()
            else:
                block, data = 65536, b""
                pos = size
                while pos > 0 and data.count(b"\n") <= n:
                    pos = max(0, pos - block)
                    f.seek(pos)
                    data = f.read(size - pos)
    except OSError:
        return []
    lines = data.decode(errors="replace").splitlines()
    return lines if n <= 0 else lines[-n:]


def tail_logs(run_dir: Path, lines: int = 50, write: Callable[[str], None] = print) -> int:
    """Print each log's last lines under a `==> file <==` header; returns how many files exist."""
    found = 0
    for path in log_files(run_dir):
        if not path.exists():
            continue
        found += 1
        write(f"==> {path} <==")
        for line in tail_lines(path, lines):
            write(line)
    return found


def follow_logs(run_dir: Path, write: Callable[[str], None] = print, poll_s: float = 0.5, stop: Callable[[], bool] | None = None) -> None:
    """Print new lines of every log as they appear (new log files of a requeued job included)."""
    offsets: dict[Path, int] = {}
    for path in log_files(run_dir):
        try:
            offsets[path] = path.stat().st_size
        except OSError:
            offsets[path] = 0
    current: Path | None = None
    while not (stop and stop()):
        for path in log_files(run_dir):
            offsets.setdefault(path, 0)
            for line in _new_lines(path, offsets):
                if path != current:
                    write(f"==> {path} <==")
                    current = path
                write(line)
        time.sleep(poll_s)


def _new_lines(path: Path, offsets: dict[Path, int]) -> Iterator[str]:
    try:
        size = path.stat().st_size
    except OSError:
        return
    if size < offsets[path]:
        offsets[path] = 0  # rewritten
    if size == offsets[path]:
        return
    with open(path, "rb") as f:
        f.seek(offsets[path])
        data = f.read(size - offsets[path])
    end = data.rfind(b"\n") + 1
    offsets[path] += end
    yield from data[:end].decode(errors="replace").splitlines()
