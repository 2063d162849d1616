"""`cemctl launch EXPERIMENT --until-decided`: the rounds as they go, then why the loop stopped and the seeds each
arm got (library: `cemctl.services.launch.until_decided`)."""

from __future__ import annotations

import json
from typing import Any

import typer


def run_until_decided(req: Any, url: str, runs_root: Any, max_seeds: int | None, budget_hours: float | None,
                      as_json: bool) -> None:
    from cem_core.names import printable
    from cemctl.commands.common import stderr_console, stdout_console
    from cemctl.services.launch.until_decided import until_decided

    out = stderr_console() if as_json else stdout_console()

    def say(line: str) -> None:
        out.print(printable(line), markup=False, highlight=False, soft_wrap=not out.is_terminal)

    def progress(report: Any) -> None:  # each launch's summary line
        say(report.summary())

    report = until_decided(req, url, runs_root, max_seeds=max_seeds, budget_hours=budget_hours, on_round=say,
                           on_launch=progress)
    if as_json:
        print(json.dumps({"experiment": report.experiment, "scale": report.scale, "stop": report.stop,
                          "message": report.message, "rounds": len(report.rounds), "seeds": report.seeds,
                          "spent_hours": report.spent_hours, "session_hours": report.session_hours,
                          "design": str(report.design_path) if report.design_path else None}))
    else:
        say(report.summary())
        for arm, n in report.seeds.items():
            say(f"  {n:>3} seeds  {arm}")
        if report.design_path:
            say(f"design and looks: {report.design_path}; the claims page (cemctl claims) analyses them")
    if report.stop == "nothing to run":  # runs failed: say so with the exit status (a cap or a budget is a plan)
        raise typer.Exit(1)
