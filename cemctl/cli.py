"""The `cemctl` command line: a thin layer over the library (`cemctl --help`).

Each command lives in `cemctl/commands/<name>.py`, parses its options, calls one
library function and turns domain errors into one-line CLI errors (exit 2).
Nothing here imports torch; commands that train import it lazily.
"""

from __future__ import annotations

import typer

from cemctl.commands import register_all

app = typer.Typer(
    name="cemctl",
    help="Plan, launch, watch and report Causal Energy Minimization experiments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
register_all(app)


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
