"""What a foreground `cemctl launch` shows while the local executor runs its jobs.

On a terminal (`LiveLaunchView`): a live table of the runs in flight at the bottom
(run, the axes that vary among the launched runs, slot, step/total, training loss,
tokens/s, ETA) under a line of counts with the grid's ETA (`status --watch`'s:
`cemctl.records.progress.grid_eta_s`), and one line per run above it when the run ends (done with its test loss, failed with
its reason: the values of the axes that tell the runs apart in columns under a header naming them). Without a terminal (`LogLaunchView`: pipes, `--detach` logs, CI): a line
per state change and, every `every_s` seconds, a progress line per running run and the
counts with the grid's ETA, so a log shows life.

Both are the executor's `on_tick(statuses)` callback; the runs' progress comes from
their heartbeat.json and the last line of metrics.jsonl (`cem_core.runfiles`).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from cem_core import runfiles
from cem_core.names import plural, printable
from cemctl.commands.views import formats as F
from cemctl.commands.views.status import STATE_STYLES, short_ids, short_names
from cemctl.commands.views.table import Cell, Column, axis_headers, distinguishing, fit, render_rich
from cemctl.records.progress import run_eta_s

ENDED = ("done", "failed", "diverged", "cancelled", "interrupted")


@dataclass
class Progress:
    step: int | None = None
    total: int | None = None
    loss: float | None = None
    tokens_per_s: float | None = None
    eta_s: float | None = None
    tokens: int | None = None  # trained so far


def _header(name: str) -> str:
    """A column's header as the field catalogue names it (`cemctl.records.fields`): one name per fact everywhere."""
    from cemctl.records.fields import field

    return field(name).header


def read_progress(run_dir: Any) -> Progress:
    """A running run's step, last training loss, tokens/s and ETA (heartbeat + the metrics' last line)."""
    hb = runfiles.read_heartbeat(run_dir) or {}
    m = runfiles.last_metrics(run_dir, ("train",)).get("train", {})
    p = Progress(step=hb.get("step"), total=hb.get("total_steps"), loss=m.get("train_loss"),
                 tokens_per_s=m.get("tokens_per_s"))
    tokens = hb.get("tokens")
    p.tokens = tokens if isinstance(tokens, int) else None
    # the time left at the run's pace so far (`cemctl.records.progress.run_eta_s`, as status and the dashboard)
    p.eta_s = run_eta_s("running", p.step, p.total, time_s=m.get("time_s"), time_step=m.get("step"), tokens=p.tokens,
                        tokens_per_s=p.tokens_per_s)
    return p


def finished_wall_s(run_dir: Any) -> float | None:
    """A finished run's wall time (its result.json), None without one."""
    result = runfiles.read_result(run_dir)
    wall = result.wall_time_s if result is not None else None
    return wall if wall is not None and wall > 0 else None


def _result_note(run_dir: Any) -> str:
    result = runfiles.read_result(run_dir)
    return f"test loss {F.loss(result.test_loss)}" if result is not None and result.test_loss is not None else ""


class _Base:
    def __init__(self, axes: dict[str, dict[str, Any]] | None = None) -> None:
        self.axes: dict[str, dict[str, Any]] = axes or {}
        self._seen: dict[str, str] = {}
        self._ids: dict[str, str] = {}
        self._varying: list[str] = []
        self._walls: dict[str, float | None] = {}  # run id -> wall time of a run that finished (read once)
        self._before: list[Any] = []  # folders of the grid's runs this launch skips (their wall times: the pace)
        self._before_walls: list[float] | None = None  # read once
        self._column_cache: dict[int, tuple[list[str], dict[str, str], dict[str, int]]] = {}  # width -> columns

    def set_runs(self, axes: dict[str, dict[str, Any]], run_ids: Sequence[str], *,
                 finished_before: Sequence[Any] = ()) -> None:
        """The launched runs and their axes (the launcher's report, before any job starts). `finished_before`: the
        folders of the grid's runs this launch skips; those with a result set the grid's pace from the start (a
        relaunch of a half-trained grid said 'grid ETA not known yet' until one of its own runs had ended)."""
        self._before, self._before_walls = list(finished_before), None
        self.axes = {rid: axes.get(rid, {}) for rid in run_ids}
        keys: list[str] = []
        for a in self.axes.values():
            keys += [k for k in a if k not in keys]
        self._varying = [k for k in keys if len({F.value(a.get(k)) for a in self.axes.values()}) > 1]
        self._ids = short_ids(list(run_ids))
        self._column_cache = {}

    def grid_eta(self, statuses: Sequence[Any], progress: dict[str, Progress] | None = None) -> float | None:
        """The grid's ETA, as `status --watch` computes it (`cemctl.records.progress.grid_eta_s`): the running runs'
        own ETAs and, per queued run, the finished runs' mean wall time (this launch's and those it skipped as
        finished), shared by the runs in flight."""
        from cemctl.records.progress import grid_eta_s

        progress = dict(progress or {})
        records = []
        for st in statuses:
            rid = st.job.run_id
            record: dict[str, Any] = {"state": st.state}
            if st.state == "done":
                if rid not in self._walls:
                    self._walls[rid] = finished_wall_s(st.job.run_dir)
                record["wall_time_s"] = self._walls[rid]
            elif st.state == "running":
                p = progress.get(rid) or read_progress(st.job.run_dir)
                record["eta_s"] = p.eta_s
            records.append(record)
        if self._before_walls is None:
            self._before_walls = [w for w in map(finished_wall_s, self._before) if w is not None]
        records += [{"state": "done", "wall_time_s": w} for w in self._before_walls]
        return grid_eta_s(records)

    def counts_line(self, statuses: Sequence[Any], progress: dict[str, Progress] | None = None) -> str:
        """'8 runs: 2 done, 4 queued, 2 running; grid ETA 3m20s' (the ETA once it can be known)."""
        counts = Counter(st.state for st in statuses)
        text = f"{plural(len(statuses), 'run')}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        if counts.get("queued") or counts.get("running"):
            eta = self.grid_eta(statuses, progress)
            text += f"; grid ETA {F.duration(eta)}" if eta is not None else "; grid ETA not known yet"
        return text

    def short(self, run_id: str) -> str:
        return self._ids.get(run_id, run_id[:8])

    def axes_text(self, run_id: str) -> str:
        names = short_names(self._varying)
        a = self.axes.get(run_id, {})
        return " ".join(f"{names[k]}={F.value(a.get(k))}" for k in self._varying)

    STATE_W = 9  # the ended-line state column: 'cancelled' (an 'interrupted' run pushes its line by two)

    def _columns(self, width: int) -> tuple[list[str], dict[str, str], dict[str, int]]:
        """The axes an ended line shows on a terminal `width` wide: those that tell the launched runs apart (a
        [[zip]] partner that moves with them is left out), each under its short name, the longest names shortened
        to their last words, then cut with '…' (never narrower than the values) so that the line keeps room for its
        result (`ended_legend` then names them)."""

        cached = self._column_cache.get(width)
        if cached is not None:
            return cached
        rows = list(self.axes.values())
        keys = distinguishing(list(self._varying), rows) if rows else []
        names = short_names(self._varying)
        widest = {k: max([len(F.value(a.get(k))) for a in rows] or [0]) for k in keys}
        fixed = 8 + 2 + self._run_w() + 2 + self.STATE_W + 2 + len("test loss 0.0000  in 10m00s") + 2
        headers = axis_headers({k: names[k] for k in keys}, widest, max(0, width - fixed))
        widths = {k: max(len(headers[k]), widest[k]) for k in keys}
        self._column_cache[width] = (keys, headers, widths)  # the launched runs are fixed: once per terminal width
        return keys, headers, widths

    def _run_w(self) -> int:
        return len(next(iter(self._ids.values()), "x" * 8))

    def ended_header(self, width: int) -> str:
        """The header above a terminal's ended-run lines: 'time  run  state  <the axes>  result'."""
        keys, headers, widths = self._columns(width)
        axes = "  ".join(headers[k].ljust(widths[k]) for k in keys)
        line = "  ".join(p for p in ["time".ljust(8), "run".ljust(self._run_w()), "state".ljust(self.STATE_W), axes, "result"]
                         if p)
        return printable(line if len(line) <= width else line[:width - 1] + "\u2026")

    def ended_legend(self, width: int) -> str:
        """'axes, left to right: attention, attn_steps, mlp' when `ended_header` could not give every axis its short
        name at `width` (a header shortened to its last words or cut), else ''."""
        keys, headers, _ = self._columns(width)
        names = short_names(self._varying)
        return "axes, left to right: " + ", ".join(names[k] for k in keys) if any(headers[k] != names[k]
                                                                                  for k in keys) else ""

    def ended_line(self, st: Any, width: int | None = None) -> str:
        """A log line '12:01:03  3fa2c1d0  done  attn_steps=2  test loss 6.4884  in 1m05s' (or the reason). With a
        `width` (a terminal) the axes' values stand in columns under `ended_header`'s names, cut with '…' only if
        even they do not fit, so that the line fits and the result stays on it."""
        wall = finished_wall_s(st.job.run_dir) if st.state == "done" else None  # the time a run took: its result's
        took = F.duration(wall) if wall is not None else \
            F.duration((st.ended_time or time.time()) - st.started_time) if st.started_time else ""  # as status
        note = _result_note(st.job.run_dir) if st.state == "done" else \
            (st.reason or "").strip().splitlines()[-1][:160] if st.reason else ""
        head = [time.strftime("%H:%M:%S"), self.short(st.job.run_id), st.state]
        tail = [p for p in (note, f"in {took}" if took and st.state == "done" else "") if p]
        if width is None:
            return printable("  ".join(p for p in [*head, printable(self.axes_text(st.job.run_id)), *tail] if p))
        keys, _, widths = self._columns(width)
        a = self.axes.get(st.job.run_id, {})
        head[2] = head[2].ljust(self.STATE_W)
        axes = printable("  ".join(F.value(a.get(k)).ljust(widths[k]) for k in keys))
        axes = axes if tail else axes.rstrip()  # padded: the result starts under its header
        room = width - len("  ".join(head + tail)) - 2  # the axes and one more separator
        if len(axes) > room:  # the padding goes before any value is cut (the result then starts a little left)
            axes = axes.rstrip()
        axes = axes if len(axes) <= room else (axes[:room - 1] + "\u2026" if room > 1 else "")
        return printable("  ".join(p for p in [*head, axes, *tail] if p))

    def changes(self, statuses: Sequence[Any]) -> list[Any]:
        """Statuses whose state changed since the last call (a run first seen queued is not a change)."""
        out = []
        for st in statuses:
            before = self._seen.get(st.job.run_id)
            self._seen[st.job.run_id] = st.state
            if before != st.state and not (before is None and st.state == "queued"):
                out.append(st)
        return out


class LogLaunchView(_Base):
    """Plain lines: state changes at once, a progress line per running run every `every_s` seconds."""

    def __init__(self, write: Callable[[str], None], *, every_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.write, self.every_s, self.clock = write, every_s, clock
        self._last: float | None = None

    def __call__(self, statuses: Sequence[Any]) -> None:
        for st in self.changes(statuses):
            if st.state in ENDED:
                self.write(self.ended_line(st))
            else:
                where = f" on {st.slot}" if st.slot else ""
                self.write(printable(f"{time.strftime('%H:%M:%S')} {self.short(st.job.run_id)} {st.state}{where}"
                                     + (f"  {self.axes_text(st.job.run_id)}" if self.axes_text(st.job.run_id) else "")))
        now = self.clock()
        if self._last is None:
            self._last = now
            return
        if now - self._last < self.every_s:
            return
        self._last = now
        for st in statuses:
            if st.state == "running":
                self.write(self.progress_line(st))
        if any(st.state in ("queued", "running") for st in statuses):
            self.write(printable(f"{time.strftime('%H:%M:%S')} {self.counts_line(statuses)}"))

    def progress_line(self, st: Any) -> str:
        p = read_progress(st.job.run_dir)
        bits = [time.strftime("%H:%M:%S"), self.short(st.job.run_id), "running"]
        if p.step is not None:
            bits.append(f"step {F.progress(p.step, p.total)}")
        if p.loss is not None:
            bits.append(f"loss {F.loss(p.loss)}")
        if p.tokens_per_s:
            bits.append(f"{F.rate(p.tokens_per_s)} tok/s")
        if p.eta_s is not None:
            bits.append(f"ETA {F.duration(p.eta_s)}")
        return printable("  ".join(bits))


class LiveLaunchView(_Base):
    """A rich Live display: ended runs printed above, the runs in flight redrawn below."""

    def __init__(self, console: Any, *, refresh_s: float = 1.0) -> None:
        super().__init__()
        self.console = console
        self.refresh_s = refresh_s
        self._live: Any = None
        self._last = 0.0
        self._statuses: Sequence[Any] = []
        self._header_shown = False

    def __enter__(self) -> "LiveLaunchView":
        from rich.live import Live
        from rich.text import Text

        self._live = Live(Text("starting...", style="dim"), console=self.console, refresh_per_second=4,
                          transient=True, redirect_stdout=False, redirect_stderr=False)
        self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._print_changes(self._statuses)
            self._live.__exit__(*exc)
            self._live = None

    def _print_changes(self, statuses: Sequence[Any]) -> None:
        from rich.text import Text

        for st in self.changes(statuses):
            if st.state in ENDED:
                if not self._header_shown:  # once, above the first ended run: the names of the columns
                    self._header_shown = True
                    legend = self.ended_legend(self.console.width)
                    if legend:  # the axes' whole names where the header had to shorten them (between words)
                        self.console.print(Text(printable(legend), style="dim"))
                    self.console.print(Text(self.ended_header(self.console.width), style="bold"), soft_wrap=True)
                self.console.print(Text(self.ended_line(st, width=self.console.width),
                                        style=STATE_STYLES.get(st.state, "")), soft_wrap=True)

    def __call__(self, statuses: Sequence[Any]) -> None:
        self._statuses = statuses
        if self._live is None:
            return
        self._print_changes(statuses)
        now = time.monotonic()
        if now - self._last < self.refresh_s:
            return
        self._last = now
        self._live.update(self.render(statuses), refresh=True)

    def render(self, statuses: Sequence[Any]) -> Any:
        from rich.console import Group
        from rich.text import Text

        running = [st for st in statuses if st.state == "running"]
        progress = {st.job.run_id: read_progress(st.job.run_dir) for st in running}
        head = Text(self.counts_line(statuses, progress), style="bold")
        if not running:
            return head
        names = short_names(self._varying)
        telling = set(distinguishing(list(self._varying), list(self.axes.values())))
        cols = [Column("run", "run", required=True)]  # the axes that tell the runs apart go last (a repeat first)
        cols += [Column(k, names[k], priority=0 if k in telling else 9, shrink_to=4 if k in telling else 0)
                 for k in self._varying]
        cols += [Column("slot", "slot", priority=5), Column("step", "step", align="right", required=True),
                 Column("loss", "loss", align="right", required=True),
                 Column("tok/s", _header("tokens_per_s"), align="right", priority=1),  # the catalogue's name: current
                 Column("eta", _header("eta_s"), align="right", priority=1)]
        rows = []
        for st in running:
            p = progress[st.job.run_id]
            a = self.axes.get(st.job.run_id, {})
            rows.append({"run": Cell(self.short(st.job.run_id), "dim"), "slot": Cell(st.slot),
                         **{k: Cell(F.value(a.get(k))) for k in self._varying},
                         "step": Cell(F.progress(p.step, p.total)), "loss": Cell(F.loss(p.loss)),
                         "tok/s": Cell(F.rate(p.tokens_per_s)), "eta": Cell(F.duration(p.eta_s))})
        layout = fit(cols, rows, self.console.width)
        return Group(head, render_rich(layout, rows))
