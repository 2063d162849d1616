"""The figures every report draws, for any grid (`cemctl report`): the metric against an axis, and the curves.

    fig = metric_figure(runs, x="model.attn_steps", hue=None, metric="test_loss")   # runs: with_arms(...)
    fig = arm_curves(runs, curves)

`metric_figure`: the main metric (mean over seeds, error bars +-1 s.d., hollow for a
single seed) against the grid's `[experiment] x` key, one line per combination of the
other varying keys (`hue`; by default all of them). Any varying key that is neither x
nor hue still splits the lines: two arms are never drawn as one point.
`arm_curves`: per arm, the training loss against tokens as the mean over seeds with a
band from the lowest to the highest seed, validation losses as dots.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from cem_core.arms import ArmLabelCollision, format_value, is_config_key, short_names
from cemctl.report import style
from cemctl.report.arms import ARM, ARM_LABEL, config_of
from cemctl.report.parts import FigurePart

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

METRIC_LABELS = {"test_loss": "test loss", "test_ppl": "test perplexity", "val_loss": "validation loss",
                 "val_ppl": "validation perplexity", "test_rmse": "test RMSE", "train_loss": "training loss"}


def varying(runs: "pd.DataFrame", nuisance: Sequence[str] = ("train.seed",)) -> list[str]:
    """Config columns with more than one value among the runs (in column order), nuisance keys excluded."""
    keys = []
    for col in runs.columns:
        if is_config_key(col):
            if col not in nuisance and runs[col].astype(str).nunique(dropna=False) > 1:
                keys.append(col)
    return keys


def default_x(runs: "pd.DataFrame", keys: Sequence[str], order: Sequence[str] = ()) -> str | None:
    """The grid's first varying numeric axis (its file order), else its first varying axis, else the first varying
    numeric key, else the first varying key (a key the grid does not vary itself, such as a size's context length,
    is never chosen over one of its axes)."""
    axes = [k for k in order if k in keys]
    for group in (axes, [k for k in keys if k not in order]):
        for k in group:
            vals = runs[k].dropna()
            if len(vals) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
                return k
        if group:
            return group[0]
    return None


def _numeric(values: Sequence[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


LINESTYLES = ("-", "--", ":", "-.")
PALETTE_ATTR = "cemctl_palette"  # where a report leaves its Palette on the runs frame, for the figure kinds


class Palette:
    """The colours of a report, one place for every figure: a colour is a stable function of the arm's *hue value*.

    Hue keys: the grid's `hue` keys, else every varying key but the metric figure's x and the keys the figure kind
    shows on its own axes, panels and markers (`shown`: a size, a recursion depth, a learning rate; with a size, the
    dims it determines). An arm's hue value is its values of those keys; its colour is the hue value's, in the
    order the arms come (grid order), the Llama baseline in the paper's pink (when it is one hue value): the same
    value has the same colour in the metric figure, the training curves and every figure of the kind
    (`color_for(config)`), the test-time recursion and energy figures. Line style (a marker on a categorical x):
    what else tells the arms of one colour apart (the other varying keys; in the curves, also the x value, which the
    curves do not plot).
    """

    def __init__(self, runs: "pd.DataFrame", *, x: str | None, hue: Sequence[str] = (), order: Sequence[str] = (),
                 nuisance: Sequence[str] = ("train.seed",), shown: Sequence[str] = ()) -> None:
        from cemctl.records.labels import json_key, series_names, shown_with_dims

        arms = runs.drop_duplicates(ARM)
        configs = [config_of(r) for r in arms.to_dict("records")]
        keys = varying(runs, nuisance)
        fixed = set(shown_with_dims(configs, [k for k in [x, *shown] if k]))  # a figure's own axes: never the colour
        self.hue_keys = [k for k in (hue or keys) if k in keys and k not in fixed]
        on_x = set(shown_with_dims(configs, [x] if x else []))  # x, and with a size its dims
        rest = [k for k in keys if k not in on_x and k not in self.hue_keys]
        self.hue_of = dict(zip(arms[ARM], series_names(configs, shown=[k for k in [x, *rest] if k], nuisance=nuisance,
                                                       order=order)))
        other = [k for k in [x, *self.hue_keys] if k]
        self.style_of = dict(zip(arms[ARM], series_names(configs, shown=other, nuisance=nuisance, order=order)
                                 if rest else ["all runs"] * len(configs)))
        from cemctl.records.labels import value_text

        def x_name(c: dict) -> str:  # the hue already names the variant: a recursion depth is just "T=2"
            if x in ("model.attn_steps", "model.mlp_steps"):
                return f"T={c.get(x)}"
            return value_text(x, c.get(x))  # type: ignore[arg-type]

        x_text = [x_name(c) if x in keys else "" for c in configs]
        self.curve_style_of = {aid: ", ".join(p for p in (xt, self.style_of[aid] if rest else "") if p) or "all runs"
                               for aid, xt in zip(arms[ARM], x_text)}
        hues = list(dict.fromkeys(self.hue_of.values()))
        llama = list(dict.fromkeys(self.hue_of[a] for a, c in zip(arms[ARM], configs) if style.role(c) == "llama"))
        cycle = iter(style.HUE_COLORS * (1 + len(hues) // len(style.HUE_COLORS)))
        # the Llama baseline in the paper's pink when one hue value is Llama's
        self.color = {h: style.LLAMA_COLOR if llama == [h] else next(cycle) for h in hues}
        self._hue_by_value = {json_key(self._value(c)): self.hue_of[aid] for aid, c in zip(arms[ARM], configs)}
        self.x = x

    def __deepcopy__(self, memo: dict) -> "Palette":
        """One palette per report, never copied: pandas deep-copies a frame's attrs into every frame derived from it
        (each slice, filter and groupby), and copying the palette's tables there was a quarter of a report's drawing
        time. It is not changed after it is made, so every frame sharing it is what the one palette means."""
        return self

    def _value(self, config: Mapping[str, Any]) -> dict[str, Any]:
        return {k: _native(config.get(k)) for k in self.hue_keys}

    def hue_for(self, config: Mapping[str, Any]) -> str | None:
        """The hue series of any row carrying a config (a run, an aggregated row of a figure), None if no arm of the
        report has its hue value."""
        from cemctl.records.labels import json_key

        return self._hue_by_value.get(json_key(self._value(config_of(config))))

    def color_for(self, config: Mapping[str, Any]) -> str:
        """The colour of a row's hue value (its arm's in the metric figure); grey for a value no arm has."""
        hue = self.hue_for(config)
        return self.color[hue] if hue is not None else "0.45"

    @staticmethod
    def linestyles(names: Sequence[str]) -> dict[str, str] | None:
        """A line style per distinct name (None when there are more than LINESTYLES: then colours carry it)."""
        distinct = list(dict.fromkeys(names))
        if len(distinct) > len(LINESTYLES):
            return None
        return {n: LINESTYLES[i] for i, n in enumerate(distinct)}


def _native(value: Any) -> Any:
    """A config value as the records hold it, whatever frame it came through: numpy scalars as Python ones, NaN as
    None, a whole float as an int (a column with a gap turns 2 into 2.0)."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (TypeError, ValueError):
            pass
    if isinstance(value, float):
        if value != value:
            return None
        if value.is_integer():
            return int(value)
    return value


def arm_names(configs: Mapping[str, Mapping[str, Any]], *, nuisance: Sequence[str] = ("train.seed",),
              order: Sequence[str] = ()) -> dict[str, str]:
    """{arm id: name} for the arms of one table (`configs`: arm id -> the config of one of its runs): the fewest
    varying keys that tell them apart, by the specs' display names ('CEM attention (T=2), lr=0.002'), as the
    figures' legends name series (`cemctl.records.labels.series_names`). The full label (`arm_label`: every varying
    key) stays the arm's identifier (`--where arm_label=`, `compare`); this is what a reader reads."""
    from cemctl.records.labels import series_names

    ids = list(configs)
    if not ids:
        return {}
    names = series_names([dict(configs[a]) for a in ids], nuisance=nuisance, order=order)
    return dict(zip(ids, names))


def arm_sort_key(config: Mapping[str, Any], order: Sequence[str]) -> tuple:
    """An arm's place in a table: by the grid's axes in file order, each by its value (numbers as numbers, a
    missing value last), so that a table of arms reads in a visible order."""
    out = []
    for k in order:
        v = _native(config.get(k))
        out.append((2, 0.0, "") if v is None else (0, float(v), "") if isinstance(v, (int, float)) and
                   not isinstance(v, bool) else (1, 0.0, str(v)))
    return tuple(out)


def palette_of(runs: "pd.DataFrame") -> Palette:
    """The report's palette (left on the runs frame by `cemctl.report.build`), else one for these runs alone (a
    figure drawn on its own, in a test or from Python)."""
    pal = runs.attrs.get(PALETTE_ATTR)
    if pal is not None:
        return pal
    from cemctl.report.arms import has_arms, with_arms

    framed = runs if has_arms(runs) else with_arms(runs)
    return Palette(framed, x=default_x(framed, varying(framed)))


def metric_label(metric: str, runs: "pd.DataFrame") -> str:
    """The metric and its unit as it is: nats per byte with the byte tokenizer, per token otherwise."""
    from cemctl.records.fields import unit_of

    base = METRIC_LABELS.get(metric, metric).split(" (")[0]
    if metric.endswith("_loss"):
        tokenizers = runs["data.tokenizer"].dropna().unique() if "data.tokenizer" in runs.columns else []
        task = runs["task"].iloc[0] if "task" in runs.columns and len(runs) else "lm"
        return f"{base} ({unit_of(metric, tokenizers, task)})"
    return base


def _dodge(positions: Sequence[float], i: int, n: int, *, log: bool, numeric: bool) -> list[float]:
    """Positions shifted for the i-th of n series at one x, so error bars of different colours sit side by side."""
    if n <= 1:
        return list(positions)
    k = i - (n - 1) / 2
    if not numeric:
        return [p + k * 0.08 for p in positions]
    if log:
        return [p * (1.0 + 0.025 * k) for p in positions]
    xs = sorted(set(positions))
    gap = min((b - a for a, b in zip(xs, xs[1:])), default=1.0) or 1.0
    return [p + k * 0.035 * gap for p in positions]


@dataclass
class Look:
    """How a series is drawn, in a report's figure and in the dashboard's chart alike: its name, colour ('#rrggbb'
    or an RGB triple: `style.hex_of` for the dashboard), line style (matplotlib's: '-', '--', ':', '-.'; None: points only) and marker."""

    label: str
    color: Any
    line: str | None = "-"
    marker: str = "o"


@dataclass
class MetricPoints:
    """What the metric figure draws: one row per arm (`table`: arm, x, hue, style, mean, std, n, label, run_ids,
    pos: its x position after the dodge) and the look of each series (hue, style)."""

    table: "pd.DataFrame"
    x: str | None
    xname: str
    ylabel: str
    numeric: bool  # a numeric x (else categories, never joined by a line)
    log: bool  # a log x (a numeric x spanning a factor of 8 or more: a learning-rate sweep)
    ticks: list[float]  # a tick at each x value the arms have
    tick_labels: list[str]
    looks: dict[tuple[str, str], Look]
    styles: dict[str, str]  # what the line styles say (style name -> line style), when the hue leaves several
    marks: dict[str, str]  # ... or the markers, on a categorical x


def metric_points(runs: "pd.DataFrame", *, x: str | None = None, hue: Sequence[str] | None = None,
                  metric: str = "test_loss", order: Sequence[str] = (), nuisance: Sequence[str] = ("train.seed",),
                  name: str = "metric", palette: Palette | None = None) -> MetricPoints | None:
    """The metric figure's points (the report's `metric_figure` and the dashboard's metric chart): the mean over the
    finished seeds of each arm with its spread (`style.mean_sd`), a colour per hue series (the palette the curves
    share), a line style (a marker on a categorical x) for what else varies, the series at one x dodged apart.
    None when no run has finished with the metric."""
    import pandas as pd

    done = runs[runs["state"].eq("done")] if "state" in runs else runs
    done = done[pd.to_numeric(done.get(metric), errors="coerce").notna()] if metric in done else done.iloc[0:0]
    if done.empty:
        return None
    keys = varying(runs, nuisance)
    x = x or default_x(runs, keys, order)
    pal = palette or Palette(runs, x=x, hue=hue or (), order=order, nuisance=nuisance)
    stats = []
    for aid, g in done.groupby(ARM, sort=False):
        mean, sd, n = style.mean_sd(g[metric].astype(float))
        first = config_of(g.iloc[0].to_dict())
        stats.append({"arm": aid, "x": first.get(x) if x else None, "hue": pal.hue_of[aid], "style": pal.style_of[aid],
                      "mean": mean, "std": sd, "n": n, "label": g[ARM_LABEL].iloc[0],
                      "run_ids": ",".join(g["run_id"].astype(str)) if "run_id" in g else ""})
    table = pd.DataFrame(stats)
    dup = table.duplicated(["hue", "style", "x"], keep=False)
    if dup.any():  # cannot happen: a series is every key but x; a guard, never a silent merge
        raise ArmLabelCollision(f"two arms at one point of the {name} figure: {sorted(set(table[dup]['arm']))}")
    xs = list(dict.fromkeys(table["x"]))
    numeric = x is not None and _numeric(xs)
    ordered = sorted(xs, key=lambda v: (str(type(v)), v)) if numeric else xs
    positions = {v: (float(v) if numeric else i) for i, v in enumerate(ordered)}
    ticks = sorted(positions.values())
    log = numeric and min(ticks) > 0 and max(ticks) / min(ticks) >= 8  # e.g. a learning-rate sweep
    series = list(dict.fromkeys(zip(table["hue"], table["style"])))
    style_names = list(dict.fromkeys(s for _, s in series))
    single_style = len(style_names) <= 1
    # what else varies: a line style, or (a categorical x is never joined by a line) a marker
    styles = (Palette.linestyles(style_names) or {}) if numeric and not single_style else {}
    marks = {n: style.SIZE_MARKERS[i] for i, n in enumerate(style_names)} \
        if not numeric and not single_style and len(style_names) <= len(style.SIZE_MARKERS) else {}
    looks = {}
    table["pos"] = 0.0
    for i, (h, st) in enumerate(series):
        rows = table["hue"].eq(h) & table["style"].eq(st)
        base = [positions[v] for v in table.loc[rows, "x"]]
        table.loc[rows, "pos"] = _dodge(base, i, len(series), log=log, numeric=numeric)
        looks[(h, st)] = Look(h if single_style or styles or marks else f"{h}, {st}", pal.color[h],
                              styles.get(st, "-") if numeric else None, marks.get(st, "o"))
    xname = short_names([x])[x] if x else ""
    return MetricPoints(table, x, xname, metric_label(metric, runs), numeric, log, ticks,
                        [format_value(v) for v in ordered], looks, styles, marks)


def metric_figure(runs: "pd.DataFrame", *, x: str | None = None, hue: Sequence[str] | None = None,
                  metric: str = "test_loss", order: Sequence[str] = (), nuisance: Sequence[str] = ("train.seed",),
                  name: str = "metric", palette: Palette | None = None) -> FigurePart | None:
    """The metric (mean over seeds, +-1 s.d.) against the grid's x (`metric_points`): a colour per hue series, a
    line style for what else varies when the grid names its hue; a categorical x is never joined by a line; the
    series at one x are dodged apart."""
    pts = metric_points(runs, x=x, hue=hue, metric=metric, order=order, nuisance=nuisance, name=name,
                        palette=palette)
    if pts is None:
        return None
    table, numeric = pts.table, pts.numeric
    fig, (ax,) = style.new_figure(1, panel_w=6.0, panel_h=4.0)
    for (h, st), look in pts.looks.items():
        sub = table[table["hue"].eq(h) & table["style"].eq(st)].sort_values("pos")
        style.plot_seed_points(ax, list(sub["pos"]), sub, color=look.color, label=look.label, line=look.line,
                               marker=look.marker)
    if numeric and pts.log:
        ax.set_xscale("log")
    ax.set_xticks(pts.ticks)
    ax.set_xticklabels(pts.tick_labels)
    ax.minorticks_off()
    if not numeric:
        ax.set_xlim(min(pts.ticks) - 0.5, max(pts.ticks) + 0.5)
    xname, ylabel = pts.xname, pts.ylabel
    ax.set_xlabel(xname or "")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{ylabel} against {xname}" if pts.x else ylabel, fontsize=10)
    from matplotlib.lines import Line2D

    extra = [Line2D([], [], color="0.35", linestyle=ls, label=st)  # type: ignore[arg-type]
             for st, ls in pts.styles.items()] + \
        [Line2D([], [], color="0.35", marker=m, linestyle="none", label=st) for st, m in pts.marks.items()]
    style.figure_legend(fig, [ax], table["n"], max_cols=2, extra=extra)
    caption = (f"{ylabel[0].upper() + ylabel[1:]} against {xname or 'the arms'}: one colour per series (what "
               f"varies besides {xname or 'nothing'}), the same colours in every figure of the report"
               + ("; line styles: " + ", ".join(pts.styles) if pts.styles else "")
               + ("; markers: " + ", ".join(pts.marks) if pts.marks else "")
               + ("" if numeric else "; the x values are categories, so points are not joined")
               + f"; {style.SPREAD_NOTE}.")
    return FigurePart(name, fig, caption)


def curve_looks(palette: Palette, arms: Sequence[str]) -> tuple[dict[str, Look], bool]:
    """The look of each arm's training curve (the report's curves and the dashboard's alike), and whether the colours
    go by arm: the colour of the arm's hue series (the metric figure's), the line style of what else tells the arms
    of one colour apart (lighter shades of it when there are more than line styles). When all arms share one hue
    (only the metric figure's x varies), that colour carries nothing: each arm gets its own, the lines solid."""
    by_arm = len(arms) > 1 and len({palette.hue_of[a] for a in arms}) == 1
    styles = None if by_arm else Palette.linestyles([palette.curve_style_of[a] for a in arms])
    shades: dict[str, float] = {}
    if styles is None and not by_arm:  # too many for line styles: lighter shades, in the order the arms come
        for hue in dict.fromkeys(palette.hue_of[a] for a in arms):
            mine = [a for a in arms if palette.hue_of[a] == hue]
            shades.update({a: 0.6 * i / max(1, len(mine) - 1) for i, a in enumerate(mine)})
    looks = {}
    for aid in arms:
        hue, sty = palette.hue_of[aid], palette.curve_style_of[aid]
        color = style.CYCLE[arms.index(aid) % len(style.CYCLE)] if by_arm else \
            style.lighter(palette.color[hue], shades.get(aid, 0.0))
        several = sum(1 for a in arms if palette.hue_of[a] == hue) > 1  # the style tells this colour's arms apart
        label = sty if by_arm or hue == "all runs" else f"{hue}, {sty}" if several else hue
        looks[aid] = Look(label, color, styles[sty] if styles else "-")
    return looks, by_arm


@dataclass
class ArmCurve:
    """One arm's curve (`arm_curve`): the mean over its runs on their common x, the band from the lowest to the
    highest run (None for one run), and its validation points (mean over the runs, per step)."""

    x: Any
    mean: Any
    low: Any
    high: Any
    runs: int
    val_x: Any = None
    val_y: Any = None


def arm_curve(per_run: Sequence[tuple[Any, Any]], *, fraction: float = style.SMOOTH_FRACTION,
              val: Sequence[tuple[Any, Any, Any]] = ()) -> ArmCurve | None:
    """Mean, low and high over an arm's runs of one curve, each run's (x, y) smoothed first (a centred rolling mean
    over `fraction` of its points, `style.smooth_window`; 0: as recorded) then interpolated on the union of their x;
    `val`: (step, x, y) per validation point of each run, averaged per step. The report's curves and the
    dashboard's are this one computation."""
    import numpy as np
    import pandas as pd

    series = []
    for xs, ys in per_run:
        xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
        if not len(xs):
            continue
        if fraction > 0:
            ys = pd.Series(ys).rolling(style.smooth_window(len(ys), fraction), center=True, min_periods=1).mean()
            ys = ys.to_numpy()
        series.append((xs, ys))
    if not series:
        return None
    grid = np.unique(np.concatenate([s[0] for s in series]))
    ys = np.vstack([np.interp(grid, s[0], s[1], left=np.nan, right=np.nan) if len(s[0]) > 1 else
                    np.where(grid == s[0][0], s[1][0], np.nan) for s in series])
    import warnings

    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(ys, axis=0)
        low, high = np.nanmin(ys, axis=0), np.nanmax(ys, axis=0)
    several = len(series) > 1
    out = ArmCurve(grid, mean, low if several else None, high if several else None, len(series))
    if len(val):
        v = pd.DataFrame(list(val), columns=["step", "x", "y"]).groupby("step").agg(x=("x", "mean"), y=("y", "mean"))
        out.val_x, out.val_y = v["x"].to_numpy(dtype=float), v["y"].to_numpy(dtype=float)
    return out


def arm_curves(runs: "pd.DataFrame", curves: "pd.DataFrame | None", *, name: str = "training_curves",
               palette: Palette | None = None, x: str | None = None, order: Sequence[str] = (),
               nuisance: Sequence[str] = ("train.seed",)) -> FigurePart | None:
    """Training loss per arm: the mean over seeds (line) with a band from the lowest to the highest seed, validation
    losses as dots, each arm drawn as `curve_looks` says (the dashboard's curves look the same)."""
    if curves is None or curves.empty or runs.empty:
        return None
    sel = runs[runs["run_id"].isin(set(curves["run_id"]))]
    if sel.empty:
        return None
    if palette is None:
        keys = varying(runs, nuisance)
        palette = Palette(runs, x=x or default_x(runs, keys, order), order=order, nuisance=nuisance)
    is_gp = "task" in sel.columns and sel["task"].eq("gp").all()
    by_run = dict(tuple(curves.groupby("run_id", sort=False)))
    fig, (ax,) = style.new_figure(1, panel_w=6.4, panel_h=4.2)
    arms = list(dict.fromkeys(sel[ARM]))
    looks, by_arm = curve_looks(palette, arms)
    from matplotlib.lines import Line2D

    handles = []
    ids_of = {aid: g for aid, g in sel[["run_id", ARM]].groupby(ARM, sort=False)}  # one pass, two columns
    for aid in arms:
        group = ids_of[aid]
        look = looks[aid]
        per_run, val = [], []
        for rid in group["run_id"]:
            c = by_run[rid]
            train = c[c["train_loss"].notna()]
            if not train.empty:
                per_run.append((train["tokens"].astype(float).to_numpy(), train["train_loss"].to_numpy(dtype=float)))
            v = c[c["val_loss"].notna()]
            val += list(zip(v["step"], v["tokens"], v["val_loss"]))
        curve = arm_curve(per_run, val=val)
        ids = list(group["run_id"].astype(str))
        if curve is not None:
            style.tag(ax.plot(curve.x, curve.mean, linestyle=look.line, color=look.color, linewidth=1.4), ids)
            if curve.low is not None:
                style.tag(ax.fill_between(curve.x, curve.low, curve.high, color=look.color, alpha=0.15,
                                          linewidth=0), ids)
        if val:
            vx, vy = (curve.val_x, curve.val_y) if curve is not None else _val_means(val)
            style.tag(ax.plot(vx, vy, "o", color=look.color, markersize=3.5, markeredgecolor="black",
                              markeredgewidth=0.4), ids)
        handles.append(Line2D([], [], color=look.color, linestyle=look.line, label=f"{look.label}, n={len(per_run)}"))  # type: ignore[arg-type]
    from matplotlib.ticker import EngFormatter

    ax.xaxis.set_major_formatter(EngFormatter())
    ax.set_xlabel("training examples" if is_gp else "training tokens")
    ax.set_ylabel("loss (mean squared error)" if is_gp else "loss" + metric_label("train_loss", sel)[len("training loss"):])
    handles.append(Line2D([], [], color="0.4", marker="o", linestyle="none", markersize=4, label="validation loss (mean)"))
    style.figure_legend(fig, [], [], extra=handles, max_cols=2)
    caption = ("Training loss against training " + ("examples" if is_gp else "tokens") + " per arm: the mean over seeds "
               "(line, rolling mean over ~5% of the steps) and the band from the lowest to the highest seed; "
               "dots: validation loss, mean over seeds; "
               + ("one colour per arm (the metric figure's x tells them apart)." if by_arm
                  else "colours as in the metric figure."))
    return FigurePart(name, fig, caption)


def _val_means(val: Sequence[tuple[Any, Any, Any]]) -> tuple[Any, Any]:
    import pandas as pd

    v = pd.DataFrame(list(val), columns=["step", "x", "y"]).groupby("step").agg(x=("x", "mean"), y=("y", "mean"))
    return v["x"].to_numpy(dtype=float), v["y"].to_numpy(dtype=float)
