"""Opening the results database and writing to it safely (every `cemctl` command that touches it).

    engine = open_db("sqlite:///results.db")        # or any SQLAlchemy URL (PostgreSQL works)
    with write_session(engine) as s:                 # BEGIN IMMEDIATE on SQLite, commit on exit
        s.add(...)
    with read_session(engine) as s:                  # deferred read transaction
        s.scalars(select(Run)).all()

`open_db` creates the file (and its folder) if needed, switches SQLite to WAL
mode with a 30 s busy timeout and foreign keys on, and migrates the schema to
the current version (`cemctl.db.migrations`). Commands that only read
(`status`, `report`, `logs`, `claims`, a dry run) call `open_existing_db`: it
never creates a file or folder, refuses anything that is not a regular file,
and opens a database it cannot write (a read-only file or folder, a
`file:...?mode=ro` URL) read-only; `is_readonly(engine)` tells them not to sync. Writes on SQLite start with
`BEGIN IMMEDIATE`, so many worker processes on one host can write at once: a
writer waits for the lock (up to the busy timeout) instead of failing with
"database is locked" when it upgrades a read lock. `retry_locked` adds a
bounded retry around a whole write for the rare timeout.

Forked processes must not reuse a parent's pooled connections: call
`open_db(url)` in the child (engines are cached per process id).
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import DatabaseError as SADatabaseError
from sqlalchemy.orm import Session

from cemctl.db.errors import FULL_BELOW_BYTES as FULL_BELOW_BYTES  # re-exported: cemctl.db.engine.DatabaseError
from cemctl.db.errors import DatabaseError as DatabaseError
from cemctl.db.errors import disk_full as disk_full
from cemctl.db.url import resolve_db_url as resolve_db_url
from cem_core.errors import CemError

BUSY_TIMEOUT_S = 30.0
_WRITE_OPTION = "cemctl_write"
_ENGINES: dict[tuple[str, int, bool], Engine] = {}

T = TypeVar("T")


def _sqlite_target(u: Any) -> tuple[Path, bool] | None:
    """(file, read-only asked) of a SQLite URL; None for in-memory or other backends.

    A `file:` URI database (`sqlite:///file:x.db?mode=ro&uri=true`) names the file after `file:`.
    """
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    database = str(u.database)
    readonly = str(u.query.get("mode", "")) == "ro"
    if database.startswith("file:"):
        from urllib.parse import parse_qs, unquote, urlsplit

        parts = urlsplit(database)
        readonly = readonly or parse_qs(parts.query).get("mode", [""])[0] == "ro"
        database = unquote(parts.path)
    return Path(database), readonly


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None for in-memory or other backends)."""
    target = _sqlite_target(make_url(url))
    return target[0] if target is not None else None


def shown_url(url: str, *, relative: bool = False, unknown: str = "the results database") -> str:
    """A results database as a person names it: a SQLite file's path (`relative`: relative to the current folder
    where it is below it), else the URL without its password; `unknown` for what cannot be read as a URL."""
    try:
        path = sqlite_path(url)
        if path is None:
            return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL: named by `unknown`
        return unknown
    if relative:
        try:
            return str(Path(os.path.abspath(path)).relative_to(Path.cwd()))
        except ValueError:
            pass
    return str(path)


def _install_sqlite_hooks(engine: Engine, busy_timeout_s: float, readonly: bool = False) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's begin event emit BEGIN itself (pysqlite's own is deferred-only).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            cur.execute("PRAGMA foreign_keys = ON")
            if readonly:  # a database we may not write keeps its journal mode
                return
            deadline = time.monotonic() + busy_timeout_s
            while True:  # switching to WAL needs a moment of exclusive access
                try:
                    mode = cur.execute("PRAGMA journal_mode = WAL").fetchone()
                    break
                except Exception as e:  # sqlite3.OperationalError: database is locked
                    if "locked" not in str(e) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.05 + random.random() * 0.05)
            if mode and str(mode[0]).lower() == "wal":
                cur.execute("PRAGMA synchronous = NORMAL")
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        write = conn.get_execution_options().get(_WRITE_OPTION, False) and not readonly
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _readonly_mode(path: Path, full: bool | None = None) -> str:
    """How SQLite reads the file read-only: immutable where it could not make the -shm file a WAL reader needs (a
    full disk without one there, or a folder it cannot write: a read-only mount), else plain read-only."""
    full = disk_full(path) if full is None else full
    no_room = full and not os.path.exists(f"{path}-shm")
    return "ro&immutable=1" if no_room or not os.access(path.parent, os.W_OK) else "ro"


def check_sqlite_file(path: Path) -> None:
    """Refuse, without changing a byte, a file that is not SQLite or is another application's database. Read
    through SQLite only, never open()/close() of the file: closing any descriptor of it drops every POSIX lock this
    process holds on it, its open connections' included, and another process then rewrites the WAL under them
    ("database disk image is malformed")."""
    try:
        if not path.is_file() or path.stat().st_size == 0:
            return  # a new database
    except OSError as e:
        raise DatabaseError(f"--db: cannot read {str(path)!r}: {e.strerror or e}") from None
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode={_readonly_mode(path)}", uri=True)
        try:
            tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        finally:
            con.close()
    except sqlite3.Error as e:
        if "file is not a database" in str(e):
            raise DatabaseError(f"--db: {str(path)!r} is not a SQLite database (file is not a database)") from None
        raise DatabaseError(f"--db: cannot open {str(path)!r}: {' '.join(str(e).split())}") from None
    if tables and "runs" not in tables and "schema_version" not in tables:
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise DatabaseError(f"--db: {str(path)!r} is not a cemctl results database (it holds other tables: {shown}); give another file")


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK) and os.access(path.parent if str(path.parent) else ".", os.W_OK)


_FULL_NOTED: set[str] = set()


def _note_full(path: Path) -> None:
    if str(path) in _FULL_NOTED:
        return
    _FULL_NOTED.add(str(path))
    import logging

    logging.getLogger("cemctl.notice").warning(
        f"note: no space left on device for {path.parent}: the results database is read as it was last written, "
        "nothing is written to it (free some space to sync, plan or launch)")


def open_db(url: str, *, migrate: bool = True, busy_timeout_s: float = BUSY_TIMEOUT_S, create: bool = True,
            allow_memory: bool = False) -> Engine:
    """An engine on `url` with the schema at the current version (cached per process).

    `create=False` (`open_existing_db`): never create a file or folder; a SQLite file that
    cannot be written is opened read-only (no journal switch, no migration, no writes).
    An in-memory SQLite database (`sqlite://`, `:memory:`) is refused: what a command recorded
    there would vanish when it ends (`allow_memory` for cemctl's own scratch use).
    """
    try:
        u = make_url(url)
    except Exception as e:
        raise DatabaseError(f"--db: not a database URL or path: {url!r} ({e})") from None
    if (not allow_memory and u.get_backend_name() == "sqlite"
            and (not u.database or u.database == ":memory:" or "mode=memory" in str(u.database)
                 or str(u.query.get("mode", "")) == "memory")):
        raise DatabaseError(f"--db: {url!r} is an in-memory database: everything recorded would vanish when the "
                            "command ends; give a file (e.g. --db results.db)")
    target = _sqlite_target(u)
    readonly = False
    if target is not None:
        path, asked_ro = target
        path = path if path.is_absolute() else path.resolve()  # pin the file: later chdir()s must not move it
        exists = os.path.lexists(path)
        if exists and not path.is_file():
            raise DatabaseError(f"--db: {str(path)!r} is not a regular file (a results database is a SQLite file)")
        if not exists and (asked_ro or not create):
            raise DatabaseError(f"--db: no results database at {str(path)!r} (plan an experiment first: "
                                "cemctl plan FILE)")
        full = exists and disk_full(path)  # a reader must still read: SQLite cannot make its -shm file there
        # with the -shm file there (a writer has the database open) a read-only reader uses it, WAL included;
        # without it the WAL was checkpointed when the last connection closed: the file alone is the database
        if full:
            _note_full(path)
        readonly = asked_ro or full or (exists and not _writable(path))
        if readonly:
            # immutable: the folder may not allow (or have room for) the -shm/-wal files a WAL reader would create
            url = f"sqlite:///file:{path.as_posix()}?mode={_readonly_mode(path, full)}&uri=true"
        else:
            url = u.set(database=str(path), query={}).render_as_string(hide_password=False)
    key = (url, os.getpid(), migrate)  # an engine opened without migrating (read-only) is not the one that migrates
    if key in _ENGINES:
        return _ENGINES[key]
    kwargs: dict[str, Any] = {}
    if target is not None:
        if not readonly:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise DatabaseError(f"--db: cannot create the folder of {str(path)!r}: {e.strerror or e}") from None
        check_sqlite_file(path)
        kwargs["connect_args"] = {"timeout": busy_timeout_s, "check_same_thread": False}
    else:
        kwargs["pool_pre_ping"] = True
    try:
        engine = create_engine(url, **kwargs)
    except Exception as e:  # missing driver, bad URL
        raise DatabaseError(f"--db: cannot open {url!r}: {' '.join(str(e).split())}") from None
    if engine.dialect.name == "sqlite":
        _install_sqlite_hooks(engine, busy_timeout_s, readonly)
    engine = engine.execution_options(cemctl_readonly=readonly)
    if migrate:
        from cemctl.db.migrations import check_current, migrate as _migrate

        try:
            check_current(engine) if readonly else _migrate(engine, write_engine=writer(engine))
        except CemError:
            raise
        except DBAPIError as e:  # not a database, another app's file, read-only, disk full, ...
            raise DatabaseError(f"--db: cannot open {url!r}: {_reason(e)}") from None
    _ENGINES[key] = engine
    return engine


def open_existing_db(url: str) -> Engine:
    """`open_db` for commands that only read: creates nothing, read-only where the file cannot be written."""
    return open_db(url, create=False)


def open_readonly_db(url: str) -> Engine:
    """The database strictly read-only, whoever may write it (`cemctl.api`, `export`, `compare`): a SQLite file
    through a `mode=ro` URI, PostgreSQL in read-only transactions; never created, never migrated."""
    u = make_url(resolve_db_url(url))
    target = _sqlite_target(u)
    if target is not None:
        path, _ = target
        path = path if path.is_absolute() else path.resolve()
        return open_db(f"sqlite:///file:{path.as_posix()}?mode=ro&uri=true", create=False)  # disk full: immutable
    engine = open_db(url, create=False, migrate=False)
    from cemctl.db.migrations import check_current

    check_current(engine)
    return engine.execution_options(postgresql_readonly=True, cemctl_readonly=True)


def is_readonly(engine: Engine) -> bool:
    """The engine was opened read-only: callers must not sync run directories into it."""
    return bool(engine.get_execution_options().get("cemctl_readonly"))


def writer(engine: Engine) -> Engine:
    """The same engine whose transactions start with BEGIN IMMEDIATE on SQLite."""
    return engine.execution_options(**{_WRITE_OPTION: True})


def _reason(e: DBAPIError) -> str:
    text = " ".join(str(e.orig).split())
    return text + " (no space left on device?)" if "disk I/O error" in text or "database or disk is full" in text \
        else text


def _name(engine: Engine) -> str:
    return repr(engine.url.render_as_string(hide_password=True))


def _unusable(e: SADatabaseError) -> bool:
    """The database cannot be used at all (disk full, read-only, damaged file): not a bug, not a lock."""
    if isinstance(e, OperationalError):
        return not is_locked_error(e)
    return type(e) is SADatabaseError  # sqlite3.DatabaseError: "file is not a database", "malformed"


@contextlib.contextmanager
def write_session(engine: Engine) -> Iterator[Session]:
    """A session in one write transaction: committed on success, rolled back on error.

    A write the database refuses for good (disk full, read-only file or folder, not a
    database) raises `DatabaseError` (one line); "database is locked" stays an
    `OperationalError` for `retry_locked`. The rollback keeps what was stored before.
    """
    with _session(writer(engine), engine, "write") as session:
        yield session


@contextlib.contextmanager
def read_session(engine: Engine) -> Iterator[Session]:
    """A session for reads (objects stay usable after it closes); a damaged file raises `DatabaseError`."""
    with _session(engine, engine, "read") as session:
        yield session


@contextlib.contextmanager
def _session(bind: Engine, engine: Engine, verb: str) -> Iterator[Session]:
    """One transaction; a database that refuses for good is one line (`DatabaseError`), a lock is left to retry."""
    try:
        with Session(bind, expire_on_commit=False) as session:
            with session.begin():
                yield session
    except SADatabaseError as e:
        if not _unusable(e):
            raise
        raise DatabaseError(f"results database {_name(engine)}: cannot {verb}: {_reason(e)}") from None


def is_locked_error(e: BaseException) -> bool:
    text = str(getattr(e, "orig", e)).lower()
    return "database is locked" in text or "database is busy" in text or "deadlock detected" in text


def retry_locked(fn: Callable[[], T], *, attempts: int = 5) -> T:
    """Run `fn` (a whole write transaction), retrying if the database stayed locked/busy."""
    for i in range(attempts):
        try:
            return fn()
        except OperationalError as e:
            if not is_locked_error(e) or i == attempts - 1:
                raise
            time.sleep(min(5.0, 0.1 * 2**i) * (1 + random.random()))
    raise AssertionError("unreachable")  # pragma: no cover
