"""The dashboard's charts as data (JSON the page's vendored uPlot draws): the metric against an axis, training
curves (mean over seeds with a band), a run's curves and system samples, parallel coordinates.

One presentation with the static report: an experiment's charts are computed by the report's own functions
(`cemctl.report.generic`: `metric_points`, `curve_looks`, `arm_curve`; `cemctl.report.build`: `figure_runs`,
`report_palette`), so a series has the report's name, colour, line style and marker, whiskers are the report's
(`cemctl.report.style`: mean +- 1 s.d., hollow for one seed; the 95% interval is an arms-table column), curves are
smoothed as the report smooths them, and the default view is the report's figure (each arm at its chosen learning
rate where the grid holds rate profiles; a learning-rate sweep on a log x). Choosing x, hue, panel or every rate
draws another view with the same rules.

A chart: {"title", "x_label", "y_label", "log_x", "log_y", "x": [...], "ticks": [...] | None, "tick_labels": [...]
| None (a tick at each value the arms have: an integer axis gets no 1.05), "categories": [...] | None, "series":
[{"label", "color", "dash", "marker", "lines", "points", "y", "lo", "hi", "n", "sd", "legend"}]}. Labels are plain
text (the page draws them as text, never as HTML). Runs in flight are read from their folders, so the charts show
what `cemctl status` shows at the same moment.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

from cem_core.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from cemctl.records.record import RunRecord

    from cemctl.report.generic import Palette
    from cemctl.services.dashboard.source import Source
    from cemctl.services.dashboard.tables import Selection

CURVE_METRICS = ("train_loss", "val_loss", "lr", "grad_norm", "tokens_per_s")
CURVE_X = ("tokens", "step", "time_s")
CURVE_POINTS = 400  # points per curve drawn (the union of the arms' x values, thinned evenly)
CURVE_RUNS_PER_ARM = 20  # at most this many seeds of an arm are averaged in a curve (the first ones; said so)
CURVE_MAX_RUNS = 240
RUN_CURVE_POINTS = 2000
FOLDER_POINTS = 20000  # a run in flight read from its metrics.jsonl keeps at most this many points per kind
MAX_HUES = 8  # colours a reader tells apart in one chart; past it the chart splits into panels
SMOOTHING = {"off": 0.0, "report": None, "more": 0.15}  # `smooth=`: None is the report's (style.SMOOTH_FRACTION)
RATES = ("chosen", "all")  # `rates=`: each arm at its chosen learning rate (the report's view), or every rate
CURVE_LABELS = {"train_loss": "training loss", "val_loss": "validation loss", "lr": "learning rate",
                "grad_norm": "gradient norm", "tokens_per_s": "tokens/s", "tokens": "training tokens",
                "step": "step", "time_s": "training time (s)"}


def colors() -> tuple[str, ...]:
    from cemctl.report.style import CYCLE

    return CYCLE


def _dash(line: str | None) -> list[int] | None:
    from cemctl.report.style import DASHES

    return DASHES.get(line or "-")


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _num(v: Any) -> float | None:
    return float(v) if _finite(v) else None


def _clean(values: Any) -> list[float | None]:
    return [float(v) if v is not None and math.isfinite(v) else None for v in values]


def _check(name: str, value: str | None, allowed: Sequence[str], what: str) -> str | None:
    if value in (None, ""):
        return None
    if value not in allowed:
        raise ConfigError(what, f"{value!r} is not one of the choices here", allowed=list(allowed) or ["(none)"])
    return value


def smooth_fraction(smooth: str | None) -> float:
    """`smooth=` as the fraction of a curve's points its rolling mean spans (the report's by default)."""
    from cemctl.report.style import SMOOTH_FRACTION

    key = _check("smooth", smooth or "report", list(SMOOTHING), "smooth") or "report"
    value = SMOOTHING[key]
    return SMOOTH_FRACTION if value is None else value


# ----------------------------------------------------------------------------------------------- the view

@dataclass
class ChartView:
    """What an experiment's metric chart and curves draw: the runs shown (each arm at its chosen rate unless every
    rate is asked for or a chart draws the rate), the report's palette, and the keys on x, colour and panels."""

    shown: "pd.DataFrame"
    palette: "Palette | None"
    x: str | None
    hue: list[str]
    panel: str | None
    metric: str
    keys: list[str]  # the experiment's varying keys (x, hue and panel choices)
    metrics: list[str]
    order: list[str]
    nuisance: tuple[str, ...]
    chosen_rates: bool  # each arm at its chosen learning rate (`cemctl.report.lr_choice`)
    default: bool  # the report's own figure
    done: int  # finished runs with the metric among those shown
    states: dict[str, int]
    records: dict[str, "RunRecord"]  # run id -> its record as its folder shows it now
    db_state: dict[str, str]  # run id -> its state in the database (a run in flight is read from its folder)
    auto_panel: bool = False


def _info(name: str, meta: Any) -> Any:
    from cemctl.grid.spec import ReportOptions, options_from_text
    from cemctl.report.build import ExperimentInfo

    if meta is None:
        return ExperimentInfo(name, "curves", options=ReportOptions())
    return ExperimentInfo(name, meta.figure or "curves", options=options_from_text(meta.grid_text, meta.grid_path),
                          axes=list(meta.axes))


def chart_view(src: "Source", name: str, sel: "Selection", *, metric: str | None = None, x: str | None = None,
               hue: Sequence[str] = (), panel: str | None = None, rates: str | None = None,
               moment: str = "") -> ChartView:
    """The runs and looks of an experiment's charts, as its report draws them unless the URL chooses otherwise
    (the run folders as read at the page's `moment`: `tables.live_experiment`)."""
    from collections import Counter

    from cemctl.records.fields import resolve
    from cemctl.report.arms import has_arms, with_arms
    from cemctl.report.build import figure_runs, report_palette
    from cemctl.report.figures import kind_shown
    from cemctl.report.generic import Palette
    from cemctl.report.lr_choice import rate_choice
    from cemctl.services.dashboard.tables import experiment_axes, frame_of, live_experiment, metric_choices, select

    recs, live = live_experiment(src, name, sel.scale, moment=moment)
    meta = recs.experiments.get(name)
    info = _info(name, meta)
    opts = info.options
    nuisance = tuple(dict.fromkeys(["train.seed", *opts.nuisance]))
    order = list(info.axes)
    keys = [k for k in experiment_axes(src, name, sel.scale) if k not in nuisance]
    metrics = metric_choices(recs.records, meta)
    metric = _check("metric", metric or opts.metric, metrics, "metric") or metrics[0]
    info.options = replace(opts, metric=metric)
    x = resolve(x, keys, what="x") if x else None
    panel = resolve(panel, keys, what="panel") if panel else None
    hue = [resolve(h, keys, what="hue") for h in hue if h]
    for what, key in (("x", x), ("panel", panel), *(("hue", h) for h in hue)):
        if key is not None and key not in keys:
            raise ConfigError(what, f"{key!r} does not vary in this experiment", allowed=keys or ["(no varying key)"])
    rates = _check("rates", rates or "chosen", RATES, "rates") or "chosen"
    chosen_recs = select(live, sel)
    frame_all = frame_of(live)
    frame = frame_of(chosen_recs) if len(chosen_recs) != len(live) else frame_all
    if not has_arms(frame_all):
        frame_all = with_arms(frame_all, nuisance=nuisance, order=order)
        frame = with_arms(frame, nuisance=nuisance, order=order)
    states = dict(Counter(str(s) for s in frame["state"])) if "state" in frame else {}
    default = not (x or hue or panel or rates == "all")
    if default:  # the report's figure: its runs, its palette, its x
        shown, choice = figure_runs(info, frame) if not frame.empty else (frame, None)
        pal = report_palette(info, frame_all, shown if frame is frame_all else None) if not frame_all.empty else None
        x = pal.x if pal is not None else None
        hue = [h for h in opts.hue if h in keys]
    else:
        if not x:  # the report's x (its grid's, its figure kind's, its first numeric axis); every rate: the rate
            from cemctl.report.generic import default_x

            x = "train.lr" if rates == "all" and "train.lr" in keys else \
                (opts.x if opts.x in keys else None) or next((k for k in kind_shown(info.figure) if k in keys), None) \
                or (default_x(frame_all, keys, order) if keys else None)
        drawn = [*kind_shown(info.figure), *(k for k in (x, panel, *hue) if k)]
        choice = rate_choice(frame, metric=metric, drawn=drawn, nuisance=nuisance, order=order) \
            if rates == "chosen" and not frame.empty else None
        shown = frame if choice is None else choice.runs
        whole = rate_choice(frame_all, metric=metric, drawn=drawn, nuisance=nuisance, order=order) \
            if choice is not None else None
        base = frame_all if whole is None else whole.runs
        pal = Palette(base, x=x, hue=hue, order=order, nuisance=nuisance, shown=[panel] if panel else []) \
            if not base.empty else None
        x = x if x else (pal.x if pal is not None else None)
    if pal is not None and not set(shown["arm"]) <= set(pal.hue_of):  # a selection the whole's palette lacks
        pal = Palette(shown, x=x, hue=hue, order=order, nuisance=nuisance, shown=[panel] if panel else [])
    auto = False
    if pal is not None and panel is None and len({pal.hue_of[a] for a in shown["arm"]}) > MAX_HUES:
        panel = _panel_key(shown, pal.hue_keys)  # more colours than one can tell apart: panels by a hue key
        if panel is not None:
            auto = True
            pal = Palette(shown, x=x, hue=[h for h in pal.hue_keys if h != panel], order=order, nuisance=nuisance,
                          shown=[panel])
    done = int((shown["state"].eq("done") & shown[metric].notna()).sum()) if metric in shown and len(shown) else 0
    return ChartView(shown, pal, x, hue, panel, metric, keys, metrics, order, nuisance, choice is not None, default,
                     done, states, {r["run_id"]: r for r in live}, {r["run_id"]: r["state"] for r in recs.records},
                     auto)


def _panel_key(runs: "pd.DataFrame", keys: Sequence[str]) -> str | None:
    """The key to split a chart by when it has too many colours: of the hue keys, the one with the fewest values."""
    counts = {k: runs[k].astype(str).nunique() for k in keys if k in runs}
    counts = {k: n for k, n in counts.items() if n > 1}
    return min(counts, key=lambda k: (counts[k], list(keys).index(k))) if counts else None


# ----------------------------------------------------------------------------------------------- the metric chart

def chart_options(src: "Source", name: str, sel: "Selection") -> dict[str, Any]:
    """The choices of the experiment's charts: varying keys (x, hue, panel), metrics, and the grid's defaults."""
    from cemctl.services.dashboard.tables import experiment_axes, experiment_records, metric_choices, select

    recs = experiment_records(src, name, sel.scale)
    meta = recs.experiments.get(name)
    keys = [k for k in experiment_axes(src, name, sel.scale) if k != "train.seed"]
    return {"keys": keys, "metrics": metric_choices(recs.records, meta), "x": meta.x if meta and meta.x in keys else None,
            "hue": [h for h in (meta.hue if meta else ()) if h in keys], "metric": meta.metric if meta else "test_loss",
            "n": len(select(recs.records, sel)), "lr_axis": "train.lr" in keys}


def metric_chart(src: "Source", name: str, sel: "Selection", *, metric: str | None = None, x: str | None = None,
                 hue: Sequence[str] = (), panel: str | None = None, log_x: bool | None = None,
                 log_y: bool = False, rates: str | None = None, moment: str = "") -> dict[str, Any]:
    """The metric against x as the report's metric figure draws it (`cemctl.report.generic.metric_points`): the mean
    over an arm's finished seeds with whiskers of +-1 s.d. (hollow for a single seed), a colour per hue series, a
    line style (a marker on a categorical x) for what else varies, the series at one x dodged apart; one chart per
    value of `panel`. `log_x` None: the report's rule (a numeric x spanning a factor of 8 or more)."""
    from cemctl.records import formats
    from cemctl.report.generic import metric_points
    from cemctl.report.style import SPREAD_SHORT
    from cemctl.services.dashboard.tables import header

    view = chart_view(src, name, sel, metric=metric, x=x, hue=hue, panel=panel, rates=rates, moment=moment)
    out: dict[str, Any] = {"metric": view.metric, "x": view.x, "hue": view.hue, "panel": view.panel, "keys": view.keys,
           "metrics": view.metrics, "charts": [], "default": view.default, "chosen_rates": view.chosen_rates}
    if not view.done or view.palette is None:
        out["note"] = no_result_note(view.states, view.metric)
        return out
    shown = view.shown
    panels: dict[str, Any] = {"": shown}
    if view.panel:
        panels = {formats.value(v): shown[shown[view.panel].astype(str) == str(v)]
                  for v in dict.fromkeys(shown[view.panel]) if v is not None}
    for ptitle, runs in panels.items():
        pts = metric_points(runs, x=view.x, hue=view.hue or None, metric=view.metric, order=view.order,
                            nuisance=view.nuisance, palette=view.palette)
        if pts is None:
            continue
        out["charts"].append(_metric_json(pts, title=f"{header(view.panel)}={ptitle}" if view.panel else "",
                                          log_x=pts.log if log_x is None else bool(log_x and pts.numeric),
                                          log_y=log_y))
    note = [f"mean over finished seeds; {SPREAD_SHORT}; the 95% t interval is in the arms table"]
    if view.chosen_rates:
        note.append("each arm at its best sampled learning rate by mean validation loss, as the report draws it "
                    "(every rate: the 'rates' choice)")
    if view.auto_panel:
        note.append(f"more than {MAX_HUES} colours: one panel per {header(view.panel or '')}")
    out["note"] = "; ".join(note)
    return out


def _metric_json(pts: Any, *, title: str, log_x: bool, log_y: bool) -> dict[str, Any]:
    from cemctl.report.style import hex_of, n_note

    table = pts.table
    xs = sorted({float(p) for p in table["pos"]})
    index = {p: i for i, p in enumerate(xs)}
    series = []
    for (h, st), look in pts.looks.items():
        sub = table[table["hue"].eq(h) & table["style"].eq(st)]
        y, lo, hi, n, sd = ([None] * len(xs) for _ in range(5))  # type: list[Any], list[Any], list[Any], list[Any], list[Any]
        for row in sub.to_dict("records"):
            i = index[float(row["pos"])]
            mean, std, count = _num(row["mean"]), _num(row["std"]), int(row["n"])
            y[i], n[i], sd[i] = mean, count, std
            if mean is not None and std is not None and count >= 2:
                lo[i], hi[i] = mean - std, mean + std
        series.append({"label": f"{look.label}, {n_note(sub['n'])}", "color": hex_of(look.color),
                       "dash": _dash(look.line), "marker": look.marker, "lines": look.line is not None,
                       "points": True, "whiskers": True, "y": y, "lo": lo, "hi": hi, "n": n, "sd": sd})
    return {"title": title, "x_label": pts.xname, "y_label": pts.ylabel, "log_x": log_x, "log_y": log_y,
            "x": xs, "ticks": pts.ticks, "tick_labels": pts.tick_labels,
            "categories": None if pts.numeric else pts.tick_labels, "series": series}


def no_result_note(states: dict[str, int] | Sequence["RunRecord"], metric: str) -> str:
    """What a chart says instead of drawing nothing: no finished run has the metric yet, and the runs' states."""
    from collections import Counter

    counts = Counter(states) if isinstance(states, dict) else Counter(str(r.get("state")) for r in states)
    said = ", ".join(f"{n} {s}" for s, n in counts.most_common())
    return f"No finished run with a {metric} yet" + (f" ({said})." if said else " (no run meets the selection).")


# ----------------------------------------------------------------------------------------------- curves

def curve_rows(src: "Source", records: Sequence["RunRecord"], metric: str, x: str, *, val: bool = False,
               db_state: dict[str, str] | None = None
               ) -> tuple[dict[str, tuple[Any, Any]], dict[str, list[tuple[Any, Any, Any]]]]:
    """({run id: (x array, y array)} of one curve metric, sorted by x; {run id: [(step, x, validation loss)]} when
    `val`). Runs the database has as ended are read from it (`cemctl.db.frames.metrics_frame`), runs in flight from
    their metrics.jsonl (what `cemctl status` reads): the curves grow while they train."""
    from cemctl.records.live import LIVE_STATES

    state = {r["run_id"]: (db_state or {}).get(r["run_id"], r.get("state")) for r in records}
    db = [r["run_id"] for r in records if state[r["run_id"]] not in LIVE_STATES]
    folder = [r for r in records if state[r["run_id"]] in LIVE_STATES and r.get("run_dir")]
    out, vals = _db_curves(src, db, metric, x, val)
    for r in folder:
        got, got_val = folder_curves(r["run_dir"], metric, x, val=val)
        if got is not None:
            out[r["run_id"]] = got
        if got_val:
            vals[r["run_id"]] = got_val
    return out, vals


def _db_curves(src: "Source", run_ids: Sequence[str], metric: str, x: str, val: bool
               ) -> tuple[dict[str, tuple[Any, Any]], dict[str, list[tuple[Any, Any, Any]]]]:
    import numpy as np

    from cemctl.db.frames import metrics_frame

    kind = "val" if metric == "val_loss" else "train"
    out: dict[str, tuple[Any, Any]] = {}
    vals: dict[str, list[tuple[Any, Any, Any]]] = {}
    ids = list(run_ids)
    for i in range(0, len(ids), 500):
        frame = metrics_frame(src.engine, ids[i:i + 500])
        if frame.empty:
            continue
        rows = frame[frame["kind"] == kind]
        if metric in rows.columns:
            rows = rows[["run_id", x, metric]].dropna()
            for rid, g in rows.groupby("run_id", sort=False):
                xs, ys = g[x].to_numpy(dtype=float), g[metric].to_numpy(dtype=float)
                keep = np.isfinite(xs) & np.isfinite(ys)
                o = np.argsort(xs[keep], kind="stable")
                out[str(rid)] = (xs[keep][o], ys[keep][o])
        if val and "val_loss" in frame.columns:
            v = frame[frame["kind"] == "val"][["run_id", "step", x, "val_loss"]].dropna()
            for rid, g in v.groupby("run_id", sort=False):
                vals[str(rid)] = [t for t in zip(g["step"], g[x].astype(float), g["val_loss"].astype(float))
                                  if math.isfinite(t[1]) and math.isfinite(t[2])]
    return out, vals


def folder_curves(run_dir: Any, metric: str, x: str, *, val: bool = False, points: int = FOLDER_POINTS
                  ) -> tuple[tuple[Any, Any] | None, list[tuple[Any, Any, Any]]]:
    """One curve of a run in flight, from its metrics.jsonl (`cem_core.runfiles`: a regular file inside the run's
    folder), read in chunks and thinned as it is read (every second point dropped whenever `points` are reached),
    so that memory stays bounded whatever the file's size; a garbled or half-written line is skipped."""
    import numpy as np

    from cem_core import runfiles

    kind = "val" if metric == "val_loss" else "train"
    xs: list[float] = []
    ys: list[float] = []
    vals: list[tuple[Any, Any, Any]] = []
    stride, seen = 1, 0
    try:
        f = runfiles.open_run_file(run_dir, runfiles.METRICS_FILE)
    except (OSError, runfiles.RunFileError):
        return None, []
    with f:
        rest = b""
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for line in lines:
                if b'"kind"' not in line:
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(rec, dict):
                    continue
                k = rec.get("kind")
                if val and k == "val" and _finite(rec.get("val_loss")) and _finite(rec.get(x)):
                    vals.append((rec.get("step"), float(rec[x]), float(rec["val_loss"])))
                if k != kind or not (_finite(rec.get(metric)) and _finite(rec.get(x))):
                    continue
                seen += 1
                if seen % stride:
                    continue
                xs.append(float(rec[x]))
                ys.append(float(rec[metric]))
                if len(xs) >= points:
                    xs, ys, stride = xs[::2], ys[::2], stride * 2
            if len(vals) > points:
                vals = vals[::2]
    if not xs:
        return None, vals
    ax, ay = np.asarray(xs), np.asarray(ys)
    o = np.argsort(ax, kind="stable")
    return (ax[o], ay[o]), vals


def curve_groups(src: "Source", groups: Sequence[tuple[str, Any, str | None, Sequence[str]]],
                 records: dict[str, "RunRecord"], *, metric: str, x: str, log_x: bool = False,
                 log_y: bool = False, smooth: str | None = None, title: str = "",
                 db_state: dict[str, str] | None = None, y_label: str | None = None) -> dict[str, Any]:
    """One chart: per group (label, colour, line style, run ids) the mean of its runs' curves (each smoothed as the
    report smooths, `cemctl.report.generic.arm_curve`) with a band from the lowest to the highest run, and the
    validation losses as points in the group's colour (training loss)."""
    import numpy as np

    from cemctl.report.generic import arm_curve
    from cemctl.report.style import hex_of

    metric = _check("curve metric", metric, CURVE_METRICS, "curve metric") or "train_loss"
    x = _check("curve x", x, CURVE_X, "curve x") or "tokens"
    fraction = smooth_fraction(smooth) if metric != "val_loss" else 0.0
    capped = []
    wanted: list[str] = []
    for label, _, _, ids in groups:
        ids = list(ids)
        if len(ids) > CURVE_RUNS_PER_ARM:
            capped.append(f"{label}: {CURVE_RUNS_PER_ARM} of {len(ids)} runs")
        wanted += ids[:CURVE_RUNS_PER_ARM]
    if len(wanted) > CURVE_MAX_RUNS:
        capped.append(f"the first {CURVE_MAX_RUNS} of {len(wanted)} runs")
        wanted = wanted[:CURVE_MAX_RUNS]
    keep = set(wanted)
    rows, vals = curve_rows(src, [records[r] for r in wanted if r in records], metric, x,
                            val=metric == "train_loss", db_state=db_state)
    curves = []
    for label, color, line, ids in groups:
        mine = [r for r in ids if r in keep]
        curve = arm_curve([rows[r] for r in mine if r in rows and len(rows[r][0])], fraction=fraction,
                          val=[t for r in mine for t in vals.get(r, [])])
        if curve is not None or any(vals.get(r) for r in mine):
            curves.append((label, color, line, curve))
    drawn = [c for c in curves if c[3] is not None]
    grid = np.unique(np.concatenate([c[3].x for c in drawn if c[3] is not None])) if drawn else np.array([])
    if len(grid) > CURVE_POINTS:
        grid = grid[np.linspace(0, len(grid) - 1, CURVE_POINTS).round().astype(int)]
    val_x = [c[3].val_x for c in curves if c[3] is not None and c[3].val_x is not None]
    allx = np.unique(np.concatenate([grid, *val_x])) if val_x else grid
    series = []
    for label, color, line, curve in curves:
        if curve is None:
            continue

        def on(values: Any) -> list[float | None]:
            return _clean(np.interp(allx, curve.x, values, left=np.nan, right=np.nan)) if len(curve.x) > 1 else \
                _clean(np.where(allx == curve.x[0], values[0], np.nan))
        series.append({"label": f"{label}, n={curve.runs}", "color": hex_of(color), "dash": _dash(line),
                       "marker": "o", "y": on(curve.mean), "lo": on(curve.low) if curve.low is not None else None,
                       "hi": on(curve.high) if curve.high is not None else None, "points": metric == "val_loss",
                       "lines": True, "whiskers": False})
        if curve.val_x is not None and len(curve.val_x):
            y: list[float | None] = [None] * len(allx)
            pos = {float(v): i for i, v in enumerate(allx)}
            for vx, vy in zip(curve.val_x, curve.val_y):
                if float(vx) in pos and math.isfinite(vy):
                    y[pos[float(vx)]] = float(vy)
            series.append({"label": f"{label}: validation loss", "color": hex_of(color), "dash": None,
                           "marker": "o", "y": y, "lo": None, "hi": None, "points": True, "lines": False,
                           "whiskers": False, "legend": False, "outline": True})
    chart = {"title": title, "x_label": CURVE_LABELS[x], "y_label": y_label or CURVE_LABELS[metric], "log_x": bool(log_x),
             "log_y": bool(log_y), "categories": None, "ticks": None, "tick_labels": None, "x": _clean(allx),
             "series": series}
    if any(s.get("legend") is False for s in series):
        chart["extra_legend"] = [{"label": "validation loss (mean over seeds)", "marker": "o", "outline": True,
                                  "color": "#666666"}]
    from cemctl.report.style import SMOOTH_FRACTION

    note = "mean over seeds (line) and the band from the lowest to the highest seed"
    if fraction:
        note += (f"; each seed smoothed by a rolling mean over {fraction:.0%} of its points" +
                 (" (the report's)" if fraction == SMOOTH_FRACTION else ""))
    if capped:
        note += "; averaged over the first seeds only: " + "; ".join(capped)
    return {"charts": [chart] if series else [], "metric": metric, "x": x, "note": note,
            "metrics": list(CURVE_METRICS), "xs": list(CURVE_X)}


def experiment_curves(src: "Source", name: str, sel: "Selection", *, metric: str = "train_loss", x: str = "tokens",
                      chart_x: str | None = None, hue: Sequence[str] = (), panel: str | None = None,
                      rates: str | None = None, log_x: bool = False, log_y: bool = False,
                      smooth: str | None = None, moment: str = "") -> dict[str, Any]:
    """The training curves of the arms the metric chart shows, as the report's curves draw them
    (`cemctl.report.generic.curve_looks`: the arm's hue colour, a line style for what else tells one colour's arms
    apart, one colour per arm when the hue does not vary), each arm at its chosen rate in the report's view."""
    from cemctl.report.generic import curve_looks

    view = chart_view(src, name, sel, x=chart_x, hue=hue, panel=panel, rates=rates, moment=moment)
    smooth_fraction(smooth)  # a bad value is a 400 before any work
    if view.palette is None or view.shown.empty:
        return {"charts": [], "metric": metric, "x": x, "note": no_result_note(view.states, metric),
                "metrics": list(CURVE_METRICS), "xs": list(CURVE_X)}
    shown = view.shown
    arms = list(dict.fromkeys(shown["arm"]))
    looks, _ = curve_looks(view.palette, arms)
    groups = [(looks[a].label, looks[a].color, looks[a].line, list(shown.loc[shown["arm"] == a, "run_id"]))
              for a in arms]
    from cemctl.report.generic import metric_label

    out = curve_groups(src, groups, view.records, metric=metric, x=x, log_x=log_x, log_y=log_y, smooth=smooth,
                       db_state=view.db_state,
                       y_label=metric_label(metric, shown) if metric in ("train_loss", "val_loss") else None)
    if view.chosen_rates:
        out["note"] += "; each arm at its chosen learning rate, as in the report"
    if not out["charts"]:
        out["note"] = f"No training curves recorded yet ({', '.join(f'{n} {s}' for s, n in view.states.items())})."
    return out


# ----------------------------------------------------------------------------------------------- a run

def run_curves(src: "Source", run_id: str, *, x: str = "step", log_y: bool = False) -> dict[str, Any]:
    """A run's curves: losses (training as a line, validation as points), learning rate, gradient norm, speed; a run
    in flight from its folder."""
    import numpy as np

    from cemctl.records import load_records

    x = _check("curve x", x, CURVE_X, "curve x") or "step"
    recs = load_records(src.engine, None, run_ids=[run_id], runs_root=src.runs_root, arms=False)
    if not recs.records:
        return {"charts": [], "x": x, "xs": list(CURVE_X), "note": "no such run"}
    rec = recs.records[0]
    palette = colors()
    panels = [("loss", [("train_loss", False), ("val_loss", True)], log_y), ("learning rate", [("lr", False)], False),
              ("gradient norm", [("grad_norm", False)], False), ("tokens/s", [("tokens_per_s", False)], False)]
    charts = []
    thinned = False
    for title, metrics, logy in panels:
        parts = []
        for metric, points in metrics:
            rows, _ = curve_rows(src, [rec], metric, x)
            if run_id in rows and len(rows[run_id][0]):
                xs, ys = rows[run_id]
                if len(xs) > RUN_CURVE_POINTS:
                    idx = np.linspace(0, len(xs) - 1, RUN_CURVE_POINTS).round().astype(int)
                    xs, ys, thinned = xs[idx], ys[idx], True
                parts.append((metric, points, xs, ys))
        if not parts:
            continue
        grid = np.unique(np.concatenate([p[2] for p in parts]))
        series = []
        for j, (metric, points, xs, ys) in enumerate(parts):
            y = np.full(len(grid), np.nan)
            y[np.searchsorted(grid, xs)] = ys
            series.append({"label": CURVE_LABELS[metric], "color": palette[j % len(palette)], "dash": None,
                           "marker": "o", "y": _clean(y), "lo": None, "hi": None, "points": points,
                           "lines": not points, "whiskers": False})
        charts.append({"title": title, "x_label": CURVE_LABELS[x], "y_label": title, "log_x": False,
                       "log_y": bool(logy), "categories": None, "ticks": None, "tick_labels": None,
                       "x": _clean(grid), "series": series})
    note = f"thinned evenly to {RUN_CURVE_POINTS} points per curve" if thinned else ""
    if not charts:
        note = "no metrics recorded yet"
    return {"charts": charts, "x": x, "xs": list(CURVE_X), "note": note}


# CPU: the process's share is per core (a process on 2 cores reaches 200%), the machine's of all its cores (at
# most 100%): two panels, never one axis.
SYSTEM_PANELS = (("CPU, this process (% of one core)", (("cpu_process_pct", "this process"),), 1.0),
                 ("CPU, the machine (% of all its cores)", (("cpu_machine_pct", "the machine"),), 1.0),
                 ("host memory (GiB)", (("rss_bytes", "resident (process)"),
                                        ("host_mem_available_bytes", "available (machine)")), 2.0 ** -30),
                 ("GPU utilisation (%)", (("gpu_util_pct", "GPU"),), 1.0),
                 ("GPU memory (GiB)", (("gpu_mem_allocated_bytes", "allocated (torch)"),
                                       ("gpu_mem_reserved_bytes", "reserved (torch)"),
                                       ("gpu_mem_used_bytes", "used (device)")), 2.0 ** -30))


def system_charts(src: "Source", run_id: str) -> dict[str, Any]:
    """The run's system samples (`cemctl.db.environment.system_frame`) against the training time, per attempt."""
    from cemctl.db.environment import system_frame

    frame = system_frame(src.engine, [run_id])
    if frame.empty:
        return {"charts": [], "note": "no system samples (a run trained before they were recorded, or "
                                      "train.system_every_s = 0)"}
    palette = colors()
    frame = frame.sort_values(["attempt", "sample"], kind="stable")
    xs = frame["time_s"].astype(float).tolist()
    charts = []
    for title, cols, scale in SYSTEM_PANELS:
        series = []
        for j, (col, label) in enumerate(cols):
            if col not in frame.columns or frame[col].isna().all():
                continue
            series.append({"label": label, "color": palette[j % len(palette)], "dash": None, "marker": "o",
                           "y": [None if not _finite(v) else float(v) * scale for v in frame[col]], "lo": None,
                           "hi": None, "points": True, "lines": True, "whiskers": False})
        if series:
            charts.append({"title": title, "x_label": "training time (s)", "y_label": title, "log_x": False,
                           "log_y": False, "categories": None, "ticks": None, "tick_labels": None,
                           "x": [x if _finite(x) else None for x in xs], "series": series})
    attempts = frame["attempt"].dropna().nunique()
    return {"charts": charts, "note": f"{len(frame)} samples" + (f" over {attempts} attempts" if attempts > 1 else "")}


# ----------------------------------------------------------------------------------------------- compare

def compare_curves(src: "Source", items: Sequence[str], *, experiment: str | None = None, where: Sequence[str] = (),
                   metric: str = "train_loss", x: str = "tokens", log_x: bool = False, log_y: bool = False,
                   smooth: str | None = None) -> dict[str, Any]:
    """Each compared item's curve overlaid (an arm: the mean over its seeds with a band), one colour per item as
    `cemctl compare --curves` draws them."""
    from cemctl.services.compare import compare

    cmp = compare(src.url, src.runs_root, list(items), experiment=experiment, where=list(where) or None)
    palette = colors()
    records = {r["run_id"]: r for i in cmp.items for r in i.runs}
    groups = [(i.text if i.kind == "run" else i.name, palette[j % len(palette)], None, i.run_ids)
              for j, i in enumerate(cmp.items)]
    return curve_groups(src, groups, records, metric=metric, x=x, log_x=log_x, log_y=log_y, smooth=smooth)


# ----------------------------------------------------------------------------------------------- parallel coordinates

def parallel(src: "Source", name: str, sel: "Selection", *, metric: str | None = None) -> dict[str, Any]:
    """Parallel coordinates: one axis per varying key of the experiment (numbers on a linear or log scale, other
    values as categories) and the metric; one line per run meeting the selection that has the metric. A numeric
    axis lists the values its runs take (`ticks`: every one up to 12, else evenly chosen ones)."""
    from cemctl.records import formats
    from cemctl.services.dashboard.tables import experiment_axes, header, live_experiment, metric_choices, select

    recs, live = live_experiment(src, name, sel.scale)
    meta = recs.experiments.get(name)
    chosen = select(live, sel)
    keys = [k for k in experiment_axes(src, name, sel.scale) if k != "train.seed"]
    metrics = metric_choices(recs.records, meta)
    metric = _check("metric", metric or (meta.metric if meta else None), metrics, "metric") or metrics[0]
    rows = [r for r in chosen if _finite(r.get(metric))]
    axes: list[dict[str, Any]] = []
    for k in keys:
        vals: list[Any] = [r.get(k) for r in rows]
        numeric = bool(vals) and all(_finite(v) for v in vals)
        if numeric:
            positive = all(v > 0 for v in vals)
            spread = max(vals) / min(vals) if positive and min(vals) > 0 else 1.0
            distinct = sorted(set(float(v) for v in vals))
            ticks = distinct if len(distinct) <= 12 else \
                [distinct[round(i * (len(distinct) - 1) / 6)] for i in range(7)]
            axes.append({"key": k, "label": header(k), "categorical": False, "log": positive and spread >= 20,
                         "categories": None, "ticks": ticks, "tick_labels": [formats.value(v) for v in ticks]})
        else:
            cats = sorted(dict.fromkeys(formats.value(v) for v in vals), key=str)
            axes.append({"key": k, "label": header(k), "categorical": True, "log": False, "categories": cats,
                         "ticks": None, "tick_labels": None})
    axes.append({"key": metric, "label": header(metric), "categorical": False, "log": False, "categories": None,
                 "ticks": None, "tick_labels": None})
    lines = []
    for r in rows:
        values = []
        for a in axes:
            v = r.get(a["key"])
            values.append(a["categories"].index(formats.value(v)) if a["categorical"] else
                          float(v if v is not None else math.nan))
        lines.append({"run": r["run_id"], "label": r.get("arm_label") or "", "values": values})
    without = len(chosen) - len(lines)
    return {"axes": axes, "lines": lines, "metric": metric, "metrics": metrics, "keys": keys,
            "note": f"{len(lines)} runs with a {metric}" + (f" ({without} without)" if without else "")}
