"""The one file lock of cemctl (`cemctl launch`, `eval`, `tag`, `data prepare`: a run, its evals and tags, a cache).

    with file_lock(run_dir / ".lock"):                     # waits for another holder
        ...
    with file_lock(path, blocking=False) as held:          # held is False when another process has it
        ...
    with claim_run(run_dir) as mine:                       # launch and forget: one command at a time on a run
        ...

An exclusive advisory `fcntl.flock` on a lock file, released when the block ends
(or the process dies). The lock file is opened without following a symlink and
without blocking on a FIFO: a link or a special file planted in its place is
refused with `RunFileError`, never written through or waited on. `best_effort`:
a file system without `flock` gives no protection instead of an error (the
trainer's run lock on old NFS mounts). Torch-free.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from pathlib import Path
from typing import Iterator

from cem_core.runfiles.files import RunFileError

_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str], *, blocking: bool = True, make_parents: bool = False,
              best_effort: bool = False) -> Iterator[bool]:
    """Hold an exclusive lock on `path` for the `with` block; yields True when held (False: `blocking=False` and
    another process holds it, or `best_effort` and the file system has no flock)."""
    path = Path(path)
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, _FLAGS, 0o644)
    except OSError as e:
        raise RunFileError(f"{path}: refused as a lock file: {e.strerror or e} (a link or a special file?)") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RunFileError(f"{path}: refused as a lock file: not a regular file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        except OSError:
            if not best_effort:
                raise
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


CLAIM_FILE = ".claim.lock"  # in a run folder: held by the one command starting (or forgetting) the run right now


@contextlib.contextmanager
def claim_run(run_dir: str | os.PathLike[str]) -> Iterator[bool]:
    """Claim a run folder for the `with` block without waiting: True when this process now holds it; False when
    another does (a second `cemctl launch` of the same runs, a `forget` removing them) or the folder is gone. The
    claim ends with the block or the process: a crash never leaves a run claimed."""
    stack = contextlib.ExitStack()
    try:
        held = stack.enter_context(file_lock(Path(run_dir) / CLAIM_FILE, blocking=False))
    except RunFileError:
        if Path(run_dir).is_dir():
            raise
        held = False  # the folder is gone (forgotten meanwhile)
    with stack:
        yield held


class Busy(RunFileError):
    """Another process holds a lock that one command at a time may hold (`one_at_a_time`)."""


@contextlib.contextmanager
def one_at_a_time(path: str | os.PathLike[str], busy: str) -> Iterator[None]:
    """Hold the lock at `path` for the block, or raise `Busy(busy)` at once (one line) when another process holds
    it: two imports into one project (`path` a folder: the folder itself is locked, nothing is written in it), two
    `--until-decided` loops on one experiment (a lock file)."""
    if Path(path).is_dir():
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise Busy(busy) from None
            yield
        finally:
            os.close(fd)  # closing releases the lock
        return
    with file_lock(path, blocking=False, make_parents=True) as held:
        if not held:
            raise Busy(busy)
        yield
