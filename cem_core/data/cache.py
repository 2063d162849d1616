"""Crash- and race-safe cache files for `prepare_data` (`cemctl launch`, every training run).

Several runs (processes, SLURM jobs on a shared file system with POSIX locks)
may prepare the same data at once. Writers take an exclusive `fcntl` lock on a
`.lock` file beside the target, re-check whether another process finished the
work meanwhile, write into a temporary name in the same directory and publish
with an atomic `os.replace`/`os.rename`. Readers never take the lock on the fast
path: a published file or directory is always complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

from cem_core.runfiles.files import fsync_dir


@contextlib.contextmanager
def file_lock(path: Path | str, *, blocking: bool = True) -> Iterator[bool]:
    """Exclusive advisory lock held for the `with` block; yields True when held.

    Blocking (default): waits for it. `blocking=False`: yields False at once when another process holds it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    """Write `data` to `path` via a temporary file + rename (never half-written); the folder is created."""
    from cem_core.runfiles.files import atomic_write_bytes as _write

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    _write(path, data)


def atomic_write_json(path: Path | str, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode("utf-8"))


def make_temp_dir(parent: Path, name: str) -> Path:
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=parent))


def publish_dir(tmp_dir: Path, final: Path) -> None:
    """Atomically make `tmp_dir` visible as `final` (which must not exist yet)."""
    for child in tmp_dir.iterdir():
        if child.is_file():
            with open(child, "rb") as f:
                os.fsync(f.fileno())
    os.rename(tmp_dir, final)
    fsync_dir(final.parent)


def remove_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
