"""`cemctl demo`: the four commands a researcher runs, on the built-in CPU demo grid.

Runs, in order and exactly as typed by a user, `cemctl plan`, `cemctl launch`,
`cemctl status` and `cemctl report` on `experiments/demo.toml` (four variants
of the `micro` model on the built-in corpus; a few minutes on 2 CPU cores, no
network). Results land in the usual places: `results.db`, `runs/`, `reports/demo/`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from cemctl.commands.common import DbOption, RunsDirOption, cli_errors, stdout_console, fail

def find_demo_grid(explicit: str | None = None) -> Path:
    """The demo grid: --grid, else ./experiments/demo.toml, else the one the package ships."""
    from cemctl.grid.files import find_grid

    path = find_grid(explicit or "demo")
    if path is None or not path.is_file():
        fail(f"{explicit or 'demo'}: no such grid file (give --grid FILE)")
        raise AssertionError  # unreachable: fail() exits
    return path


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        grid: Optional[str] = typer.Option(None, "--grid", help="Grid file to demo (default: experiments/demo.toml)."),
        out: Optional[str] = typer.Option(None, "--out", help="Report folder (default: reports/<experiment>)."),
        db: str = DbOption,
        runs: str = RunsDirOption,
    ) -> None:
        """Plan, launch, watch and report the built-in demo grid on this machine (CPU, a few minutes)."""
        import click

        with cli_errors():
            path = find_demo_grid(grid)
            common: list[str] = []
            if db:
                common += ["--db", db]
            if runs:
                common += ["--runs-dir", runs]
            from cemctl.grid import DEFAULT_SCALE, parse_grid

            name = parse_grid(path, DEFAULT_SCALE).name
            report_args = ["report", name, *common] + (["--out", out] if out else [])
            steps = [["plan", str(path), *common], ["launch", str(path), *common], ["status", name, *common], report_args]
            command = typer.main.get_command(app)
            for args in steps:
                stdout_console().rule(f"cemctl {' '.join(args)}", style="dim")
                try:
                    code = command.main(args, prog_name="cemctl", standalone_mode=False)
                except click.exceptions.Exit as e:
                    code = e.exit_code
                except click.ClickException as e:
                    e.show()
                    code = e.exit_code
                if code:
                    raise typer.Exit(code)
