"""One output file cemctl may replace only if it wrote it (`cemctl export -o FILE`, `cemctl compare --curves FILE`).

    write_owned_file(Path("runs.parquet"), lambda tmp: frame.to_parquet(tmp), force=False)

Beside each file it writes, cemctl keeps a record `.<name>.cemctl.json` with the file's
size and sha256. A later command replaces the file only when it still matches that
record (cemctl wrote it and nobody changed it since); anything else in the way (a
user's file, an edited export, a folder, a link, a device) is refused with one line
naming `--force`, which replaces a regular file (never a folder, a link or a device).
The new file is written beside the old one and renamed over it, so a failure never
leaves half a file.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Callable

from cem_core.errors import CemError


class NotOurs(CemError):
    """The output path holds something cemctl did not write."""


def record_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.cemctl.json")


def _digest(path: Path) -> tuple[int, str]:
    from cem_core.runfiles.manifest import file_digest  # the one size-and-sha256 of a regular file

    entry = file_digest(path)
    return entry.size, entry.sha256


def owned(path: Path) -> bool:
    """`path` is a regular file that still matches the record cemctl kept when it wrote it."""
    from cem_core.runfiles import RunFileError, read_bytes

    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        rec = json.loads(read_bytes(record_path(path), max_bytes=1 << 16))
    except (OSError, RunFileError, ValueError):
        return False
    if not isinstance(rec, dict):
        return False
    size, sha = _digest(path)
    return rec.get("size") == size and rec.get("sha256") == sha


def check_writable(path: Path, *, force: bool = False) -> None:
    """Raise NotOurs unless `path` is free, one of cemctl's own files, or (with force) a regular file."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        if not path.parent.is_dir():
            raise NotOurs(f"{path}: its folder {path.parent} does not exist") from None
        return
    if stat.S_ISLNK(mode) or not stat.S_ISREG(mode):
        kind = "a link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise NotOurs(f"{path}: refused: it is {kind}; give a new file name")
    if not force and not owned(path):
        raise NotOurs(f"{path}: refused: the file exists and cemctl did not write it (or it changed since); "
                      "give another name, or --force to replace it")


def write_owned_file(path: Path, write: Callable[[Path], None], *, force: bool = False) -> Path:
    """Write `path` through `write(tmp_path)` (atomically) and record it as cemctl's; returns `path`."""
    path = Path(path)
    check_writable(path, force=force)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        size, sha = _digest(tmp)
        check_writable(path, force=force)  # nothing took its place meanwhile
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    from cem_core.runfiles import atomic_write_json

    atomic_write_json(record_path(path), {"file": path.name, "size": size, "sha256": sha, "written_at": time.time(),
                                          "by": "cemctl"}, durable=False)
    return path
