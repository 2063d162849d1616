"""`cemctl cancel RUN|EXPERIMENT`: stop runs (scancel / SIGTERM) and mark them cancelled."""

from __future__ import annotations

from typing import Optional

import typer

from cemctl.commands.common import DbOption, RunsDirOption, ScaleFilterOption, cli_errors, stdout_console, db_url, runs_dir


def register(app: typer.Typer) -> None:
    @app.command("cancel")
    def cancel(
        target: str = typer.Argument(..., help="Run id (or unique prefix), experiment name or grid file."),
        scale: Optional[str] = ScaleFilterOption,
        db: Optional[str] = DbOption,
        runs: Optional[str] = RunsDirOption,
    ) -> None:
        """Stop runs and mark them cancelled (the next launch starts them again)."""
        with cli_errors():
            from cem_core.names import printable
            from cemctl.services.cancel import cancel_target

            done = cancel_target(db_url(db), runs_dir(runs), target, scale=scale)
            for c in done:
                stdout_console().print(f"  {c.run_id}  {printable(c.action)}", markup=False, highlight=False)
            n = sum(not c.action.startswith("not cancelled") for c in done)
            stdout_console().print(f"cancelled {n} run(s)", markup=False)
