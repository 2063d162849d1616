"""The status table (`cemctl status`): one table per experiment that fits the terminal.

    views = status_views(statuses, width=80, now=time.time())   # -> [ExperimentView]
    for v in views: print(*v.plain_lines(), sep="\\n")            # or v.rich() on a terminal

Rows are run records (`cemctl.records`) and every column is a field of the catalogue
(`cemctl.records.fields`: its header, its format), so `--columns`, `--sort` and `--where`
name the same fields as every other command. What a row shows, by importance: the run
id (short), the axes that vary within the runs shown (the constant ones go in a header
line), the state, the progress, the test loss, elapsed time / ETA, the reason when there
is one, then the training and validation losses, the speed (`tokens_per_s` while
running, `avg_tokens_per_s` once finished: only the columns some row has a value for),
the job and the attempts. At any width state, progress and test loss are shown in
full; from 120 columns on the losses and speeds too; the rest as room allows (the
columns left out are named under the table). `columns=[...]` shows exactly those;
`wide=True` every column; `width=None` a plain aligned table with every default column.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from cem_core.arms import short_names  # noqa: F401 - the table's short key names (views/plan.py too)
from cem_core.names import printable
from cemctl.commands.views.table import (GAP, REPEAT_PRIORITY, Cell, Column, Layout, axis_headers, axis_priorities, fit,
                                         hidden_note, line_width, natural_width, render_plain, render_rich)
from cemctl.records import formats as F
from cemctl.records.fields import column_field as field_of

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import RenderableType

    from cemctl.records.record import RunRecord
    from cemctl.services.status import ExperimentStatus

STATE_STYLES = {
    "planned": "dim", "queued": "cyan", "running": "bold blue", "done": "green", "diverged": "magenta",
    "failed": "bold red", "stale": "yellow", "cancelled": "dim", "damaged": "bold red", "interrupted": "yellow",
}
WIDE_AT = 120  # from this width on, the losses and speeds are always shown
ID_WIDTH = 8  # run ids are shown by their first 8 characters (longer only when that is ambiguous)

# Default columns (after the run id, the scale and the varying axes), in display order, with their priority
# (lower is shown first when the width is short).
DEFAULT_COLUMNS: tuple[tuple[str, int], ...] = (
    ("scale", 1), ("state", 0), ("progress", 0), ("train_loss", 6), ("val_loss", 6), ("test_loss", 0),
    ("tokens_per_s", 6), ("avg_tokens_per_s", 6), ("elapsed_s", 3), ("eta_s", 3), ("job", 8), ("attempts", 8),
    ("reason", 4),
)
REQUIRED = ("state", "progress", "test_loss")
REQUIRED_WIDE = ("train_loss", "val_loss", "tokens_per_s", "avg_tokens_per_s")
PRIORITY = dict(DEFAULT_COLUMNS)


def short_ids(run_ids: Sequence[str]) -> dict[str, str]:
    """The first ID_WIDTH characters of each id, more where two shown ids would look alike."""
    n = ID_WIDTH
    while n < 64 and len({rid[:n] for rid in run_ids}) < len(set(run_ids)):
        n += 2
    return {rid: rid[:n] for rid in run_ids}


def raw_value(r: "RunRecord", key: str) -> Any:
    """A record's value of a field (an axis the record was loaded without its config for: from its axes)."""
    if key in r:
        return r[key]
    return r.axes.get(key)


def cell_text(r: "RunRecord", key: str) -> str:
    """A field's value as text, by the field's kind (`cemctl.records.formats`)."""
    if key == "progress":
        return F.progress(r.get("step"), r.get("total_steps"), r.get("state") == "done")
    value = raw_value(r, key)
    return printable(F.by_kind(field_of(key).kind)(value))


@dataclass
class ExperimentView:
    title: str
    total: int
    counts: list[tuple[str, int]]  # (state, n)
    constants: list[tuple[str, str]]  # axes with one value among the runs shown
    layout: Layout
    rows: list[dict[str, Cell]]
    notes: list[str] = field(default_factory=list)

    def _head(self) -> list[tuple[str, str]]:
        parts: list[tuple[str, str]] = [(self.title, "bold"), (f"  {self.total} run{'s' if self.total != 1 else ''}: ", "")]
        for i, (state, n) in enumerate(self.counts):
            parts += [((", " if i else "") + f"{n} {state}", STATE_STYLES.get(state, ""))]
        return parts

    def _constants_line(self) -> str:
        if not self.constants:
            return ""
        return "same for every run shown: " + ", ".join(f"{k}={v}" for k, v in self.constants)

    def plain_lines(self) -> list[str]:
        lines = ["".join(t for t, _ in self._head())]
        if self._constants_line():
            lines.append(self._constants_line())
        if self.rows:
            lines += render_plain(self.layout, self.rows)
        lines += self.notes
        return lines

    def rich(self) -> "RenderableType":
        from rich.console import Group
        from rich.text import Text

        head = Text()
        for text, style in self._head():
            head.append(text, style=style or None)
        parts: list[Any] = [head]
        if self._constants_line():
            parts.append(Text(self._constants_line(), style="dim"))
        if self.rows:
            parts.append(render_rich(self.layout, self.rows))
        parts += [Text(n, style="dim") for n in self.notes]
        return Group(*parts)


def _axes(rows: Sequence["RunRecord"], meta: Any) -> list[str]:
    """The grid's varied keys of the runs shown, in the grid file's order."""
    order = list(getattr(meta, "axes", []) or [])
    for r in rows:
        order += [k for k in r.axes if k not in order]
    return order


def _short_names(keys: Sequence[str]) -> dict[str, str]:
    return short_names(list(keys))


def experiment_view(exp: "ExperimentStatus", *, width: int | None, now: float, columns: Sequence[str] | None = None,
                    wide: bool = False, limit: int = 0) -> ExperimentView:
    from cemctl.services.status.collect import STATE_PRIORITY

    rows = exp.runs
    if limit and len(rows) > limit:
        order = sorted(range(len(rows)), key=lambda i: (STATE_PRIORITY.get(rows[i]["state"], 9), i))[:limit]
        rows = [rows[i] for i in sorted(order)]
    axes = [a for a in _axes(rows, exp.meta) if any(a in r.axes for r in rows)]
    values = {a: [raw_value(r, a) for r in rows] for a in axes}
    varying = [a for a in axes if len({F.value(v) for v in values[a]}) > 1]
    names = _short_names(axes)
    constants = [(names[a], F.value(values[a][0])) for a in axes if a not in varying and rows]
    scales = {r["scale"] for r in rows}
    ids = short_ids([r["run_id"] for r in rows])
    if columns:
        keys = list(dict.fromkeys(columns))
    else:
        keys = ["run_id", *(["scale"] if len(scales) > 1 else []), *varying,
                *[k for k, _ in DEFAULT_COLUMNS if k != "scale"
                  and (k not in REQUIRED_WIDE or any(r.get(k) is not None for r in rows))]]  # a speed no run has: out
    names = _short_names([k for k in keys if "." in k])
    required = set(REQUIRED) | (set(REQUIRED_WIDE) if width is None or width >= WIDE_AT else set())
    cells = [_cells(r, keys, ids) for r in rows]
    config_keys = [k for k in keys if field_of(k).source == "config"]
    # The grid's axes are the last to go, a key that repeats another (a [[zip]] partner) the first; where the axes
    # do not fit under their names, their headers give way to their last words ('steps'), never another key's name.
    priority = axis_priorities(config_keys, [{k: raw_value(r, k) for k in config_keys} for r in rows],
                               getattr(exp.meta, "axes", ()) or ())
    kept = [k for k in config_keys if priority[k] < REPEAT_PRIORITY]
    if width is not None and not columns and not wide and kept:
        fixed = [Column(k, field_of(k).header if k != "run_id" else "run") for k in keys
                 if k == "run_id" or k in required]
        room = width - line_width([natural_width(c, cells) for c in fixed]) - GAP * len(kept)
        widest = {k: max(len(cells[i][k].text) for i in range(len(cells))) if cells else 0 for k in kept}
        names.update(axis_headers({k: names.get(k, k) for k in kept}, widest, room + GAP * (len(kept) - 1)))
    cols: list[Column] = []
    for key in keys:
        f = field_of(key)
        if key == "run_id":
            cols.append(Column("run_id", "run", required=True))
        elif f.source != "config":
            cols.append(Column(key, f.header, priority=PRIORITY.get(key, 5), align="right" if f.numeric else "left",
                               required=bool(columns) or wide or key in required,
                               shrink_to=12 if key in ("reason", "error", "note") else 0))
        else:  # an axis or any config key
            vals = [raw_value(r, key) for r in rows]
            cols.append(Column(key, names.get(key, key), priority=priority[key], required=bool(columns) or wide,
                               shrink_to=6 if priority[key] < REPEAT_PRIORITY else 0,
                               align="right" if _numeric(vals) else "left"))
    layout = fit(cols, cells, None if wide else width, keep_empty=bool(columns))
    notes = []
    if (note := hidden_note(layout)):
        notes.append(note)
    selected = exp.matching if exp.matching is not None else exp.total
    if exp.matching is not None:
        notes.append(f"{exp.matching} of {exp.total} runs meet {exp.selection}")
    hidden = selected - len(rows)
    if hidden > 0:
        notes.append(f"... {hidden} more run{'s' if hidden != 1 else ''} not shown (use --limit 0 to show all)")
    from cemctl.db.outdated import outdated_note
    from cemctl.records import NO_EXPERIMENT

    if (note := outdated_note(len(exp.outdated), exp.name if exp.name != NO_EXPERIMENT else None)):
        notes.append(note)
    return ExperimentView(printable(exp.name), exp.total, list(exp.counts.items()), constants if not columns else [],
                          layout, cells, notes)


def _numeric(values: Sequence[Any]) -> bool:
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values if v is not None)


def _cells(r: "RunRecord", keys: Sequence[str], ids: dict[str, str]) -> dict[str, Cell]:
    out: dict[str, Cell] = {}
    for key in keys:
        if key == "run_id":
            out[key] = Cell(ids[r["run_id"]], "dim")
        else:
            out[key] = Cell(cell_text(r, key), STATE_STYLES.get(r["state"], "") if key == "state" else "")
    return out


def status_views(statuses: Sequence["ExperimentStatus"], *, width: int | None, now: float,
                 columns: Sequence[str] | None = None, wide: bool = False, limit: int = 0,
                 arms: bool = False) -> list[ExperimentView]:
    if arms:
        return [arms_view(e, width=width) for e in statuses]
    return [experiment_view(e, width=width, now=now, columns=columns, wide=wide, limit=limit) for e in statuses]


def arm_rows(runs: Sequence["RunRecord"], metric: str = "test_loss") -> list[dict[str, Any]]:
    """One dict per arm of the records (first-seen order): arm id and label, runs, finished values of `metric`,
    their mean and s.d., the states."""
    groups: dict[str, list[RunRecord]] = {}
    for r in runs:
        groups.setdefault(r["arm"], []).append(r)
    out = []
    for aid, rs in groups.items():
        vals = [float(r[metric]) for r in rs if r["state"] == "done" and isinstance(r.get(metric), (int, float))
                and math.isfinite(r[metric])]
        mean = sum(vals) / len(vals) if vals else None
        sd = statistics.stdev(vals) if len(vals) > 1 else None
        states: dict[str, int] = {}
        for r in rs:
            states[r["state"]] = states.get(r["state"], 0) + 1
        out.append({"arm": aid, "label": rs[0]["arm_label"], "runs": rs, "values": vals, "mean": mean, "sd": sd,
                    "states": states})
    return out


def arms_view(exp: "ExperimentStatus", *, width: int | None) -> ExperimentView:
    """One row per arm (`cem_core.arms`, with the grid's nuisance keys): the keys that tell the arms apart, seeds
    done / runs, the states, the test loss over the seeds."""
    from cem_core.arms import config_of, varying_keys

    nuisance = exp.meta.nuisance if exp.meta is not None else ("train.seed",)
    order = exp.meta.axes if exp.meta is not None else []
    keys = varying_keys([config_of(r) for r in exp.runs], nuisance, order)
    names = _short_names(keys)
    key_cols = [Column(k, names[k], priority=2, shrink_to=6) for k in keys]
    cols = [*key_cols, Column("seeds", "seeds", align="right", required=True),
            Column("states", "states", required=True, shrink_to=12),
            Column("test", "test (mean \u00b1 s.d.)", align="right", required=True),
            Column("arm", "arm id", priority=8)]
    rows = []
    groups = arm_rows(exp.runs)
    for g in groups:
        first = g["runs"][0]
        rows.append({**{k: Cell(F.value(first.get(k))) for k in keys},
                     "seeds": Cell(f"{len(g['values'])}/{len(g['runs'])}"),
                     "states": Cell(", ".join(f"{n} {st}" for st, n in g["states"].items()),
                                    STATE_STYLES.get(next(iter(g["states"])), "") if len(g["states"]) == 1 else ""),
                     "test": Cell(F.loss(g["mean"]) + (f" \u00b1 {F.loss(g['sd'])}" if g["sd"] is not None else "")),
                     "arm": Cell(g["arm"], "dim")})
    layout = fit(cols, rows, width)
    notes = [n for n in [hidden_note(layout)] if n]
    extra = [k for k in nuisance if k != "train.seed"]
    what = "every config value equal but the seed" + (f" and {', '.join(extra)} (the grid's nuisance keys)"
                                                         if extra else "")
    return ExperimentView(printable(exp.name), exp.total, list(exp.counts.items()), [], layout, rows,
                          notes + [f"{len(groups)} arm{'s' if len(groups) != 1 else ''}: {what}"])
