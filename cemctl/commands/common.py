"""Shared CLI plumbing for every command: options, error handling, consoles.

`cli_errors()` turns domain errors (`CemError`, `ConfigError`) and OS errors
(disk full, permission denied) into one clean line on stderr and exit code 2;
nothing else should print tracebacks for bad input.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator

import typer
from rich.console import Console

from cem_core.errors import CemError

console = Console()
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

DEFAULT_DB_URL = "sqlite:///results.db"
DEFAULT_RUNS_DIR = "runs"

DbOption = typer.Option(None, "--db", help="SQLAlchemy URL or SQLite path of the results database \\[env: CEMCTL_DB; default: results.db].")
RunsDirOption = typer.Option(None, "--runs-dir", help="Folder holding one directory per run \\[env: CEMCTL_RUNS; default: ./runs].")


def db_url(value: str | None) -> str:
    """Resolve --db / $CEMCTL_DB; a bare path means SQLite."""
    url = value or os.environ.get("CEMCTL_DB") or DEFAULT_DB_URL
    if "://" not in url:
        url = f"sqlite:///{url}"
    return url


def runs_dir(value: str | None) -> Path:
    return Path(value or os.environ.get("CEMCTL_RUNS") or DEFAULT_RUNS_DIR)


def fail(message: str, code: int = 2) -> "typer.Exit":
    """Print one line to stderr and exit with `code`."""
    err_console.print(f"error: {' '.join(str(message).split())}", markup=False)
    raise typer.Exit(code)


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """Map domain errors to a one-line message and exit code 2."""
    try:
        yield
    except CemError as e:
        fail(str(e))
    except KeyboardInterrupt:
        err_console.print("interrupted", markup=False)
        raise typer.Exit(130)
    except BrokenPipeError:  # `cemctl status | head`
        sys.stderr.close()
        raise typer.Exit(0)
    except OSError as e:  # a full disk, a read-only folder, a missing permission: one line, not a traceback
        where = f"{e.filename}: " if e.filename else ""
        fail(f"{where}{e.strerror or e}")
