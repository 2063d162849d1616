"""The live progress view of the local executor (`cemctl launch --executor local`, foreground).

`ProgressView` is the executor's `on_tick` callback: it redraws a rich table
(run, slot, state, step/total, loss, tokens/s, elapsed) from the executor's
job statuses and each running run's heartbeat.json / metrics.jsonl tail, at
most `refresh_s` apart.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from cem_core import runfiles
from cemctl.services.status.render import STATE_STYLES, fmt_duration, fmt_float, fmt_rate

_STYLES = {**STATE_STYLES, "interrupted": "yellow"}


class ProgressView:
    def __init__(self, console: Console | None = None, *, refresh_s: float = 1.0, max_rows: int = 40) -> None:
        self.console = console or Console()
        self.refresh_s = refresh_s
        self.max_rows = max_rows
        self._live: Live | None = None
        self._last = 0.0
        self._statuses: list[Any] = []

    def __enter__(self) -> "ProgressView":
        self._live = Live(Text("starting..."), console=self.console, refresh_per_second=4, transient=False)
        self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            if self._statuses:
                self._live.update(self.render(self._statuses))
            self._live.__exit__(*exc)
            self._live = None

    def __call__(self, statuses: list[Any]) -> None:
        self._statuses = statuses
        now = time.time()
        if self._live is None or now - self._last < self.refresh_s:
            return
        self._last = now
        self._live.update(self.render(statuses))

    def render(self, statuses: list[Any]) -> Group:
        counts = Counter(st.state for st in statuses)
        head = Text(f"{len(statuses)} runs: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
        table = Table(expand=False, pad_edge=False)
        for col in ("run", "slot", "state", "step", "loss", "tok/s", "elapsed", "note"):
            table.add_column(col, justify="right" if col in ("step", "loss", "tok/s", "elapsed") else "left")
        order = {"running": 0, "queued": 1}
        shown = sorted(statuses, key=lambda st: order.get(st.state, 2))[: self.max_rows]
        now = time.time()
        for st in shown:
            step = loss = rate = ""
            if st.state in ("running", "done", "failed", "diverged", "interrupted"):
                hb = runfiles.read_heartbeat(st.job.run_dir) or {}
                if hb.get("step") is not None:
                    step = f"{hb.get('step')}/{hb.get('total_steps', '?')}"
                if st.state == "running":
                    m = runfiles.last_metrics(st.job.run_dir, ("train",)).get("train", {})
                    loss = fmt_float(m.get("train_loss"))
                    rate = fmt_rate(m.get("tokens_per_s"))
            end = st.ended_time or now
            elapsed = fmt_duration(end - st.started_time) if st.started_time else ""
            table.add_row(st.job.run_id, st.slot, Text(st.state, style=_STYLES.get(st.state, "")), step, loss, rate, elapsed,
                          (st.reason or "").strip().splitlines()[-1][:80] if st.reason else "")
        if len(statuses) > len(shown):
            return Group(head, table, Text(f"... {len(statuses) - len(shown)} more", style="dim"))
        return Group(head, table)


class LinePrinter:
    """The non-interactive view (pipes, --detach logs): one line per job state change."""

    def __init__(self, write: Any = print) -> None:
        self.write = write
        self._seen: dict[str, str] = {}

    def __call__(self, statuses: list[Any]) -> None:
        for st in statuses:
            if self._seen.get(st.job.run_id) == st.state:
                continue
            if st.job.run_id not in self._seen and st.state == "queued":
                self._seen[st.job.run_id] = st.state
                continue
            self._seen[st.job.run_id] = st.state
            note = (st.reason or "").strip().splitlines()[-1][:120] if st.reason else ""
            where = f" on {st.slot}" if st.slot else ""
            stamp = time.strftime("%H:%M:%S")
            self.write(f"{stamp} {st.job.run_id} {st.state}{where}" + (f": {note}" if note else ""))
