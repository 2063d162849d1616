"""Reading the results database at the speed of the database (`cemctl status`, the run record, the dashboard).

    reader = open_reader("sqlite:///results.db")   # a SQLite file: the standard library's sqlite3, read-only
    reader = open_reader(engine)                   # any SQLAlchemy engine (PostgreSQL): the same SQL through it
    with reader.snapshot():                        # one read transaction: a run being written is seen whole or not
        rows = reader.rows("SELECT id, state FROM runs WHERE id IN (:ids)", ids=["3fa2c1d0e5b7"])

What reads runs (the record's query, the status summary, the sync check) is written once, as SQL
text that SQLite and PostgreSQL both run (`:name` parameters; a list value expands to `:name_0,
:name_1, ...`), and executed by whichever driver is at hand: a SQLite file through the standard
library's `sqlite3` (no SQLAlchemy import, no ORM: a read costs what the database costs), any
other URL or an engine a caller already holds through SQLAlchemy Core (`text()`). A SQLite file is
opened read-only (`mode=ro`): reading never creates, migrates or writes it; a file whose schema is
not this cemctl's, or that SQLite cannot open read-only, is opened the slow way
(`cemctl.db.engine.open_existing_db`), which migrates it or says in one line why it cannot.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from cemctl.db.errors import SCHEMA_VERSION, DatabaseError, disk_full
from cemctl.db.url import sqlite_file

if TYPE_CHECKING:  # pragma: no cover
    from sqlalchemy.engine import Connection, Engine

BUSY_TIMEOUT_S = 30.0

# The one rule for a run still in its grid, as SQL (the run record, the status summary, `list_runs`): a link
# (`er`, of experiment_runs) is in the grid when the latest plan of its key (experiment, scale, --set overrides)
# made it; a run an edited grid file no longer holds keeps its older link. Join with `JOIN {LATEST_PLANS}`.
LATEST_PLANS = """(SELECT experiment_id, scale, overrides_json, MAX(COALESCE(planned_at, 0.0)) AS latest
    FROM experiment_runs GROUP BY experiment_id, scale, overrides_json) lp ON lp.experiment_id = er.experiment_id
    AND lp.scale = er.scale AND lp.overrides_json = er.overrides_json"""
IN_GRID = "CASE WHEN COALESCE(er.planned_at, 0.0) >= lp.latest THEN 1 ELSE 0 END"


def expand(sql: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """`IN (:ids)` with `ids` bound to a list becomes `IN (:ids_0, :ids_1, ...)` (an empty list matches nothing)."""
    out = dict(params)
    for name, value in params.items():
        if isinstance(value, (list, tuple, set, frozenset)):
            items = list(value)
            keys = [f"{name}_{i}" for i in range(len(items))] or [f"{name}_none"]
            del out[name]
            out.update(zip(keys, items or [None]))
            sql = sql.replace(f"(:{name})", "(" + ", ".join(f":{k}" for k in keys) + ")")
    return sql, out


class Reader:
    """Rows of SQL text from the results database (see the module docstring)."""

    dialect = "sqlite"

    def current(self) -> bool:
        """Whether a cached reader still reads the database its URL names (a file replaced since: not)."""
        return True

    def state(self) -> tuple[Any, ...] | None:
        """What changes whenever the database changes (a cache keyed by it never shows stale data); None: cannot
        tell (no cache)."""
        return None

    def rows(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def named(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        """The rows as {column label: value}."""
        raise NotImplementedError

    @contextlib.contextmanager
    def snapshot(self) -> Iterator["Reader"]:
        yield self

    @property
    def engine(self) -> "Engine":
        """The SQLAlchemy engine on the same database (for what writes or needs the ORM)."""
        raise NotImplementedError

    @property
    def folder(self) -> Path | None:
        """The folder of a SQLite database file (None for other databases)."""
        raise NotImplementedError

    def write_engine(self) -> "Engine":
        """An engine that writes the same database (`cemctl.db.engine.open_existing_db`: never creates it)."""
        raise NotImplementedError


class SqliteReader(Reader):
    """A SQLite file read through `sqlite3`, read-only."""

    def __init__(self, path: Path, url: str) -> None:
        self.path, self.url = path, url
        self.con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S,
                                   isolation_level=None)
        self._depth = 0
        self._file = self._identity()

    def _identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def current(self) -> bool:
        return self._file is not None and self._identity() == self._file

    def state(self) -> tuple[Any, ...] | None:
        """The database file's and its WAL's identity, size and modification time (a commit moves them)."""
        out: list[Any] = [str(self.path)]
        for name in (self.path, Path(f"{self.path}-wal")):
            try:
                st = os.stat(name)
            except OSError:
                out.append(None)
                continue
            out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(out)

    def _run(self, sql: str, params: dict[str, Any]) -> sqlite3.Cursor:
        sql, bound = expand(sql, params)
        try:
            return self.con.execute(sql, bound)
        except sqlite3.Error as e:
            raise DatabaseError(f"results database {str(self.path)!r}: cannot read: {' '.join(str(e).split())}") \
                from None

    def rows(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        return self._run(sql, params).fetchall()

    def named(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        cur = self._run(sql, params)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Reader]:
        if self._depth:
            self._depth += 1
            try:
                yield self
            finally:
                self._depth -= 1
            return
        self._depth = 1
        self.con.execute("BEGIN")
        try:
            yield self
        finally:
            self._depth = 0
            self.con.execute("COMMIT")

    @property
    def engine(self) -> "Engine":
        from cemctl.db.engine import open_readonly_db

        return open_readonly_db(self.url)

    @property
    def folder(self) -> Path | None:
        return self.path.parent

    def write_engine(self) -> "Engine":
        from cemctl.db.engine import open_existing_db

        return open_existing_db(self.url)


class EngineReader(Reader):
    """The same SQL through a SQLAlchemy engine (PostgreSQL; an engine a caller holds)."""

    def __init__(self, engine: "Engine") -> None:
        self._engine = engine
        self.dialect = engine.dialect.name
        self._conn: Connection | None = None

    @contextlib.contextmanager
    def _connection(self) -> Iterator["Connection"]:
        if self._conn is not None:
            yield self._conn
            return
        with self._engine.connect() as conn:
            yield conn

    def _execute(self, sql: str, params: dict[str, Any]) -> Any:
        from sqlalchemy import text
        from sqlalchemy.exc import DBAPIError

        sql, bound = expand(sql, params)
        with self._connection() as conn:
            try:
                result = conn.execute(text(sql), bound)
                return result.keys(), result.fetchall()
            except DBAPIError as e:
                raise DatabaseError(f"results database: cannot read: {' '.join(str(e.orig).split())}") from None

    def rows(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self._execute(sql, params)[1]]

    def named(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        keys, rows = self._execute(sql, params)
        names = list(keys)
        return [dict(zip(names, r)) for r in rows]

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Reader]:
        if self._conn is not None:
            yield self
            return
        with self._engine.connect() as conn:
            self._conn = conn
            try:
                with conn.begin():
                    yield self
            finally:
                self._conn = None

    @property
    def engine(self) -> "Engine":
        return self._engine

    def write_engine(self) -> "Engine":
        return self._engine

    @property
    def folder(self) -> Path | None:
        from cemctl.db.engine import sqlite_path

        try:
            path = sqlite_path(self._engine.url.render_as_string(hide_password=False))
        except Exception:  # noqa: BLE001 - not a URL this code can read a file from
            return None
        return path.resolve().parent if path is not None else None


_READERS: dict[tuple[str, int, int, bool], Reader] = {}


def open_reader(source: "str | Engine | Reader", *, migrate: bool = False) -> Reader:
    """A reader of the results database at `source` (a URL or path, an engine, a reader); never creates or writes it.
    A SQLite file of this cemctl's schema is read through `sqlite3`; anything else through SQLAlchemy, strictly
    read-only (`open_readonly_db`), or with `migrate` as `open_existing_db` opens it (an older schema of a file it
    may write is migrated first: `cemctl status`)."""
    if isinstance(source, Reader):
        return source
    if not isinstance(source, str):
        return EngineReader(source)
    url = source if "://" in source else f"sqlite:///{source}"
    path = sqlite_file(url)
    if path is not None:
        url = f"sqlite:///{path}"  # pinned: a later chdir() must not move it (nor find another process's reader)
    key = (url, os.getpid(), threading.get_ident(), migrate)  # a connection is one thread's
    if key in _READERS and _READERS[key].current():
        return _READERS[key]
    reader: Reader | None = _fast_sqlite(url)
    if reader is None:
        from cemctl.db.engine import open_existing_db, open_readonly_db

        reader = EngineReader(open_existing_db(url) if migrate else open_readonly_db(url))
    _READERS[key] = reader
    return reader


def _fast_sqlite(url: str) -> SqliteReader | None:
    """A `sqlite3` reader of a SQLite file of this schema, or None (the slow way says why it cannot be read)."""
    path = sqlite_file(url)
    if path is None or not path.is_file() or os.path.islink(path) or not os.access(path.parent, os.W_OK) \
            or disk_full(path):
        return None  # a read-only folder or a full disk needs `immutable` and a note (cemctl.db.engine): the slow way
    try:  # through SQLite only (no open() of the file: its close drops this process's locks, `check_sqlite_file`)
        reader = SqliteReader(path, url)
    except (OSError, sqlite3.Error, Exception):  # noqa: BLE001 - anything odd: the slow way names it
        return None
    try:
        version = reader.rows("SELECT MAX(version) FROM schema_version")
    except (OSError, sqlite3.Error, Exception):  # noqa: BLE001 - not SQLite, not this schema: the slow way says so
        version = []
    if not version or version[0][0] != SCHEMA_VERSION:
        reader.con.close()
        return None
    return reader


def writable(reader: Reader) -> bool:
    """Whether a command may sync run folders into the database (a SQLite file it can write with room on its disk;
    an engine not opened read-only)."""
    if isinstance(reader, SqliteReader):
        return not disk_full(reader.path) and os.access(reader.path, os.W_OK) and os.access(reader.path.parent, os.W_OK)
    return not reader.engine.get_execution_options().get("cemctl_readonly")
