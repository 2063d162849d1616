"""`cemctl status [EXPERIMENT]`: a table per experiment of every run's state and progress.

First syncs the run directories into the database (incremental: only files that
changed are read; `cemctl.services.status`), then prints one table per experiment
that fits the terminal (`cemctl/commands/views/status.py`: the run id, the axes that
vary, state, progress, test loss, times and the reason first; more columns as the
width allows; `--columns`/`--wide` choose). Pipes and files get a plain aligned
table (`COLUMNS` sets its width), `--json` every field of every run, `--watch`
refreshes it live until nothing is queued or running (`--follow`: until Ctrl-C), with
the grid's ETA. The selection (`--state`, `--where`, `--sort`, `--limit`) is the status
service's (`cemctl.services.status.status_snapshot`); this module only renders.
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


MIN_INTERVAL_S, MAX_INTERVAL_S = 0.2, 3600.0  # --watch refresh bounds: no busy loop, no overflow


def parse_columns(text: str | None) -> list[str] | None:
    """`--columns run,state,attn_steps` -> canonical field names (`cemctl.records.fields`); every unknown name is
    named in one line (exit 2)."""
    if not text:
        return None
    from cemctl.records.fields import resolve_all

    names = [c.strip() for c in text.split(",") if c.strip()]
    return resolve_all(names, what="--columns") or None


def register(app: typer.Typer) -> None:
    @app.command("status")
    def status(
        experiment: str = typer.Argument(None, help="Experiment name (default: all experiments)."),
        watch: bool = typer.Option(False, "--watch", "-w", help="Refresh the table live (Ctrl-C to stop)."),
        as_json: bool = typer.Option(False, "--json", help="Print every field of every run as JSON."),
        columns: Optional[str] = typer.Option(None, "--columns", "-c", help="Exactly these columns, comma-separated: "
                                              "any field `cemctl keys` lists (run, state, progress, test, ppl, tok/s, "
                                              "elapsed, eta, reason, note, arm_label, ...), a config key (attn_steps, "
                                              "train.lr) or a tag (tag.NAME)."),
        wide: bool = typer.Option(False, "--wide", help="Every column, whatever the width of the terminal."),
        where: Optional[List[str]] = typer.Option(None, "--where", help="Only runs meeting FIELD OP VALUE (repeatable; "
                                                  "any field `cemctl keys` lists, e.g. attn_steps>=2, 'train.lr in "
                                                  "1e-3,2e-3', tag.phase=b, note~warmup, val_ppl<5)."),
        arms: bool = typer.Option(False, "--arms", help="One row per arm (every config value equal but the seed): "
                                  "seeds done, states, test loss mean +- s.d."),
        state: Optional[str] = typer.Option(None, "--state", help="Only runs in these states, e.g. failed,running."),
        sort: Optional[List[str]] = typer.Option(None, "--sort", help="Order runs by a field (ascending; -FIELD or "
                                                 "FIELD:desc for descending), e.g. --sort test; several: --sort "
                                                 "attn_steps,-test or --sort attn_steps --sort -test (ties by the "
                                                 "next)."),
        db: str = DbOption,
        runs: str = RunsDirOption,
        interval_s: float = typer.Option(2.0, "--interval-s", help="Refresh period of --watch, in seconds "
                                         "(0.2 to 3600)."),
        follow: bool = typer.Option(False, "--follow", help="With --watch: keep refreshing after every run ended "
                                    "(default: stop once nothing is queued or running)."),
        limit: int = typer.Option(50, "--limit", min=0, help="At most this many runs per experiment (unfinished first; shared by all experiments when none is named); 0 = all."),
        no_sync: bool = typer.Option(False, "--no-sync", help="Show the database as it is, without reading run dirs."),
        scale: str = ScaleFilterOption,
        heartbeat_timeout_s: float = HeartbeatTimeoutOption,
    ) -> None:
        """Show the state, progress, losses and errors of every run."""
        with cli_errors():
            from cem_core.errors import ConfigError
            from cemctl.services.status import open_status_db, parse_states, status_json, status_snapshot

            if not (MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S):
                raise ConfigError("--interval-s", f"must be between {MIN_INTERVAL_S:g} and {MAX_INTERVAL_S:g} seconds, "
                                  f"got {interval_s:g}", allowed=[f"{MIN_INTERVAL_S:g}..{MAX_INTERVAL_S:g}"])
            states = parse_states(state)
            cols = parse_columns(columns)
            timeout_s = heartbeat_timeout(heartbeat_timeout_s)
            engine, can_sync = open_status_db(db_url(db))
            if not can_sync and not no_sync:  # the states shown are the recorded ones: say so, once
                print("note: the results database is read-only here: states are as last recorded (the run folders "
                      "were not read; open it with write access to bring them up to date)", file=sys.stderr, flush=True)
            show_all = as_json or arms

            def snapshot() -> list[Any]:
                return status_snapshot(engine, runs_dir(runs), experiment, sync=can_sync and not no_sync,
                                       heartbeat_timeout_s=timeout_s, limit=0 if show_all else limit, scale=scale,
                                       states=states, where=where or (), sort=sort, fields=cols or [], arms=arms)

            try:
                if as_json:
                    while True:
                        statuses = snapshot()
                        print(json.dumps(status_json(statuses), default=str), flush=True)
                        if not watch or (not follow and not _in_flight(statuses)):
                            return
                        time.sleep(interval_s)
                if watch and sys.stdout.isatty():
                    _watch_live(snapshot, interval_s, columns=cols, wide=wide, limit=limit, arms=arms, follow=follow)
                    return
                while True:
                    statuses = snapshot()
                    _print_tables(statuses, columns=cols, wide=wide, limit=limit, arms=arms)
                    if not watch or (not follow and not _in_flight(statuses)):
                        return
                    sys.stdout.flush()
                    time.sleep(interval_s)
            except KeyboardInterrupt:  # the way to leave --watch
                if not watch:
                    raise


def _in_flight(statuses: list[Any]) -> bool:
    """Whether any run shown is queued or running (--watch ends once none is, unless --follow)."""
    return any(n for e in statuses for st, n in e.counts.items() if st in ("queued", "running"))


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
    eta = _grid_eta_line(statuses)
    if tty:
        console = stdout_console()
        for i, view in enumerate(views):
            if i:
                console.print()
            console.print(view.rich(), soft_wrap=wide, crop=False)  # a table that overflowed would show, never be cut
        if eta:
            console.print(eta, soft_wrap=False)
        return
    lines: list[str] = []
    for i, view in enumerate(views):
        lines += ([""] if i else []) + view.plain_lines()
    if eta:
        lines.append(eta)
    sys.stdout.write("\n".join(lines) + "\n")


def _watch_live(snapshot: Any, interval_s: float, *, columns: list[str] | None, wide: bool, limit: int,
                arms: bool, follow: bool) -> None:
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    console = stdout_console()

    state = {"flight": True}

    def draw() -> Any:
        statuses = snapshot()
        state["flight"] = _in_flight(statuses)
        views = _views(statuses, console.width, columns=columns, wide=wide, limit=limit, arms=arms)
        if not views:
            return Text(_empty_note(), style="dim")
        parts: list[Any] = []
        for i, view in enumerate(views):
            parts += ([Text("")] if i else []) + [view.rich()]
        eta = _grid_eta_line(statuses)
        if eta:
            parts.append(Text(eta, style="bold"))
        return Group(*parts)

    with Live(draw(), console=console, refresh_per_second=4, screen=False, auto_refresh=False) as live:
        while follow or state["flight"]:
            time.sleep(interval_s)
            live.update(draw(), refresh=True)


def _grid_eta_line(statuses: list[Any]) -> str:
    """'grid: 3 running, 5 queued; about 12m left' ("" when nothing is left): `grid_progress`, in words."""
    from cemctl.records import formats as F
    from cemctl.services.status.query import grid_progress

    g = grid_progress(statuses)
    if g is None:
        return ""
    left = f"; about {F.duration(g.eta_s)} left" if g.eta_s is not None else "; no finished run yet to time the rest from"
    return f"grid: {g.running} running, {g.queued} queued{left}"
