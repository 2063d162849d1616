"""Where the dashboard reads from: the results database opened read-only, the runs root, the reports folder.

    src = open_source("sqlite:///results.db", runs_root=Path("runs"))
    src.engine                       # SQLite through a `mode=ro` URI, PostgreSQL in read-only transactions
    src.cached("claims", compute)    # computed once per state of the database (its files' sizes and mtimes)

Read-only by construction: the URL every reader opens (`src.url`, also handed to
`cemctl.services.claims` and `cemctl.services.compare`) is itself read-only: a SQLite
file as `file:...?mode=ro` (the SQLite library refuses any write; WAL readers never block
the writer, and a reader sees only committed transactions, so never a half-written run),
a PostgreSQL URL with `default_transaction_read_only=on` in its connection options (the
server refuses any write on every connection). Nothing here creates, migrates or syncs.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

if TYPE_CHECKING:  # pragma: no cover
    from sqlalchemy.engine import Engine

T = TypeVar("T")
PG_READONLY = "-c default_transaction_read_only=on"
TOKEN_TTL_S = 2.0  # a database without files to watch (PostgreSQL): cached answers live this long


def readonly_url(url: str) -> str:
    """The same database as a URL that cannot write: SQLite `file:PATH?mode=ro&uri=true`; PostgreSQL with
    `options=-c default_transaction_read_only=on`; other backends as they are (opened with read-only
    transactions by `open_readonly_db`)."""
    from sqlalchemy.engine import make_url

    from cemctl.db.engine import DatabaseError, resolve_db_url, sqlite_path

    url = resolve_db_url(url)
    try:
        u = make_url(url)
    except Exception as e:  # noqa: BLE001 - any parse error is one line
        raise DatabaseError(f"--db: not a database URL or path: {url!r} ({e})") from None
    if u.get_backend_name() == "sqlite":
        path = sqlite_path(url)
        if path is None:
            return url  # in-memory: refused by open_db with its own line
        path = path if path.is_absolute() else path.resolve()
        return f"sqlite:///file:{path.as_posix()}?mode=ro&uri=true"
    if u.get_backend_name() == "postgresql":
        options = str(u.query.get("options", "") or "")
        if "default_transaction_read_only" not in options:
            options = f"{options} {PG_READONLY}".strip()
        return u.update_query_dict({"options": options}).render_as_string(hide_password=False)
    return url


@dataclass
class Source:
    url: str  # read-only URL (see the module docstring)
    engine: "Engine"
    runs_root: Path
    reports_dir: Path
    db_files: tuple[Path, ...] = ()  # SQLite: the database file and its -wal (their stat is the cache token)
    timeout_s: float | None = None  # heartbeat timeout for the live table (None: $CEMCTL_HEARTBEAT_TIMEOUT_S / 120)
    _cache: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _file_id: tuple[int, int] | None = None  # SQLite: (device, inode) of the file the engine's connections read
    _moments: dict[str, tuple[threading.Lock, list[Any]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._file_id = self._identity()

    def _identity(self) -> tuple[int, int] | None:
        if not self.db_files:
            return None
        try:
            st = os.stat(self.db_files[0])
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def check(self) -> None:
        """Before a page reads: the SQLite file is still the one the open connections read. A deleted (or moved)
        file is `DatabaseError` (a 503 page naming it), never its last contents served on; a replaced one (another
        file at the path: a copy put back, `cemctl import` into a fresh database) drops the open connections and the
        cached answers, so the page reads the new file (checked to be a results database this cemctl reads)."""
        if not self.db_files:
            return
        from cemctl.db.engine import DatabaseError

        now = self._identity()
        if now is None:
            raise DatabaseError(f"the results database {self.db_files[0]} is gone (deleted or moved); the "
                                "dashboard shows it again once it is back (or restart cemctl serve with --db)")
        if now == self._file_id:
            return
        from sqlalchemy.exc import DBAPIError

        from cemctl.db.migrations import check_current

        with self._lock:
            self.engine.dispose()  # connections still open read the file that was there: reopen from the path
            self._cache.clear()
        try:
            check_current(self.engine)
        except DBAPIError as e:
            raise DatabaseError(f"the results database {self.db_files[0]} was replaced by a file that is not one "
                                f"({' '.join(str(e.orig).split())})") from None
        self._file_id = now

    def token(self) -> Any:
        """Changes whenever the database may have changed: the sizes and mtimes of a SQLite file and its WAL (a
        commit moves them), else a clock tick of TOKEN_TTL_S."""
        if not self.db_files:
            return int(time.monotonic() / TOKEN_TTL_S)
        out: list[tuple[int, int] | None] = []
        for p in self.db_files:
            try:
                st = os.stat(p)
                out.append((st.st_mtime_ns, st.st_size))
            except OSError:
                out.append(None)
        return tuple(out)

    def peek(self, key: str) -> Any:
        """The cached answer for `key` if the database has not changed since it was computed, else None."""
        token = self.token()
        with self._lock:
            hit = self._cache.get(key)
        return hit[1] if hit is not None and hit[0] == token else None

    def at_moment(self, moment: str, key: str, compute: Callable[[], T]) -> T:
        """`compute()` once for every request that names one moment (a page's clock tick: the parts it asks for at
        once), so that those parts show one read of the run folders; without a moment, computed anew."""
        if not moment:
            return compute()
        with self._lock:
            slot = self._moments.get(f"{moment}\0{key}")
            if slot is None:
                if len(self._moments) > 64:
                    self._moments.clear()
                slot = self._moments[f"{moment}\0{key}"] = (threading.Lock(), [])
        with slot[0]:  # the parts' requests arrive together: the first computes, the others wait for its answer
            if not slot[1]:
                slot[1].append(compute())
            return slot[1][0]

    def cached(self, key: str, compute: Callable[[], T]) -> T:
        """`compute()` once per database state (`token`); concurrent requests may compute it twice (harmless)."""
        token = self.token()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] == token:
                return hit[1]
        value = compute()
        with self._lock:
            if len(self._cache) > 256:
                self._cache.clear()
            self._cache[key] = (token, value)
        return value


def open_source(url: str, runs_root: Path | str | None, reports_dir: Path | str | None = None, *,
                timeout_s: float | None = None) -> Source:
    """The dashboard's source: the database opened read-only (never created, migrated or synced; a missing file
    or an older schema is one line, `DatabaseError`), the runs root (`--runs-dir`, else the one the database
    recorded), the reports folder (default ./reports)."""
    from cemctl.db.engine import open_readonly_db, sqlite_path
    from cemctl.db.runs import resolve_runs_root

    ro = readonly_url(url)
    engine = open_readonly_db(ro)
    root = resolve_runs_root(engine, runs_root)
    files: tuple[Path, ...] = ()
    try:
        path = sqlite_path(url if "://" in url else f"sqlite:///{url}")
    except Exception:  # noqa: BLE001
        path = None
    if path is not None:
        path = path if path.is_absolute() else path.resolve()
        files = (path, Path(f"{path}-wal"))
    return Source(ro, engine, Path(os.path.abspath(root)), Path(os.path.abspath(reports_dir or "reports")), files,
                  timeout_s)
