"""Rendering the status table (`cemctl status`, `cemctl status --json`).

One rich table per experiment: a line of counts per state, then one row per
run with its varied axes, state, progress, losses, speed, elapsed time, ETA,
executor/job id, attempts and the last line of the error. With more runs than
`limit`, the unfinished and failed runs are shown first and the rest counted.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from cem_core.names import printable
from cemctl.services.status.collect import STATE_PRIORITY, ExperimentStatus, RunRow

STATE_STYLES = {
    "planned": "dim", "queued": "cyan", "running": "bold blue", "done": "green", "diverged": "magenta",
    "failed": "bold red", "stale": "yellow", "cancelled": "dim", "damaged": "bold red",
}
_PRIORITY = STATE_PRIORITY  # shown first when a table is cut at `limit`


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def fmt_float(x: float | None, digits: int = 4) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def fmt_rate(x: float | None) -> str:
    if x is None:
        return ""
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def fmt_axis(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return printable(value)


def _progress(r: RunRow) -> str:
    if r.step is None and r.state != "done":
        return ""
    step = r.step if r.step is not None else r.total_steps
    pct = r.progress
    total = r.total_steps if r.total_steps is not None else "?"
    return f"{step}/{total}" + (f" {pct * 100:3.0f}%" if pct is not None else "")


def counts_line(exp: ExperimentStatus) -> Text:
    text = Text(f"{exp.total} runs: ")
    for i, (state, n) in enumerate(exp.counts.items()):
        if i:
            text.append(", ")
        text.append(f"{n} {state}", style=STATE_STYLES.get(state, ""))
    return text


def experiment_table(exp: ExperimentStatus, *, limit: int = 200, now: float | None = None) -> RenderableType:
    now = time.time() if now is None else now
    rows = exp.runs
    if limit and len(rows) > limit:
        order = sorted(range(len(rows)), key=lambda i: (_PRIORITY.get(rows[i].state, 9), i))[:limit]
        rows = [rows[i] for i in sorted(order)]
    hidden = exp.total - len(rows)
    axes: list[str] = []
    for r in rows:
        for k in r.axes:
            if k not in axes:
                axes.append(k)
    scales = list(dict.fromkeys(r.scale for r in rows))
    table = Table(title=f"[bold]{exp.name}[/]", caption=counts_line(exp), caption_justify="left", expand=False, pad_edge=False)
    table.add_column("run", style="dim", no_wrap=True)
    if len(scales) > 1:  # runs of several scales: say which is which
        table.add_column("scale", no_wrap=True)
    for a in axes:
        table.add_column(a.split(".")[-1], no_wrap=True)
    for col, kw in (
        ("state", {}), ("progress", {"justify": "right"}), ("train", {"justify": "right"}), ("val", {"justify": "right"}),
        ("test", {"justify": "right"}), ("tok/s", {"justify": "right"}), ("elapsed", {"justify": "right"}),
        ("ETA", {"justify": "right"}), ("job", {}), ("att", {"justify": "right"}), ("error / reason", {"overflow": "fold", "max_width": 60}),
    ):
        table.add_column(col, **kw)
    for r in rows:
        job = f"{r.executor}:{r.job_id}" if r.executor and r.job_id else (r.executor or "")
        table.add_row(
            r.run_id,
            *([r.scale] if len(scales) > 1 else []),
            *[Text(fmt_axis(r.axes.get(a, ""))) for a in axes],  # Text: user text is never rich markup
            Text(r.state, style=STATE_STYLES.get(r.state, "")),
            _progress(r),
            fmt_float(r.train_loss),
            fmt_float(r.val_loss),
            fmt_float(r.test_loss),
            fmt_rate(r.tokens_per_s),
            fmt_duration(r.elapsed_s(now)),
            fmt_duration(r.eta_s()),
            Text(printable(job)),
            str(r.attempts or ""),
            Text(printable(r.error_line)),
        )
    if hidden:
        return Group(table, Text(f"... {hidden} more runs not shown (use --limit 0 to show all)", style="dim"))
    return table


def render_status(statuses: list[ExperimentStatus], *, limit: int = 200, now: float | None = None) -> RenderableType:
    if not statuses:
        return Text("no experiments yet (run `cemctl plan FILE` or `cemctl launch FILE`)", style="dim")
    return Group(*[experiment_table(e, limit=limit, now=now) for e in statuses])


def status_json(statuses: list[ExperimentStatus], now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    return {
        "time": now,
        "experiments": [
            {"name": e.name, "counts": e.counts, "total_runs": e.total, "runs": [r.to_dict(now) for r in e.runs]}
            for e in statuses
        ],
    }
