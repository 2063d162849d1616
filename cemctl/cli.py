"""The `cemctl` command line: a thin layer over the library (`cemctl --help`, `python -m cemctl`).

Each command lives in `cemctl/commands/<name>.py`, parses its options, calls one
library function and turns domain errors into one-line CLI errors (exit 2).
Anything unexpected is never a traceback on the terminal: `main` writes it to a
crash log (`$CEMCTL_CRASH_DIR`, else `~/.cache/cemctl/crashes/`) and prints one
line naming that file, exit 1. Nothing here imports torch; commands that train
import it lazily.
"""

from __future__ import annotations

import datetime
import os
import sys
import tempfile
import traceback
from pathlib import Path

import typer

from cem_core.names import printable
from cemctl.commands import register_all

app = typer.Typer(
    name="cemctl",
    help="Plan, launch, watch and report Causal Energy Minimization experiments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: `cemctl --help` must not pay for rich's markdown renderer
)


def _show_version(value: bool) -> None:
    if value:
        from cemctl import __version__

        typer.echo(f"cemctl {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Show the version and exit.", is_eager=True,
                                 callback=_show_version),
) -> None:
    """Plan, launch, watch and report Causal Energy Minimization experiments."""


register_all(app)


def crash_dir() -> Path:
    return Path(os.environ.get("CEMCTL_CRASH_DIR") or Path.home() / ".cache" / "cemctl" / "crashes")


def write_crash_log(exc: BaseException, argv: list[str]) -> Path:
    """The traceback of an unexpected error, with the command line, in a new file; returns its path."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    text = (f"cemctl {' '.join(argv)}\n"
            + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    for folder in (crash_dir(), Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f"crash-{stamp}-", suffix=".log", dir=folder)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            return Path(name)
        except OSError:
            continue
    return Path("(no writable folder for a crash log)")


def _usage_error(e: BaseException) -> bool:
    """A click usage error (typer ships its own click): it can format its message and has an exit code."""
    return callable(getattr(e, "format_message", None)) and isinstance(getattr(e, "exit_code", None), int)


def main() -> None:
    try:
        _run_app()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - a bug: one line and a crash log, never a traceback
        path = write_crash_log(e, sys.argv[1:])
        message = printable(" ".join(str(e).split())[:200])
        print(f"error: internal error ({type(e).__name__}: {message}); the details are in {path}", file=sys.stderr)
        sys.exit(1)


def _run_app() -> None:
    try:
        code = app(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:
        if type(e).__name__ == "NoArgsIsHelpError" and getattr(e, "ctx", None) is not None:
            print(e.ctx.get_help())  # type: ignore[attr-defined]
            sys.exit(0)
        if not _usage_error(e):
            raise
        # A bad option or argument: one line naming the command and the option, like every other bad input.
        ctx = getattr(e, "ctx", None)
        where = f"{ctx.command_path}: " if ctx is not None else ""
        envvar = getattr(getattr(e, "param", None), "envvar", None)
        source = f" (from ${envvar}={os.environ[envvar]!r})" if isinstance(envvar, str) and envvar in os.environ else ""
        message = " ".join(e.format_message().split())  # type: ignore[attr-defined]
        print(f"error: {printable(where + message + source)}", file=sys.stderr)
        sys.exit(e.exit_code)  # type: ignore[attr-defined]


if __name__ == "__main__":  # pragma: no cover
    main()
