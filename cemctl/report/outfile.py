"""One output file cemctl may replace only if it wrote it (`cemctl export -o FILE`, `cemctl compare --curves FILE`).

    write_owned_file(Path("runs.parquet"), lambda tmp: frame.to_parquet(tmp), force=False)

Beside each file it writes, cemctl keeps a record `.<name>.cemctl.json` with the file's
size and sha256: a manifest of one file (`cem_core.runfiles.manifest`: the one shape and
the one strict reader of what cemctl wrote; a record of the older shape is still read as
cemctl's). A later command replaces the file only when it still matches that record
(cemctl wrote it and nobody changed it since); anything else in the way (a user's file,
an edited export, a folder, a link, a device) is refused with one line naming `--force`, which replaces a regular file (never a folder, a link or a device).
The new file is written beside the old one and renamed over it (`cem_core.runfiles`'s
one atomic write), so a failure never leaves half a file.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Callable

from cem_core.errors import CemError
from cem_core.runfiles import RunFileError, atomic_write_path
from cem_core.runfiles.manifest import FileEntry, ManifestError, file_digest, read_manifest, write_manifest

RECORD_WHAT = "output"  # the purpose a record of one output file names


class NotOurs(CemError):
    """The output path holds something cemctl did not write."""


def record_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.cemctl.json")


def owned(path: Path) -> bool:
    """`path` is a regular file that still matches the record cemctl kept when it wrote it."""
    path = Path(path)
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        entry = read_manifest(path.parent, record_path(path).name, what=RECORD_WHAT).files.get(path.name)
        return entry is not None and file_digest(path) == entry
    except (OSError, RunFileError, ManifestError):
        return False


def check_writable(path: Path, *, force: bool = False) -> None:
    """Raise NotOurs unless `path` is free, one of cemctl's own files, or (with force) a regular file."""
    if str(path) == "-":
        raise NotOurs("--out: '-' is standard output, which this command does not write to; give a file name")
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
    written: list[FileEntry] = []

    def last_check(tmp: Path) -> None:
        written.append(file_digest(tmp))
        check_writable(path, force=force)  # nothing took its place meanwhile

    atomic_write_path(path, write, durable=False, pause=False, before_replace=last_check)
    write_manifest(path.parent, what=RECORD_WHAT, name=record_path(path).name, files={path.name: written[0]},
                   extra={"written_at": time.time()}, durable=False)
    return path
