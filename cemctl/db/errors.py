"""The database's one error type (every `cemctl` command that opens `--db`): imported by the engine and the
migrations alike, so neither imports the other for it."""

from __future__ import annotations

from cem_core.errors import CemError


class DatabaseError(CemError):
    """The results database cannot be opened or is newer than this cemctl."""
