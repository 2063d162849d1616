"""The dashboard's charts as data (JSON the page's vendored uPlot draws): the metric against an axis, training
curves (mean over seeds with a band), a run's curves and system samples, parallel coordinates.

A chart: {"title", "x_label", "y_label", "log_x", "log_y", "categories" (x values' names when x is
categorical, the x values then being their positions), "x": [...], "series": [{"label", "color",
"dash", "y", "lo", "hi", "n", "points", "whiskers"}]}. Series are named by
`cemctl.records.labels.series_names` (the fewest keys that tell them apart) and coloured by their hue
series, the same colour for the same value in the metric chart and the curves (a stable colour per hue
value, as `cemctl.report.generic.Palette` does for the static report); what else varies within one colour
is told apart by the dash pattern. Labels are plain text (the page draws them as text, never as HTML).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

from cem_core.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from cemctl.services.dashboard.source import Source
    from cemctl.services.dashboard.tables import Selection

CURVE_METRICS = ("train_loss", "val_loss", "lr", "grad_norm", "tokens_per_s")
CURVE_X = ("tokens", "step", "time_s")
CURVE_POINTS = 400  # points per curve drawn (the union of the runs' x values, thinned evenly)
CURVE_RUNS_PER_ARM = 20  # at most this many seeds of an arm are averaged in a curve (the first ones; said so)
CURVE_MAX_RUNS = 240
RUN_CURVE_POINTS = 2000
DASHES: tuple[list[int] | None, ...] = (None, [6, 4], [2, 3], [8, 3, 2, 3], [12, 6])
CURVE_LABELS = {"train_loss": "training loss", "val_loss": "validation loss", "lr": "learning rate",
                "grad_norm": "gradient norm", "tokens_per_s": "tokens/s", "tokens": "tokens", "step": "step",
                "time_s": "time (s)"}


def colors() -> tuple[str, ...]:
    from cemctl.report.style import CYCLE

    return CYCLE


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _num(v: Any) -> float | None:
    return float(v) if _finite(v) else None


def _check(name: str, value: str | None, allowed: Sequence[str], what: str) -> str | None:
    if value in (None, ""):
        return None
    if value not in allowed:
        raise ConfigError(what, f"{value!r} is not one of the choices here", allowed=list(allowed) or ["(none)"])
    return value


# ----------------------------------------------------------------------------------------------- hue and series

class Styles:
    """Series names, colours and dashes of arms (grid order): one series per arm up to `shown` keys."""

    def __init__(self, configs: Sequence[dict[str, Any]], *, shown: Sequence[str], hue: Sequence[str],
                 keys: Sequence[str], nuisance: Sequence[str], order: Sequence[str]) -> None:
        from cemctl.records.labels import series_names

        self.names = series_names(configs, shown=shown, nuisance=nuisance, order=order) if configs else []
        hue = [k for k in hue if k in keys and k not in shown]
        if hue:
            rest = [k for k in keys if k not in hue and k not in shown]
            hue_names = series_names(configs, shown=[*shown, *rest], nuisance=nuisance, order=order)
        else:
            hue_names = list(self.names)
        palette = colors()
        order_of = list(dict.fromkeys(hue_names))
        self.color = [palette[order_of.index(h) % len(palette)] for h in hue_names]
        seen: dict[str, list[str]] = {}
        self.dash: list[list[int] | None] = []
        for h, n in zip(hue_names, self.names):
            group = seen.setdefault(h, [])
            if n not in group:
                group.append(n)
            self.dash.append(DASHES[group.index(n) % len(DASHES)])
        self.hue_names = hue_names


def _arms(records: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    arms: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        arms.setdefault(r.get("arm") or r["run_id"], []).append(r)
    return arms


# ----------------------------------------------------------------------------------------------- the metric chart

def chart_options(src: "Source", name: str, sel: "Selection") -> dict[str, Any]:
    """The choices of the experiment's charts: varying keys (x, hue, panel), metrics, and the grid's defaults."""
    from cemctl.services.dashboard.tables import experiment_axes, experiment_records, metric_choices, select

    recs = experiment_records(src, name, sel.scale)
    meta = recs.experiments.get(name)
    chosen = select(recs.records, sel)
    keys = [k for k in experiment_axes(src, name, sel.scale) if k != "train.seed"]
    return {"keys": keys, "metrics": metric_choices(recs.records, meta), "x": meta.x if meta and meta.x in keys else None,
            "hue": [h for h in (meta.hue if meta else ()) if h in keys], "metric": meta.metric if meta else "test_loss",
            "n": len(chosen)}


def metric_chart(src: "Source", name: str, sel: "Selection", *, metric: str | None = None, x: str | None = None,
                 hue: Sequence[str] = (), panel: str | None = None, log_x: bool = False,
                 log_y: bool = False) -> dict[str, Any]:
    """The metric (mean over finished seeds, 95% t interval as whiskers) against `x`, one series per combination
    of the other varying keys, one chart per value of `panel`."""
    from cem_core.arms import config_of
    from cemctl.records.fields import resolve
    from cemctl.report.arms import t_interval
    from cemctl.services.dashboard.tables import experiment_axes, experiment_records, header, metric_choices, select

    recs = experiment_records(src, name, sel.scale)
    meta = recs.experiments.get(name)
    nuisance = meta.nuisance if meta else ("train.seed",)
    order = meta.axes if meta else []
    chosen = select(recs.records, sel)
    keys = [k for k in experiment_axes(src, name, sel.scale) if k not in nuisance]
    metrics = metric_choices(recs.records, meta)
    metric = _check("metric", metric or (meta.metric if meta else None) or "test_loss", metrics, "metric") or metrics[0]
    x = resolve(x, keys, what="x") if x else None
    panel = resolve(panel, keys, what="panel") if panel else None
    hue = [resolve(h, keys, what="hue") for h in hue if h]
    for what, key in (("x", x), ("panel", panel), *(("hue", h) for h in hue)):
        if key is not None and key not in keys:
            raise ConfigError(what, f"{key!r} does not vary in this experiment", allowed=keys or ["(no varying key)"])
    if x is None:
        x = default_chart_x(meta, chosen, keys)
    if not hue and meta:
        hue = [h for h in meta.hue if h in keys and h not in (x, panel)]
    arms = _arms(chosen)
    firsts = [runs[0] for runs in arms.values()]
    configs = [config_of(r) for r in firsts]
    shown = [k for k in (x, panel) if k]
    styles = Styles(configs, shown=shown, hue=hue, keys=keys, nuisance=nuisance, order=order)
    xs_all = [c.get(x) for c in configs] if x else [None] * len(configs)
    categorical = x is None or not all(_finite(v) for v in xs_all)
    from cemctl.records import formats

    panels: dict[str, list[int]] = {}
    for i, c in enumerate(configs):
        panels.setdefault(formats.value(c.get(panel)) if panel else "", []).append(i)
    charts = []
    for ptitle, idx in panels.items():
        if categorical:
            cats = list(dict.fromkeys(formats.value(xs_all[i]) if x else "all runs" for i in idx))
            xvals = list(range(len(cats)))
        else:
            cats = None
            xvals = sorted({float(xs_all[i]) for i in idx})
        series: dict[str, dict[str, Any]] = {}
        for i in idx:
            runs = list(arms.values())[i]
            vals = [float(r[metric]) for r in runs if r.get("state") == "done" and _finite(r.get(metric))]
            mean, sd, lo, hi = t_interval(vals) if vals else (math.nan,) * 4
            pos = cats.index(formats.value(xs_all[i]) if x else "all runs") if cats is not None else xvals.index(float(xs_all[i]))
            s = series.setdefault(styles.names[i], {
                "label": styles.names[i], "color": styles.color[i], "dash": styles.dash[i], "points": True,
                "whiskers": True, "lines": not categorical, "y": [None] * len(xvals), "lo": [None] * len(xvals),
                "hi": [None] * len(xvals), "n": [0] * len(xvals)})
            s["y"][pos], s["lo"][pos], s["hi"][pos], s["n"][pos] = _num(mean), _num(lo), _num(hi), len(vals)
        charts.append({"title": (f"{header(panel)}={ptitle}" if panel else ""), "x_label": header(x) if x else "",
                       "y_label": _metric_label(metric, chosen), "log_x": bool(log_x and not categorical),
                       "log_y": bool(log_y), "categories": cats, "x": xvals, "series": list(series.values())})
    note = "mean over finished seeds; whiskers: 95% t interval (none for a single seed)"
    if not any(r.get("state") == "done" and _finite(r.get(metric)) for r in chosen):
        charts, note = [], no_result_note(chosen, metric)
    return {"charts": charts, "metric": metric, "x": x, "hue": hue, "panel": panel, "keys": keys, "metrics": metrics,
            "note": note}


def no_result_note(records: Sequence[dict[str, Any]], metric: str) -> str:
    """What a chart says instead of drawing nothing: no finished run has the metric yet, and the runs' states."""
    from collections import Counter

    states = Counter(str(r.get("state")) for r in records)
    said = ", ".join(f"{n} {s}" for s, n in states.most_common())
    return f"No finished run with a {metric} yet" + (f" ({said})." if said else " (no run meets the selection).")


def default_chart_x(meta: Any, records: Sequence[dict[str, Any]], keys: Sequence[str]) -> str | None:
    """The metric chart's x when the URL names none: the grid's `x`, else its first varying numeric axis
    (`cemctl.report.generic.default_x`, as the static report draws it)."""
    import pandas as pd

    from cem_core.arms import config_of
    from cemctl.report.generic import default_x

    if meta is not None and meta.x in keys:
        return meta.x
    if not keys:
        return None
    frame = pd.DataFrame([config_of(r) for r in records]) if records else pd.DataFrame(columns=list(keys))
    return default_x(frame, keys, meta.axes if meta is not None else ())


def _metric_label(metric: str, records: Sequence[dict[str, Any]]) -> str:
    from cemctl.records.fields import field, loss_unit

    f = field(metric)
    if metric.endswith("_loss"):
        tasks = {r.get("task") for r in records}
        return f"{f.name} ({loss_unit([r.get('data.tokenizer') for r in records], 'gp' if tasks == {'gp'} else 'lm')})"
    return f.name + (f" ({f.unit})" if f.unit else "")


# ----------------------------------------------------------------------------------------------- curves

def _metric_rows(src: "Source", run_ids: Sequence[str], metric: str, x: str) -> dict[str, tuple[Any, Any]]:
    """{run id: (x array, y array)} of one curve metric (`cemctl.db.frames.metrics_frame`), sorted by x."""
    import numpy as np

    from cemctl.db.frames import metrics_frame

    kind = "val" if metric == "val_loss" else "train"
    out: dict[str, tuple[Any, Any]] = {}
    ids = list(run_ids)
    for i in range(0, len(ids), 500):
        frame = metrics_frame(src.engine, ids[i:i + 500], kind=kind)
        if frame.empty or metric not in frame.columns:
            continue
        frame = frame[["run_id", x, metric]].dropna()
        for rid, g in frame.groupby("run_id", sort=False):
            xs = g[x].to_numpy(dtype=float)
            ys = g[metric].to_numpy(dtype=float)
            keep = np.isfinite(xs) & np.isfinite(ys)
            o = np.argsort(xs[keep], kind="stable")
            out[str(rid)] = (xs[keep][o], ys[keep][o])
    return out


def _grid(arrays: Sequence[Any], points: int) -> Any:
    import numpy as np

    allx = np.unique(np.concatenate(arrays)) if arrays else np.array([])
    if len(allx) > points:
        allx = allx[np.linspace(0, len(allx) - 1, points).round().astype(int)]
    return allx


def _clean(values: Any) -> list[float | None]:
    return [float(v) if math.isfinite(v) else None for v in values]


def curve_groups(src: "Source", groups: Sequence[tuple[str, str, list[int] | None, Sequence[str]]], *, metric: str,
                 x: str, log_x: bool = False, log_y: bool = False, title: str = "") -> dict[str, Any]:
    """One chart: per group (label, colour, dash, run ids) the mean of its runs' curves on a common x grid, with a
    band from the lowest to the highest run (several runs)."""
    import numpy as np

    metric = _check("curve metric", metric, CURVE_METRICS, "curve metric") or "train_loss"
    x = _check("curve x", x, CURVE_X, "curve x") or "tokens"
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
    rows = _metric_rows(src, wanted, metric, x)
    grid = _grid([xs for xs, _ in rows.values()], CURVE_POINTS)
    series = []
    keep_set = set(wanted)
    for label, color, dash, ids in groups:
        curves = [rows[r] for r in ids if r in keep_set and r in rows and len(rows[r][0])]
        if not curves or not len(grid):
            continue
        ys = np.vstack([np.interp(grid, cx, cy, left=np.nan, right=np.nan) if len(cx) > 1 else
                        np.where(grid == cx[0], cy[0], np.nan) for cx, cy in curves])
        with np.errstate(all="ignore"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(ys, axis=0)
                lo, hi = np.nanmin(ys, axis=0), np.nanmax(ys, axis=0)
        several = len(curves) > 1
        series.append({"label": f"{label} (n={len(curves)})", "color": color, "dash": dash, "y": _clean(mean),
                       "lo": _clean(lo) if several else None, "hi": _clean(hi) if several else None,
                       "points": metric == "val_loss", "lines": True, "whiskers": False})
    chart = {"title": title, "x_label": CURVE_LABELS[x], "y_label": CURVE_LABELS[metric], "log_x": bool(log_x),
             "log_y": bool(log_y), "categories": None, "x": _clean(grid), "series": series}
    note = "mean over seeds (line) and the band from the lowest to the highest seed"
    if capped:
        note += "; averaged over the first seeds only: " + "; ".join(capped)
    return {"charts": [chart], "metric": metric, "x": x, "note": note, "metrics": list(CURVE_METRICS),
            "xs": list(CURVE_X)}


def experiment_curves(src: "Source", name: str, sel: "Selection", *, metric: str = "train_loss", x: str = "tokens",
                      chart_x: str | None = None, hue: Sequence[str] = (), log_x: bool = False,
                      log_y: bool = False) -> dict[str, Any]:
    """The training curves of the experiment's arms (the runs meeting the selection), coloured as the metric
    chart colours them (`chart_x`, `hue`: its x and hue keys); when that gives every arm one colour (only the
    chart's x varies), each arm gets its own (as the static report's curves do)."""
    from cem_core.arms import config_of
    from cemctl.records.fields import resolve
    from cemctl.services.dashboard.tables import experiment_axes, experiment_records, select

    recs = experiment_records(src, name, sel.scale)
    meta = recs.experiments.get(name)
    nuisance = meta.nuisance if meta else ("train.seed",)
    chosen = select(recs.records, sel)
    keys = [k for k in experiment_axes(src, name, sel.scale) if k not in nuisance]
    chart_x = resolve(chart_x, keys, what="x") if chart_x else default_chart_x(meta, chosen, keys)
    hue = [resolve(h, keys, what="hue") for h in hue if h] or [h for h in (meta.hue if meta else ()) if h in keys]
    arms = _arms(chosen)
    configs = [config_of(runs[0]) for runs in arms.values()]
    colour = Styles(configs, shown=[chart_x] if chart_x in keys else [], hue=hue, keys=keys, nuisance=nuisance,
                    order=meta.axes if meta else [])
    names = Styles(configs, shown=[], hue=[], keys=keys, nuisance=nuisance, order=meta.axes if meta else [])
    groups = []
    if len(arms) > 1 and len(set(colour.color)) == 1:  # one colour carries nothing: then one per arm, solid lines
        return curve_groups(src, [(names.names[i], names.color[i], None, [r["run_id"] for r in runs])
                                  for i, runs in enumerate(arms.values())],
                            metric=metric, x=x, log_x=log_x, log_y=log_y)
    per_colour: dict[str, int] = {}
    for i, runs in enumerate(arms.values()):
        k = per_colour.setdefault(colour.color[i], 0)
        per_colour[colour.color[i]] = k + 1
        groups.append((names.names[i], colour.color[i], DASHES[k % len(DASHES)], [r["run_id"] for r in runs]))
    return curve_groups(src, groups, metric=metric, x=x, log_x=log_x, log_y=log_y)


# ----------------------------------------------------------------------------------------------- a run

def run_curves(src: "Source", run_id: str, *, x: str = "step", log_y: bool = False) -> dict[str, Any]:
    """A run's curves: losses (training as a line, validation as points), learning rate, gradient norm, speed."""
    import numpy as np

    from cemctl.db.frames import metrics_frame

    x = _check("curve x", x, CURVE_X, "curve x") or "step"
    frame = metrics_frame(src.engine, [run_id])
    charts = []
    if frame.empty:
        return {"charts": [], "x": x, "xs": list(CURVE_X), "note": "no metrics recorded yet"}
    palette = colors()

    def series_of(kind: str, metric: str) -> tuple[Any, Any]:
        g = frame[(frame["kind"] == kind)][[x, metric]].dropna().sort_values(x, kind="stable")
        xs, ys = g[x].to_numpy(dtype=float), g[metric].to_numpy(dtype=float)
        if len(xs) > RUN_CURVE_POINTS:
            idx = np.linspace(0, len(xs) - 1, RUN_CURVE_POINTS).round().astype(int)
            xs, ys = xs[idx], ys[idx]
        return xs, ys

    note = ""
    panels = [("loss", [("train", "train_loss", False), ("val", "val_loss", True)], log_y),
              ("learning rate", [("train", "lr", False)], False), ("gradient norm", [("train", "grad_norm", False)], False),
              ("tokens/s", [("train", "tokens_per_s", False)], False)]
    for title, metrics, logy in panels:
        parts = [(metric, points, *series_of(kind, metric)) for kind, metric, points in metrics if metric in frame.columns]
        parts = [p for p in parts if len(p[2])]
        if not parts:
            continue
        grid = np.unique(np.concatenate([p[2] for p in parts]))
        series = []
        for j, (metric, points, xs, ys) in enumerate(parts):
            y = np.full(len(grid), np.nan)
            y[np.searchsorted(grid, xs)] = ys
            series.append({"label": CURVE_LABELS[metric], "color": palette[j % len(palette)], "dash": None,
                           "y": _clean(y), "lo": None, "hi": None, "points": points, "lines": not points,
                           "whiskers": False})
        charts.append({"title": title, "x_label": CURVE_LABELS[x], "y_label": title, "log_x": False,
                       "log_y": bool(logy), "categories": None, "x": _clean(grid), "series": series})
    if frame[frame["kind"] == "train"].shape[0] > RUN_CURVE_POINTS:
        note = f"thinned evenly to {RUN_CURVE_POINTS} points per curve"
    return {"charts": charts, "x": x, "xs": list(CURVE_X), "note": note}


SYSTEM_PANELS = (("CPU (%)", (("cpu_process_pct", "this process"), ("cpu_machine_pct", "the machine")), 1.0),
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
            series.append({"label": label, "color": palette[j % len(palette)], "dash": None,
                           "y": [None if not _finite(v) else float(v) * scale for v in frame[col]], "lo": None,
                           "hi": None, "points": True, "lines": True, "whiskers": False})
        if series:
            charts.append({"title": title, "x_label": "training time (s)", "y_label": title, "log_x": False,
                           "log_y": False, "categories": None, "x": [x if _finite(x) else None for x in xs],
                           "series": series})
    attempts = frame["attempt"].dropna().nunique()
    return {"charts": charts, "note": f"{len(frame)} samples" + (f" over {attempts} attempts" if attempts > 1 else "")}


# ----------------------------------------------------------------------------------------------- compare

def compare_curves(src: "Source", items: Sequence[str], *, experiment: str | None = None, where: Sequence[str] = (),
                   metric: str = "train_loss", x: str = "tokens", log_x: bool = False, log_y: bool = False) -> dict[str, Any]:
    """Each compared item's curve overlaid (an arm: the mean over its seeds with a band)."""
    from cemctl.services.compare import compare

    cmp = compare(src.url, src.runs_root, list(items), experiment=experiment, where=list(where) or None)
    palette = colors()
    groups = [(i.text if i.kind == "run" else i.name, palette[j % len(palette)], None, i.run_ids)
              for j, i in enumerate(cmp.items)]
    return curve_groups(src, groups, metric=metric, x=x, log_x=log_x, log_y=log_y)


# ----------------------------------------------------------------------------------------------- parallel coordinates

def parallel(src: "Source", name: str, sel: "Selection", *, metric: str | None = None) -> dict[str, Any]:
    """Parallel coordinates: one axis per varying key of the experiment (numbers on a linear or log scale, other
    values as categories) and the metric; one line per run meeting the selection that has the metric."""
    from cemctl.records import formats
    from cemctl.services.dashboard.tables import experiment_axes, experiment_records, header, metric_choices, select

    recs = experiment_records(src, name, sel.scale)
    meta = recs.experiments.get(name)
    chosen = select(recs.records, sel)
    keys = [k for k in experiment_axes(src, name, sel.scale) if k != "train.seed"]
    metrics = metric_choices(recs.records, meta)
    metric = _check("metric", metric or (meta.metric if meta else None), metrics, "metric") or metrics[0]
    rows = [r for r in chosen if _finite(r.get(metric))]
    axes = []
    for k in keys:
        vals = [r.get(k) for r in rows]
        numeric = bool(vals) and all(_finite(v) for v in vals)
        if numeric:
            positive = all(v > 0 for v in vals)
            spread = max(vals) / min(vals) if positive and min(vals) > 0 else 1.0
            axes.append({"key": k, "label": header(k), "categorical": False, "log": positive and spread >= 20,
                         "categories": None})
        else:
            cats = sorted(dict.fromkeys(formats.value(v) for v in vals), key=str)
            axes.append({"key": k, "label": header(k), "categorical": True, "log": False, "categories": cats})
    axes.append({"key": metric, "label": header(metric), "categorical": False, "log": False, "categories": None})
    lines = []
    for r in rows:
        values = []
        for a in axes:
            v = r.get(a["key"])
            values.append(a["categories"].index(formats.value(v)) if a["categorical"] else float(v))
        lines.append({"run": r["run_id"], "label": r.get("arm_label") or "", "values": values})
    return {"axes": axes, "lines": lines, "metric": metric, "metrics": metrics, "keys": keys,
            "note": f"{len(lines)} runs with a {metric}" + (f" ({len(chosen) - len(lines)} without)" if len(chosen) > len(lines) else "")}
