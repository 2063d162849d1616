"""The database's one error type and its schema version (every `cemctl` command that opens `--db`): imported by
the engine, the migrations and the reader alike, so none imports another for them."""

from __future__ import annotations

import shutil
from pathlib import Path

from cem_core.errors import CemError


class DatabaseError(CemError):
    """The results database cannot be opened or is newer than this cemctl."""


SCHEMA_VERSION = 10  # the schema this cemctl reads and writes (`cemctl.db.migrations` migrates to it)

FULL_BELOW_BYTES = 256 << 10  # less free space than this: SQLite cannot even open its journal files


def disk_full(path: Path) -> bool:
    """Whether the file system holding `path` has (almost) no space left."""
    try:
        return shutil.disk_usage(path if path.is_dir() else path.parent).free < FULL_BELOW_BYTES
    except OSError:
        return False
