"""Shared CLI plumbing for every command: options, error handling, consoles.

`cli_errors()` turns domain errors (`CemError`, `ConfigError`) and OS errors
(disk full, permission denied) into one clean line on stderr and exit code 2;
nothing else should print tracebacks for bad input.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import typer

from cem_core.errors import CemError

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console


_CONSOLES: dict[str, Any] = {}


def stdout_console() -> "Console":
    """The process's stdout console: a real rich Console (rich's live displays, progress bars and
    `with console:` need one), made on first use so commands that print nothing rich never import rich."""
    return _console("out")


def stderr_console() -> "Console":
    """The stderr console (one-line errors, notes beside --json output)."""
    return _console("err")


def _console(which: str) -> "Console":
    console = _CONSOLES.get(which)
    if console is None:
        from rich.console import Console

        console = Console(stderr=True, highlight=False, soft_wrap=True) if which == "err" else Console()
        _CONSOLES[which] = console
    return console


def output_width() -> tuple[bool, int | None]:
    """(stdout a terminal?, the width tables fit): the terminal's width; in a pipe or a file $COLUMNS when
    set, else None (a plain aligned table with every default column)."""
    if sys.stdout.isatty():
        return True, stdout_console().width
    text = os.environ.get("COLUMNS", "").strip()
    return False, int(text) if text.isdigit() and int(text) > 0 else None


def print_view(view: Any) -> None:
    """A table view (`cemctl/commands/views`): styled on a terminal, plain lines elsewhere."""
    if sys.stdout.isatty():  # not cropped either: a table that fits is never cut
        stdout_console().print(view.rich(), crop=False)
    else:
        sys.stdout.write("\n".join(view.plain_lines()) + "\n")


DEFAULT_RUNS_DIR = "runs"

# The options every command shares: one definition each, so every command honours the same env vars.
DbOption = typer.Option(None, "--db", envvar="CEMCTL_DB", show_envvar=False,
                        help="SQLAlchemy URL or SQLite path of the results database [env: CEMCTL_DB; default: results.db].")
RunsDirOption = typer.Option(None, "--runs-dir", envvar="CEMCTL_RUNS", show_envvar=False,
                             help="Folder holding one directory per run [env: CEMCTL_RUNS; default: ./runs].")
HeartbeatTimeoutOption = typer.Option(
    None, "--heartbeat-timeout-s", envvar="CEMCTL_HEARTBEAT_TIMEOUT_S", show_envvar=False,
    help="A running run whose heartbeat is older is shown as stale [env: CEMCTL_HEARTBEAT_TIMEOUT_S; default: 120].")
SCALE_METAVAR = "tiny|cpu|gpu|paper"
SCALE_HELP = ("Scale preset, one of tiny (seconds, a smoke test), cpu, gpu, paper: a grid file is planned at it, "
              "an experiment's runs planned at it are used")  # --scale means this in every command


def scale_option(default: str | None, shown_default: str) -> Any:
    """`--scale`, described one way in every command (only the default differs)."""
    return typer.Option(default, "--scale", metavar=SCALE_METAVAR, show_default=False,
                        help=f"{SCALE_HELP} [default: {shown_default}].")


ScaleOption = scale_option("tiny", "tiny")
ScaleFilterOption = scale_option(None, "every scale")


def db_url(value: str | None) -> str:
    """Resolve --db / $CEMCTL_DB; a bare path means SQLite."""
    from cemctl.db.url import resolve_db_url

    return resolve_db_url(value)


def runs_dir(value: str | None) -> Path:
    """--runs-dir / $CEMCTL_RUNS; when neither is given, `./runs` marked as unnamed (`DefaultRunsRoot`): the
    services then use the runs folder the results database recorded (a copied project uses its own)."""
    named = value or os.environ.get("CEMCTL_RUNS")
    if named:
        return Path(named)
    from cemctl.db.roots import DefaultRunsRoot

    return DefaultRunsRoot(DEFAULT_RUNS_DIR)


def heartbeat_timeout(value: float | None) -> float:
    """--heartbeat-timeout-s / $CEMCTL_HEARTBEAT_TIMEOUT_S / 120 s, checked (positive and finite)."""
    from cem_core.runfiles import heartbeat_timeout_s

    return heartbeat_timeout_s(value)


_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+._-]*://[^\s/?#:@'\"]*):([^\s/?#'\"]*)@")  # scheme://user:PASSWORD@host
_QUERY_PASSWORD = re.compile(r"(?i)([?&;][a-z_]*(?:password|passwd|pwd)=)([^&;#\s'\"]*)")  # ...?password=PASSWORD


def redact(text: str) -> str:
    """Every password of a database URL in `text` written as *** (an error line is shown, logged, pasted): the
    user's (`scheme://user:***@host`, up to the authority's last @) and a query's (`?password=***`), and wherever
    else the text repeats it or a piece of it between @ (a driver's own message: "failed to resolve host '-pw@h'"
    for the password `s3cret@-pw`, which the driver split at its first @)."""
    secrets = {m.group(2) for m in (*_PASSWORD.finditer(text), *_QUERY_PASSWORD.finditer(text)) if m.group(2)}
    text = _QUERY_PASSWORD.sub(r"\1***", _PASSWORD.sub(r"\1:***@", text))
    pieces = {piece for secret in secrets for piece in (secret, *secret.split("@")) if len(piece) >= 3}
    for piece in sorted(pieces, key=len, reverse=True):
        text = text.replace(piece, "***")
    return text


def fail(message: str, code: int = 2) -> "typer.Exit":
    """Print one line to stderr (a database URL's password hidden) and exit with `code`."""
    from cem_core.names import printable

    stderr_console().print(f"error: {printable(' '.join(redact(str(message)).split()))}", markup=False)
    raise typer.Exit(code)


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """Map domain errors to a one-line message and exit code 2."""
    try:
        yield
    except CemError as e:
        fail(str(e))
    except KeyboardInterrupt:
        stderr_console().print("interrupted", markup=False)
        raise typer.Exit(130)
    except BrokenPipeError:  # `cemctl status | head`
        sys.stderr.close()
        raise typer.Exit(0)
    except OSError as e:  # a full disk, a read-only folder, a missing permission: one line, not a traceback
        where = f"{e.filename}: " if e.filename else ""
        fail(f"{where}{e.strerror or e}")
