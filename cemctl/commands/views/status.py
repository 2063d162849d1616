"""The status table (`cemctl status`): one table per experiment that fits the terminal.

    views = status_view(statuses, width=80, now=time.time())   # -> [ExperimentView]
    for v in views: print(*v.plain_lines(), sep="\\n")           # or v.rich() on a terminal

What a row shows, by importance: the run id (short), the axes that vary within the
runs shown (the constant ones go in a header line), the state, the progress, the
test loss, elapsed time / ETA, the reason when there is one, then the training and
validation losses, tokens/s (a finished run: its average, tokens over wall time),
the job and the attempts. At any width state, progress and test loss are shown in
full; from 120 columns on the losses and tokens/s too; the rest as room allows (the
columns left out are named under the table). `columns=[...]` shows exactly those;
`wide=True` every column; `width=None` a plain aligned table with every default column.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from cem_core.errors import ConfigError
from cem_core.names import printable
from cemctl.commands.views import formats as F
from cemctl.commands.views.table import Cell, Column, Layout, fit, hidden_note, render_plain, render_rich

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import RenderableType

    from cemctl.services.status import ExperimentStatus, RunRow

STATE_STYLES = {
    "planned": "dim", "queued": "cyan", "running": "bold blue", "done": "green", "diverged": "magenta",
    "failed": "bold red", "stale": "yellow", "cancelled": "dim", "damaged": "bold red", "interrupted": "yellow",
}
WIDE_AT = 120  # from this width on, the losses and tokens/s are always shown
ID_WIDTH = 8  # run ids are shown by their first 8 characters (longer only when that is ambiguous)


def _avg_rate(r: "RunRow") -> float | None:
    """A finished run's average tokens/s (tokens over wall time); a running one's current rate."""
    if r.state == "done" and r.result_tokens and r.wall_time_s:
        return r.result_tokens / r.wall_time_s
    return r.tokens_per_s


# key -> (header, align, priority, raw value, formatted text)
_FIELDS: dict[str, tuple[str, str, int, Callable[["RunRow", float], Any], Callable[[Any], str]]] = {
    "scale": ("scale", "left", 1, lambda r, now: r.scale, F.value),
    "state": ("state", "left", 0, lambda r, now: r.state, F.value),
    "progress": ("progress", "right", 0, lambda r, now: (r.step, r.total_steps, r.state == "done"), lambda v: F.progress(*v)),
    "train": ("train", "right", 6, lambda r, now: r.train_loss, F.loss),
    "val": ("val", "right", 6, lambda r, now: r.val_loss, F.loss),
    "test": ("test", "right", 0, lambda r, now: r.test_loss, F.loss),
    "ppl": ("test ppl", "right", 7, lambda r, now: r.test_ppl, F.ppl),
    "tok/s": ("tok/s", "right", 6, lambda r, now: _avg_rate(r), F.rate),
    "elapsed": ("elapsed", "right", 3, lambda r, now: r.elapsed_s(now), F.duration),
    "eta": ("ETA", "right", 3, lambda r, now: r.eta_s(), F.duration),
    "job": ("job", "left", 8, lambda r, now: f"{r.executor}:{r.job_id}" if r.executor and r.job_id else r.executor, F.value),
    "attempts": ("att", "right", 8, lambda r, now: r.attempts or None, F.value),
    "reason": ("reason", "left", 4, lambda r, now: r.error_line or None, F.value),
}
# Default display order (axes go after "run"/"scale"); "ppl" only on request.
DEFAULT_ORDER = ("scale", "state", "progress", "train", "val", "test", "tok/s", "elapsed", "eta", "job", "attempts",
                 "reason")
REQUIRED = ("state", "progress", "test")
REQUIRED_WIDE = ("train", "val", "tok/s")
ALIASES = {"tokens_per_s": "tok/s", "tok_s": "tok/s", "att": "attempts", "error": "reason", "id": "run",
           "run_id": "run", "test_loss": "test", "train_loss": "train", "val_loss": "val", "test_ppl": "ppl"}


def column_names() -> list[str]:
    return ["run", *DEFAULT_ORDER[:5], "test", "ppl", *DEFAULT_ORDER[6:]]


def short_names(keys: Sequence[str]) -> dict[str, str]:
    """Dotted config keys -> their last part where that is unique among `keys` (model.attn_steps -> attn_steps)."""
    tails = [k.split(".")[-1] for k in keys]
    return {k: (t if tails.count(t) == 1 else k) for k, t in zip(keys, tails)}


def resolve_column(name: str, axes: Sequence[str], *, config_keys: Sequence[str] = ()) -> str:
    """The key of a --columns / --sort name: a status column, an axis (dotted or its unique short name) or
    any config key; anything else is a ConfigError listing the allowed names."""
    name = ALIASES.get(name, name)
    if name in _FIELDS or name == "run":
        return name
    if name.startswith("tag."):
        from cem_core.runfiles.tags import TAG_NAME

        if TAG_NAME.match(name[4:]):
            return name
    candidates = list(dict.fromkeys([*axes, *config_keys]))
    if name in candidates:
        return name
    matches = [k for k in candidates if k.split(".")[-1] == name]
    if len(matches) == 1:
        return matches[0]
    allowed = column_names() + [short_names(list(axes)).get(a, a) for a in axes] + ["tag.NAME",
                                                                                   "any config key (model.*, train.*, ...)"]
    raise ConfigError("--columns", f"unknown column {name!r}" + (f" (ambiguous: {', '.join(matches)})" if matches else ""),
                      allowed=allowed)


def short_ids(run_ids: Sequence[str]) -> dict[str, str]:
    """The first ID_WIDTH characters of each id, more where two shown ids would look alike."""
    n = ID_WIDTH
    while n < 64 and len({rid[:n] for rid in run_ids}) < len(set(run_ids)):
        n += 2
    return {rid: rid[:n] for rid in run_ids}


def raw_value(r: "RunRow", key: str, now: float) -> Any:
    if key == "run":
        return r.run_id
    if key in _FIELDS:
        return _FIELDS[key][3](r, now)
    if key.startswith("tag."):
        return (r.tags or {}).get(key[4:])
    if key in r.axes:
        return r.axes[key]
    return (r.config or {}).get(key)


def sort_rows(rows: list["RunRow"], key: str, now: float, *, descending: bool = False) -> list["RunRow"]:
    """Rows ordered by a column's value (numbers as numbers, then text); missing values last either way;
    ties keep grid order."""
    def value(r: "RunRow") -> Any:
        v = raw_value(r, key, now)
        if key == "progress":
            step, total, done = v
            v = 1.0 if done else (step / total if step is not None and total else None)
        return v

    pairs = [(value(r), r) for r in rows]
    numbers = [(v, r) for v, r in pairs if isinstance(v, (int, float)) and not isinstance(v, bool)]
    texts = [(str(v), r) for v, r in pairs if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool))]
    numbers.sort(key=lambda p: p[0], reverse=descending)
    texts.sort(key=lambda p: p[0], reverse=descending)
    return [r for _, r in numbers] + [r for _, r in texts] + [r for v, r in pairs if v is None]


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


def experiment_view(exp: "ExperimentStatus", *, width: int | None, now: float, columns: Sequence[str] | None = None,
                    wide: bool = False, limit: int = 0) -> ExperimentView:
    from cemctl.services.status.collect import STATE_PRIORITY

    rows = exp.runs
    if limit and len(rows) > limit:
        order = sorted(range(len(rows)), key=lambda i: (STATE_PRIORITY.get(rows[i].state, 9), i))[:limit]
        rows = [rows[i] for i in sorted(order)]
    axes: list[str] = []
    for r in rows:
        axes += [k for k in r.axes if k not in axes]
    values = {a: [r.axes.get(a) for r in rows] for a in axes}
    varying = [a for a in axes if len({F.value(v) for v in values[a]}) > 1]
    constants = [(short_names(axes)[a], F.value(values[a][0])) for a in axes if a not in varying and rows]
    scales = {r.scale for r in rows}
    ids = short_ids([r.run_id for r in rows])
    if columns:
        keys = list(dict.fromkeys(columns))
    else:
        keys = ["run", *(["scale"] if len(scales) > 1 else []), *varying,
                *[k for k in DEFAULT_ORDER if k != "scale"]]
    names = short_names([k for k in keys if "." in k])
    required = set(REQUIRED) | (set(REQUIRED_WIDE) if width is None or width >= WIDE_AT else set())
    cols: list[Column] = []
    for i, key in enumerate(keys):
        if key == "run":
            cols.append(Column("run", "run", required=True))
        elif key in _FIELDS:
            header, align, prio, _, _ = _FIELDS[key]
            cols.append(Column(key, header, priority=prio, align=align,
                               required=bool(columns) or wide or key in required, shrink_to=12 if key == "reason" else 0))
        else:  # an axis or any config key
            cols.append(Column(key, names.get(key, key), priority=2, required=bool(columns) or wide,
                               shrink_to=6, align="right" if _numeric(values.get(key, [])) else "left"))
    cells = [_cells(r, keys, ids, now) for r in rows]
    layout = fit(cols, cells, None if wide else width, keep_empty=bool(columns))
    notes = []
    if (note := hidden_note(layout)):
        notes.append(note)
    selected = exp.matching if exp.matching is not None else exp.total
    if exp.matching is not None:
        notes.append(f"{exp.matching} of {exp.total} runs meet {exp.selection}")
    hidden = selected - len(rows)
    if hidden > 0:
        notes.append(f"... {hidden} more runs not shown (use --limit 0 to show all)")
    from cemctl.db.outdated import outdated_note
    from cemctl.services.status.collect import NO_EXPERIMENT

    if (note := outdated_note(len(exp.outdated), exp.name if exp.name != NO_EXPERIMENT else None)):
        notes.append(note)
    return ExperimentView(printable(exp.name), exp.total, list(exp.counts.items()), constants if not columns else [],
                          layout, cells, notes)


def _numeric(values: Sequence[Any]) -> bool:
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values if v is not None)


def _cells(r: "RunRow", keys: Sequence[str], ids: dict[str, str], now: float) -> dict[str, Cell]:
    out: dict[str, Cell] = {}
    for key in keys:
        if key == "run":
            out[key] = Cell(ids[r.run_id], "dim")
        elif key in _FIELDS:
            text = _FIELDS[key][4](_FIELDS[key][3](r, now))
            out[key] = Cell(printable(text), STATE_STYLES.get(r.state, "") if key == "state" else "")
        else:
            out[key] = Cell(F.value(raw_value(r, key, now)))
    return out


def status_views(statuses: Sequence["ExperimentStatus"], *, width: int | None, now: float,
                 columns: Sequence[str] | None = None, wide: bool = False, limit: int = 0,
                 arms: bool = False) -> list[ExperimentView]:
    if arms:
        return [arms_view(e, width=width) for e in statuses]
    return [experiment_view(e, width=width, now=now, columns=columns, wide=wide, limit=limit) for e in statuses]


def run_record(r: "RunRow") -> dict[str, Any]:
    """What `--where` sees of a status row: its config (or its axes), state, id, scale, results, tags."""
    rec: dict[str, Any] = dict(r.config or r.axes)
    rec.update({"run_id": r.run_id, "state": r.state, "scale": r.scale, "test_loss": r.test_loss,
                "test_ppl": r.test_ppl, "val_loss": r.val_loss, "tokens": r.tokens, "tokens_per_s": _avg_rate(r)})
    rec.update({f"tag.{k}": v for k, v in (getattr(r, "tags", None) or {}).items()})
    return rec


def arms_view(exp: "ExperimentStatus", *, width: int | None) -> ExperimentView:
    """One row per arm (`cem_core.arms`): its label, seeds done / runs, the states, the test loss over the seeds."""
    import math

    from cem_core.arms import ArmLabels, arm_id, short_names as arm_short_names

    configs = {r.run_id: (r.config or {}) for r in exp.runs}
    axes: list[str] = []
    for r in exp.runs:
        axes += [k for k in r.axes if k not in axes]
    labels = ArmLabels.of(list(configs.values()), order=axes)
    groups: dict[str, list["RunRow"]] = {}
    for r in exp.runs:
        groups.setdefault(arm_id(configs[r.run_id]), []).append(r)
    names = arm_short_names(list(labels.keys))
    key_cols = [Column(k, names[k], priority=2, shrink_to=6) for k in labels.keys]
    cols = [*key_cols, Column("seeds", "seeds", align="right", required=True),
            Column("states", "states", required=True, shrink_to=12),
            Column("test", "test (mean \u00b1 s.d.)", align="right", required=True),
            Column("arm", "arm id", priority=8)]
    rows = []
    for aid, runs in groups.items():
        losses = [r.test_loss for r in runs if r.state == "done" and r.test_loss is not None]
        mean = sum(losses) / len(losses) if losses else None
        sd = math.sqrt(sum((x - mean) ** 2 for x in losses) / (len(losses) - 1)) if len(losses) > 1 else None
        states: dict[str, int] = {}
        for r in runs:
            states[r.state] = states.get(r.state, 0) + 1
        first = configs[runs[0].run_id]
        rows.append({**{k: Cell(F.value(first.get(k))) for k in labels.keys},
                     "seeds": Cell(f"{len(losses)}/{len(runs)}"),
                     "states": Cell(", ".join(f"{n} {st}" for st, n in states.items()),
                                    STATE_STYLES.get(next(iter(states)), "") if len(states) == 1 else ""),
                     "test": Cell(F.loss(mean) + (f" \u00b1 {F.loss(sd)}" if sd is not None else "")),
                     "arm": Cell(aid, "dim")})
    layout = fit(cols or [Column("seeds", "seeds", required=True)], rows, width)
    notes = [n for n in [hidden_note(layout)] if n]
    return ExperimentView(printable(exp.name), exp.total, list(exp.counts.items()), [], layout, rows,
                          notes + [f"{len(groups)} arms: every config value equal but the seed"])
