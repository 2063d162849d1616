"""Where the results database is, from what the user gave (`--db`, `$CEMCTL_DB`), without loading SQLAlchemy.

    resolve_db_url("results.db")        -> "sqlite:///results.db"   (a bare path means SQLite)
    sqlite_file("sqlite:///results.db") -> Path("/abs/results.db")  (None for other backends and URI options)
"""

from __future__ import annotations

import os
from pathlib import Path


def resolve_db_url(value: str | None) -> str:
    """--db / $CEMCTL_DB / results.db as a SQLAlchemy URL (a bare path means SQLite)."""
    url = value or os.environ.get("CEMCTL_DB") or "sqlite:///results.db"
    return url if "://" in url else f"sqlite:///{url}"


def sqlite_file(url: str) -> Path | None:
    """The file of a plain `sqlite:///PATH` URL, absolute (None for anything else: other backends, URI options)."""
    if not url.startswith("sqlite:///") or "?" in url or url[len("sqlite:///"):].startswith("file:"):
        return None
    path = Path(url[len("sqlite:///"):])
    return path if path.is_absolute() else path.resolve()
