"""`cemctl status [EXPERIMENT]`: a table per experiment of every run's state and progress.

First syncs the run directories into the database (incremental: only files that
changed are read; `cemctl.services.status`), then prints one table per experiment
that fits the terminal (`cemctl/commands/views/status.py`: the run id, the axes that
vary, state, progress, test loss, times and the reason first; more columns as the
width allows; `--columns`/`--wide` choose). Pipes and files get a plain aligned
table (`COLUMNS` sets its width), `--json` every field of every run, `--watch`
refreshes it live (Ctrl-C to leave).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, List, Optional

import typer

from cemctl.commands.common import (
    DbOption,
    HeartbeatTimeoutOption,
    RunsDirOption,
    ScaleFilterOption,
    cli_errors,
    db_url,
    heartbeat_timeout,
    output_width,
    runs_dir,
    stdout_console,
)


def parse_columns(text: str | None) -> list[str] | None:
    """`--columns run,state,attn_steps` -> the column keys (each checked; unknown names: one line, exit 2)."""
    if not text:
        return None
    from cem_core.config import field_names
    from cemctl.commands.views.status import resolve_column

    names = [c.strip() for c in text.split(",") if c.strip()]
    return [resolve_column(n, [], config_keys=field_names()) for n in names] or None


def parse_sort(text: str | None) -> tuple[str, bool] | None:
    """`--sort test`, `--sort -test` or `--sort test:desc` -> (column key, descending)."""
    if not text:
        return None
    from cem_core.config import field_names
    from cemctl.commands.views.status import resolve_column

    name, descending = text.strip(), False
    if name.startswith("-"):
        name, descending = name[1:], True
    elif name.endswith(":desc") or name.endswith(":asc"):
        name, _, order = name.rpartition(":")
        descending = order == "desc"
    return resolve_column(name, [], config_keys=field_names()), descending


def register(app: typer.Typer) -> None:
    @app.command("status")
    def status(
        experiment: str = typer.Argument(None, help="Experiment name (default: all experiments)."),
        watch: bool = typer.Option(False, "--watch", "-w", help="Refresh the table live (Ctrl-C to stop)."),
        as_json: bool = typer.Option(False, "--json", help="Print every field of every run as JSON."),
        columns: Optional[str] = typer.Option(None, "--columns", "-c", help="Exactly these columns, comma-separated: "
                                              "run, scale, state, progress, train, val, test, ppl, tok/s, elapsed, eta, "
                                              "job, attempts, reason, an axis, any config key (e.g. attn_steps, train.lr) or "
                                              "a tag (tag.NAME)."),
        wide: bool = typer.Option(False, "--wide", help="Every column, whatever the width of the terminal."),
        where: Optional[List[str]] = typer.Option(None, "--where", help="Only runs meeting KEY OP VALUE (repeatable; "
                                                  "e.g. attn_steps>=2, 'train.lr in 1e-3,2e-3', tag.note~warmup)."),
        arms: bool = typer.Option(False, "--arms", help="One row per arm (every config value equal but the seed): "
                                  "seeds done, states, test loss mean +- s.d."),
        state: Optional[str] = typer.Option(None, "--state", help="Only runs in these states, e.g. failed,running."),
        sort: Optional[str] = typer.Option(None, "--sort", help="Order runs by a column (ascending; -COLUMN or "
                                           "COLUMN:desc for descending), e.g. --sort test."),
        db: str = DbOption,
        runs: str = RunsDirOption,
        interval_s: float = typer.Option(2.0, "--interval-s", help="Refresh period of --watch, in seconds."),
        limit: int = typer.Option(50, "--limit", min=0, help="At most this many runs per experiment (unfinished first; shared by all experiments when none is named); 0 = all."),
        no_sync: bool = typer.Option(False, "--no-sync", help="Show the database as it is, without reading run dirs."),
        scale: str = ScaleFilterOption,
        heartbeat_timeout_s: float = HeartbeatTimeoutOption,
    ) -> None:
        """Show the state, progress, losses and errors of every run."""
        with cli_errors():
            from cem_core.errors import ConfigError
            from cemctl.services.status import open_status_db, parse_states, status_json, status_snapshot

            if not (interval_s > 0 and interval_s < float("inf")):
                raise ConfigError("--interval-s", f"must be a positive number of seconds, got {interval_s}")
            states = parse_states(state)
            cols = parse_columns(columns)
            order = parse_sort(sort)
            from cemctl.grid.where import parse_where

            conds = parse_where(where)
            wanted = (cols or []) + ([order[0]] if order else []) + [c.key for c in conds]
            need_config = arms or any("." in k and not k.startswith("tag.") for k in wanted)
            timeout_s = heartbeat_timeout(heartbeat_timeout_s)
            engine, can_sync = open_status_db(db_url(db))
            if not can_sync and not no_sync:  # the states shown are the recorded ones: say so, once
                print("note: the results database is read-only here: states are as last recorded (the run folders "
                      "were not read; open it with write access to bring them up to date)", file=sys.stderr, flush=True)

            def snapshot() -> list[Any]:
                statuses = status_snapshot(engine, runs_dir(runs), experiment, sync=can_sync and not no_sync,
                                           heartbeat_timeout_s=timeout_s,
                                           limit=0 if as_json or conds or arms else limit, scale=scale,
                                           states=states, with_config=need_config,
                                           with_tags=any(k.startswith("tag.") for k in wanted))
                if conds:
                    from cemctl.commands.views.status import run_record
                    from cemctl.grid.where import matches

                    from cemctl.grid.where import describe

                    for exp in statuses:
                        exp.state_counts = exp.state_counts or exp.counts
                        exp.total_runs = exp.total
                        exp.runs = [r for r in exp.runs if matches(conds, run_record(r))]
                        exp.matching = len(exp.runs)
                        exp.selection = " ".join(filter(None, [exp.selection, f"--where {describe(conds)}"]))
                if order:
                    from cemctl.commands.views.status import sort_rows

                    now = time.time()
                    for exp in statuses:
                        exp.runs = sort_rows(exp.runs, order[0], now, descending=order[1])
                return statuses

            try:
                if as_json:
                    while True:
                        print(json.dumps(status_json(snapshot()), default=str), flush=True)
                        if not watch:
                            return
                        time.sleep(interval_s)
                if watch and sys.stdout.isatty():
                    _watch_live(snapshot, interval_s, columns=cols, wide=wide, limit=limit, arms=arms)
                    return
                while True:
                    _print_tables(snapshot(), columns=cols, wide=wide, limit=limit, arms=arms)
                    if not watch:
                        return
                    sys.stdout.flush()
                    time.sleep(interval_s)
            except KeyboardInterrupt:  # the way to leave --watch
                if not watch:
                    raise


def _views(statuses: list[Any], width: int | None, *, columns: list[str] | None, wide: bool, limit: int,
           arms: bool = False) -> list[Any]:
    from cemctl.commands.views.status import status_views

    return status_views(statuses, width=width, now=time.time(), columns=columns, wide=wide, limit=limit, arms=arms)


def _empty_note() -> str:
    return "no experiments yet (run `cemctl plan FILE` or `cemctl launch FILE`)"


def _print_tables(statuses: list[Any], *, columns: list[str] | None, wide: bool, limit: int, arms: bool) -> None:
    tty, width = output_width()
    views = _views(statuses, width, columns=columns, wide=wide, limit=limit, arms=arms)
    if not views:
        print(_empty_note())
        return
    if tty:
        console = stdout_console()
        for i, view in enumerate(views):
            if i:
                console.print()
            console.print(view.rich(), soft_wrap=wide, crop=not wide)
        return
    lines: list[str] = []
    for i, view in enumerate(views):
        lines += ([""] if i else []) + view.plain_lines()
    sys.stdout.write("\n".join(lines) + "\n")


def _watch_live(snapshot: Any, interval_s: float, *, columns: list[str] | None, wide: bool, limit: int,
                arms: bool) -> None:
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    console = stdout_console()

    def draw() -> Any:
        views = _views(snapshot(), console.width, columns=columns, wide=wide, limit=limit, arms=arms)
        if not views:
            return Text(_empty_note(), style="dim")
        parts: list[Any] = []
        for i, view in enumerate(views):
            parts += ([Text("")] if i else []) + [view.rich()]
        return Group(*parts)

    with Live(draw(), console=console, refresh_per_second=4, screen=False, auto_refresh=False) as live:
        while True:
            time.sleep(interval_s)
            live.update(draw(), refresh=True)
