"""Which runs folder a command uses (every command that reads or writes run folders), without loading the ORM.

    root = resolve_runs_root(reader_or_engine, runs_dir("..."))   # --runs-dir, else the one the database recorded

Run folders are `<runs root>/<run id>`, always. The runs root is the one the user names
(`--runs-dir`, `$CEMCTL_RUNS`); else the one the database recorded (`recorded_runs_root`),
which a SQLite database stores relative to its own folder: a `cp -a` copy of a project acts on
its own runs, never on the original's. A recorded root that is not the current project's
`./runs` is used with a one-line notice on stderr. Resolving writes nothing: the plugins of the
runs are read from their sources (the `.plugins/` copy's manifest records where they are); the
commands that write refresh the copy the jobs import (`cemctl.db.runs.refresh_plugin_copy`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from sqlalchemy.engine import Engine

    from cemctl.db.read import Reader


class DefaultRunsRoot(type(Path())):  # type: ignore[misc]
    """The runs folder nobody named (`./runs`): commands use the database's recorded root instead, if it has one."""


NOTICES = logging.getLogger("cemctl.notice")  # one-line notices on stderr (logging's last-resort handler)
_NOTICED: set[tuple[str, str]] = set()  # each notice once per process


def notice_once(key: tuple[str, str], text: str) -> None:
    if key not in _NOTICED:
        _NOTICED.add(key)
        NOTICES.warning(text)


def recorded_runs_root(source: "Engine | Reader") -> Path | None:
    """The runs root of the most recently recorded run (relative records are below the database's folder)."""
    from cemctl.db.read import open_reader

    reader = open_reader(source)
    rows = reader.rows("SELECT run_dir FROM runs WHERE run_dir IS NOT NULL ORDER BY created_at DESC, id LIMIT 1")
    if not rows or not rows[0][0]:
        return None
    path = Path(rows[0][0])
    if not path.is_absolute():
        base = reader.folder
        path = (base / path) if base is not None else Path(os.path.abspath(path))
    return path.parent


def resolve_runs_root(source: "Engine | Reader | None", runs_root: Path | str | None) -> Path:
    """The runs root a command uses: the one named (`--runs-dir`, `$CEMCTL_RUNS`); else (a `DefaultRunsRoot`,
    or None) the one the database recorded, with a one-line notice when that is not `./runs`; else `./runs`.
    Writes nothing: the plugins of its runs are read from their sources (recorded in the `.plugins/` copy's
    manifest; the copy only where a source is gone). A command that writes (plan, launch, sync, import) then
    calls `cemctl.db.runs.refresh_plugin_copy`."""
    root = _resolve(source, runs_root)
    copy = root / ".plugins"  # cem_core.plugins.PLUGINS_DIR (imported only when there is one)
    if os.path.lexists(copy):
        from cem_core.plugins import add_search_path

        add_search_path(copy)
    if os.path.lexists(root / ".plugins-imported"):  # cem_core.plugins.IMPORTED_DIR: an archive's plugins
        from cem_core.plugins import note_untrusted

        note_untrusted(root)  # named as such where a config needs one; never imported
    return root


def _resolve(source: Any, runs_root: Path | str | None) -> Path:
    if runs_root is not None and not isinstance(runs_root, DefaultRunsRoot):
        return Path(runs_root)
    default = Path(runs_root) if runs_root is not None else Path("runs")
    recorded = recorded_runs_root(source) if source is not None else None
    if recorded is None:
        return Path(str(default))
    key = (os.path.realpath(recorded), os.path.realpath(default))
    if key[0] != key[1]:
        notice_once(key, f"note: using the runs folder {recorded} that the results database recorded (not "
                         f"{os.path.abspath(default)}); give --runs-dir to use another")
    return recorded
