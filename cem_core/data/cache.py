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


@contextlib.contextmanager
def file_lock(path: Path | str) -> Iterator[None]:
    """Exclusive advisory lock held for the `with` block (blocks until available)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    """Write `data` to `path` via a temporary file + rename (never half-written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


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
    _fsync_dir(final.parent)


def remove_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
