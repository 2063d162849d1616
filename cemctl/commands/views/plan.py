"""The plan table (`cemctl plan FILE`): one row per run with its cost, fitted to the terminal.

Always shown: the run id, parameters, tokens and the state ("new" for a run the
database does not have yet); then the axes that vary, in the grid file's order (the
constant ones in a header line; a long key name is cut before a value is, so that no
two rows look alike), then as room allows GPU- and CPU-hours, FLOPs, the non-embedding
parameters and the grid's [[mark]] labels. Sizes are shown by name (86M), parameter
counts as numbers (86.4M). The totals line gives the CPU time of what is not done
yet at the local executor's default number of workers, or "not a CPU job" beyond a week.
"""

from __future__ import annotations

import os
from typing import Any

from cem_core.names import printable
from cemctl.commands.views import formats as F
from cemctl.commands.views.table import (GAP, Cell, Column, axis_headers, distinguishing, fit, render_plain,
                                         render_rich)
from cemctl.commands.views.status import STATE_STYLES, short_ids, short_names

WEEK_H = 7 * 24.0


def default_cpu_workers() -> int:
    """The local executor's default on a machine without GPUs: one worker per core."""
    return max(1, os.cpu_count() or 1)


def cpu_time_text(cpu_hours: float, workers: int) -> str:
    """'about 12 min with 2 workers', or 'not a CPU job (3.2 CPU-years)' when it would take over a week."""
    wall_h = cpu_hours / max(1, workers)
    if cpu_hours <= 0:
        return "nothing left to train"
    if wall_h > WEEK_H:
        years = cpu_hours / (24 * 365)
        amount = (f"{years:,.0f} CPU-years" if years >= 10 else f"{years:.1f} CPU-years") if years >= 1 \
            else f"{cpu_hours:,.0f} CPU-hours"
        return f"not a CPU job ({amount})"
    if wall_h < 1:
        return f"about {max(1, round(wall_h * 60))} min with {workers} worker{'s' if workers > 1 else ''}"
    return f"about {wall_h:.1f} h with {workers} worker{'s' if workers > 1 else ''}"


class PlanView:
    def __init__(self, report: Any, width: int | None) -> None:
        plan = report.plan
        self.report = report
        rows = report.rows
        varied = [k for k in plan.varied if len({F.value(r["axes"].get(k)) for r in rows}) > 1]
        constant = [k for k in plan.varied if k not in varied]
        names = short_names(list(plan.varied))
        ids = short_ids([r["run_id"] for r in rows])
        cols = [Column("run", "run", required=True)]
        numeric = {k for k in varied if all(isinstance(r["axes"].get(k), (int, float))
                                            and not isinstance(r["axes"].get(k), bool) for r in rows)}
        # The axes that tell the rows apart (the seed too) are always shown, their headers cut before their values;
        # an axis that moves with them (a [[zip]] partner) only where there is room.
        telling = distinguishing(varied, [r["axes"] for r in rows])
        widest = {k: max([len(F.value(r["axes"].get(k))) for r in rows] or [0]) for k in telling}
        fixed = len(ids[rows[0]["run_id"]]) if rows else 3
        fixed += sum(max(len(h), w) for h, w in (("params", 6), ("tokens", 6), ("state", 7))) + GAP * 4
        headers = axis_headers({k: names[k] for k in telling}, widest, None if width is None else width - fixed)
        cols += [Column(k, headers[k], required=True, align="right" if k in numeric else "left") if k in telling
                 else Column(k, names[k], priority=2, shrink_to=6, align="right" if k in numeric else "left")
                 for k in varied]
        self.cut_axes = ("axes, left to right: " + ", ".join(names[k] for k in varied)
                         if any(headers[k] != names[k] for k in telling) else "")
        cols += [
            Column("params", "params", align="right", required=True),
            Column("non-emb", "non-emb", priority=6, align="right"),
            Column("tokens", "tokens", align="right", required=True),
            Column("flops", "FLOPs", priority=5, align="right"),
            Column("gpu_h", "GPU-h", priority=1, align="right"),
            Column("cpu_h", "CPU-h", priority=1, align="right"),
            Column("state", "state", required=True),
            Column("note", "note", priority=7, shrink_to=12),
        ]
        self.cells = []
        for r in rows:
            state = "new" if r["new"] else r["state"]
            cells = {"run": Cell(ids[r["run_id"]], "dim")}
            cells.update({k: Cell(F.value(r["axes"].get(k))) for k in varied})
            cells.update({
                "params": Cell(F.count(r["params_total"])), "non-emb": Cell(F.count(r["params_non_embedding"])),
                "tokens": Cell(F.count(r["tokens"])), "flops": Cell(F.count(r["train_flops"])),
                "gpu_h": Cell(F.hours(r["gpu_hours"])), "cpu_h": Cell(F.hours(r["cpu_hours"])),
                "state": Cell(state, "bold" if state == "new" else STATE_STYLES.get(state, "")),
                "note": Cell(printable("; ".join(r["marks"]))),
            })
            self.cells.append(cells)
        self.layout = fit(cols, self.cells, width)
        self.title = (f"{printable(plan.name)} ({printable(plan.figure)}, scale {printable(plan.scale)}): "
                      f"{len(rows)} runs, {report.new_runs} new")
        constants = [f"{names[k]}={F.value(rows[0]['axes'].get(k))}" for k in constant] if rows else []
        sizes = {pr.config.model.size for pr in plan.runs}
        if len(sizes) == 1 and "model.size" not in varied:
            constants.insert(0, f"size={sizes.pop()}")
        self.constants = ", ".join(constants)

    def totals_line(self) -> str:
        t, plan = self.report.totals, self.report.plan
        workers = default_cpu_workers()
        cal = t.get("calibrated") or {}
        gpu_at = (f"at {cal['gpu']}" if cal.get("gpu") else f"at {t['gpu_tflops']:g} TFLOP/s x "
                  + (f"{t['mfu']:g} MFU" if t["mfu"] else "an MFU by model width from an H200"))
        cpu_at = f"at {cal['cpu']}" if cal.get("cpu") else f"at {t['cpu_gflops']:g} GFLOP/s per worker"
        fixed = t.get("gpu_fixed_hours") or 0.0
        share = (f" ({fixed / t['gpu_hours']:.0%} of it each run's fixed start, compilation and evaluation)"
                 if t["gpu_hours"] and fixed / t["gpu_hours"] >= 0.25 else "")
        text = (f"total: {t['runs']} runs, {F.count(t['tokens'])} tokens, {F.count(t['train_flops'])} FLOPs, "
                f"{F.hours(t['gpu_hours'])} GPU-hours{share} {gpu_at}; "
                + (f"not done yet: {F.hours(t['cpu_hours'])} CPU-hours {cpu_at}, "
                   + cpu_time_text(t["cpu_hours"], workers) if t["cpu_hours"] > 0 else "every run is done"))
        if plan.excluded:
            text += f"; {plan.excluded} excluded"
        if plan.duplicates:
            text += f"; {plan.duplicates} duplicates merged"
        return text

    def notes(self) -> list[str]:
        out = [self.totals_line()] + ([self.cut_axes] if self.cut_axes else [])
        if self.report.variants:  # a plugin's variants by the labels it declared
            out.append("plugin variants: " + "; ".join(printable(v) for v in self.report.variants))
        if self.layout.hidden:  # plan has no --wide: a wider terminal, a pipe or --json shows them
            out.append(f"hidden at {self.layout.width} columns: {', '.join(c.header for c in self.layout.hidden)} "
                       "(a wider terminal, a pipe or --json shows them)")
        return out

    def plain_lines(self) -> list[str]:
        lines = [self.title] + ([f"same for every run: {self.constants}"] if self.constants else [])
        return lines + render_plain(self.layout, self.cells) + self.notes()

    def rich(self) -> Any:
        from rich.console import Group
        from rich.text import Text

        parts: list[Any] = [Text(self.title, style="bold")]
        if self.constants:
            parts.append(Text(f"same for every run: {self.constants}", style="dim"))
        parts.append(render_rich(self.layout, self.cells))
        parts += [Text(n) for n in self.notes()[:1]] + [Text(n, style="dim") for n in self.notes()[1:]]
        return Group(*parts)
