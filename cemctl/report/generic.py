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
            return value_text(x, c.get(x))

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


def palette_of(runs: "pd.DataFrame") -> Palette:
    """The report's palette (left on the runs frame by `cemctl.report.build`), else one for these runs alone (a
    figure drawn on its own, in a test or from Python)."""
    pal = runs.attrs.get(PALETTE_ATTR)
    if pal is not None:
        return pal
    from cemctl.report.arms import has_arms, with_arms

    framed = runs if has_arms(runs) else with_arms(runs)
    return Palette(framed, x=default_x(framed, varying(framed)))


def _lighter(color: str, amount: float) -> Any:
    """`color` mixed with white (amount 0: itself, 1: white)."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)


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


def metric_figure(runs: "pd.DataFrame", *, x: str | None = None, hue: Sequence[str] | None = None,
                  metric: str = "test_loss", order: Sequence[str] = (), nuisance: Sequence[str] = ("train.seed",),
                  name: str = "metric", palette: Palette | None = None) -> FigurePart | None:
    """The metric (mean over seeds, +-1 s.d.) against the grid's x: a colour per hue series (the palette the
    curves share), a line style for what else varies when the grid names its hue; a categorical x is never joined
    by a line; the series at one x are dodged apart."""
    import numpy as np
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
        vals = g[metric].astype(float).to_numpy()
        first = config_of(g.iloc[0].to_dict())
        stats.append({"arm": aid, "x": first.get(x) if x else None, "hue": pal.hue_of[aid], "style": pal.style_of[aid],
                      "mean": float(np.mean(vals)), "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else float("nan"),
                      "n": len(vals), "label": g[ARM_LABEL].iloc[0], "run_ids": ",".join(g["run_id"].astype(str)) if "run_id" in g else ""})
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
    fig, (ax,) = style.new_figure(1, panel_w=6.0, panel_h=4.0)
    series = list(dict.fromkeys(zip(table["hue"], table["style"])))
    style_names = list(dict.fromkeys(s for _, s in series))
    single_style = len(style_names) <= 1
    # what else varies: a line style, or (a categorical x is never joined by a line) a marker
    styles = (Palette.linestyles(style_names) or {}) if numeric and not single_style else {}
    marks = {n: style.SIZE_MARKERS[i] for i, n in enumerate(style_names)} \
        if not numeric and not single_style and len(style_names) <= len(style.SIZE_MARKERS) else {}
    for i, (h, st) in enumerate(series):
        sub = table[table["hue"].eq(h) & table["style"].eq(st)]
        sub = sub.assign(_p=[positions[v] for v in sub["x"]]).sort_values("_p")
        line = styles.get(st, "-") if numeric else None
        label = h if single_style or styles or marks else f"{h}, {st}"
        style.plot_seed_points(ax, _dodge(list(sub["_p"]), i, len(series), log=log, numeric=numeric), sub,
                               color=pal.color[h], label=label, line=line, marker=marks.get(st, "o"))
    if numeric and log:
        ax.set_xscale("log")
    ax.set_xticks(ticks)
    ax.set_xticklabels([format_value(v) for v in ordered])
    ax.minorticks_off()
    if not numeric:
        ax.set_xlim(min(ticks) - 0.5, max(ticks) + 0.5)
    xname = short_names([x])[x] if x else ""
    ylabel = metric_label(metric, runs)
    ax.set_xlabel(xname or "")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{ylabel} against {xname}" if x else ylabel, fontsize=10)
    from matplotlib.lines import Line2D

    extra = [Line2D([], [], color="0.35", linestyle=ls, label=st) for st, ls in styles.items()] + \
        [Line2D([], [], color="0.35", marker=m, linestyle="none", label=st) for st, m in marks.items()]
    style.figure_legend(fig, [ax], table["n"], max_cols=2, extra=extra)
    caption = (f"{ylabel[0].upper() + ylabel[1:]} against {xname or 'the arms'}: one colour per series (what "
               f"varies besides {xname or 'nothing'}), the same colours in every figure of the report"
               + ("; line styles: " + ", ".join(styles) if styles else "")
               + ("; markers: " + ", ".join(marks) if marks else "")
               + ("" if numeric else "; the x values are categories, so points are not joined")
               + f"; {style.SPREAD_NOTE}.")
    return FigurePart(name, fig, caption)


def arm_curves(runs: "pd.DataFrame", curves: "pd.DataFrame | None", *, name: str = "training_curves",
               palette: Palette | None = None, x: str | None = None, order: Sequence[str] = (),
               nuisance: Sequence[str] = ("train.seed",)) -> FigurePart | None:
    """Training loss per arm: the mean over seeds (line) with a band from the lowest to the highest seed; the
    colour of the arm's hue series (the metric figure's), the line style of what else tells the arms apart. When
    all arms share one hue (only the metric figure's x varies), each arm gets its own colour instead."""
    import numpy as np

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
    # One colour for every arm (the metric figure's hue does not vary: its x tells them apart) carries nothing:
    # then the colours tell the curves apart, one per arm in grid order, and the lines stay solid.
    by_arm = len(arms) > 1 and len({palette.hue_of[a] for a in arms}) == 1
    styles = None if by_arm else Palette.linestyles([palette.curve_style_of[a] for a in arms])
    shades: dict[str, float] = {}
    if styles is None and not by_arm:  # too many for line styles: lighter shades of the arm's colour, in the order the arms come
        for hue in dict.fromkeys(palette.hue_of[a] for a in arms):
            mine = [a for a in arms if palette.hue_of[a] == hue]
            shades.update({a: 0.6 * i / max(1, len(mine) - 1) for i, a in enumerate(mine)})
    from matplotlib.lines import Line2D

    handles = []
    ids_of = {aid: g for aid, g in sel[["run_id", ARM]].groupby(ARM, sort=False)}  # one pass, two columns
    for aid in arms:
        group = ids_of[aid]
        hue, sty = palette.hue_of[aid], palette.curve_style_of[aid]
        color = style.CYCLE[arms.index(aid) % len(style.CYCLE)] if by_arm else \
            _lighter(palette.color[hue], shades.get(aid, 0.0))
        ls = styles[sty] if styles else "-"
        series = []
        for rid in group["run_id"]:
            c = by_run[rid]
            train = c[c["train_loss"].notna()]
            if train.empty:
                continue
            window = max(1, len(train) // 20)
            y = train["train_loss"].rolling(window, center=True, min_periods=1).mean()
            series.append((train["tokens"].astype(float).to_numpy(), y.to_numpy()))
        if series:
            grid = np.unique(np.concatenate([s[0] for s in series]))
            ys = np.vstack([np.interp(grid, s[0], s[1], left=np.nan, right=np.nan) for s in series])
            with np.errstate(all="ignore"):
                mean = np.nanmean(ys, axis=0)
                low, high = np.nanmin(ys, axis=0), np.nanmax(ys, axis=0)
            ids = list(group["run_id"].astype(str))
            style.tag(ax.plot(grid, mean, linestyle=ls, color=color, linewidth=1.4), ids)
            if len(series) > 1:
                style.tag(ax.fill_between(grid, low, high, color=color, alpha=0.15, linewidth=0), ids)
        vals = [by_run[rid][by_run[rid]["val_loss"].notna()] for rid in group["run_id"]]
        vals = [v for v in vals if not v.empty]
        if vals:
            import pandas as pd

            v = pd.concat(vals).groupby("step").agg(tokens=("tokens", "mean"), val_loss=("val_loss", "mean"))
            style.tag(ax.plot(v["tokens"], v["val_loss"], "o", color=color, markersize=3.5, markeredgecolor="black",
                              markeredgewidth=0.4), list(group["run_id"].astype(str)))
        several = sum(1 for a in arms if palette.hue_of[a] == hue) > 1  # the style tells this colour's arms apart
        label = sty if by_arm or hue == "all runs" else f"{hue}, {sty}" if several else hue
        handles.append(Line2D([], [], color=color, linestyle=ls, label=f"{label}, n={len(series)}"))
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
