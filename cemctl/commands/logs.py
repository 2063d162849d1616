"""`cemctl logs RUN [--follow]`: a run's train.log and its executor's stdout/stderr (`cemctl.services.logs`)."""

from __future__ import annotations

from typing import Optional

import typer

from cemctl.commands.common import DbOption, RunsDirOption, cli_errors, db_url, runs_dir


def register(app: typer.Typer) -> None:
    @app.command("logs")
    def logs(
        run: str = typer.Argument(..., help="Run id (or a unique prefix)."),
        follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines (Ctrl-C to stop)."),
        lines: int = typer.Option(50, "--lines", "-n", min=0, help="Last lines of each log (0 = all)."),
        db: Optional[str] = DbOption,
        runs: Optional[str] = RunsDirOption,
    ) -> None:
        """Show a run's logs."""
        with cli_errors():
            from cemctl.services.logs import find_run_dir, follow_logs, tail_logs

            root = runs_dir(runs)
            run_dir = find_run_dir(run, root, db_url(db))
            found = tail_logs(run_dir, lines, write=lambda s: print(s, flush=True), runs_root=root)
            if not found and not follow:
                print(f"(no logs yet in {run_dir})")
            if follow:
                follow_logs(run_dir, write=lambda s: print(s, flush=True), runs_root=root)
