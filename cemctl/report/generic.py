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

from typing import TYPE_CHECKING, Any, Sequence

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
    """The grid's first varying numeric axis (its file order), else its first varying key."""
    ordered = [k for k in order if k in keys] + [k for k in keys if k not in order]
    for k in ordered:
        vals = runs[k].dropna()
        if len(vals) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            return k
    return ordered[0] if ordered else None


def _numeric(values: Sequence[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


LINESTYLES = ("-", "--", ":", "-.")
PALETTE_ATTR = "cemctl_palette"  # where a report leaves its Palette on the runs frame, for the figure kinds


class Palette:
    """Colours and line styles of a report's generic figures, a stable function of the values they stand for.

    Colour: the arm's *hue series* (`cemctl.records.labels.series_names` with the figure's x shown; with the
    grid's `hue` keys, only those name it), in the order the arms come (grid order): the same value has the same
    colour in the metric figure and in the curves. Line style: what else tells the arms of one colour apart (the
    other varying keys when `hue` is given; in the curves, also the x value, which the curves do not plot).
    """

    def __init__(self, runs: "pd.DataFrame", *, x: str | None, hue: Sequence[str] = (), order: Sequence[str] = (),
                 nuisance: Sequence[str] = ("train.seed",)) -> None:
        from cemctl.records.labels import series_names

        arms = runs.drop_duplicates(ARM)
        configs = [config_of(r) for r in arms.to_dict("records")]
        keys = varying(runs, nuisance)
        hue_keys = [k for k in (hue or []) if k in keys]
        rest = [k for k in keys if k != x and k not in hue_keys] if hue_keys else []
        shown = [k for k in [x, *rest] if k]
        self.hue_of = dict(zip(arms[ARM], series_names(configs, shown=shown, nuisance=nuisance, order=order)))
        other = [k for k in [x, *hue_keys] if k]
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
        self.color = {h: style.CYCLE[i % len(style.CYCLE)] for i, h in enumerate(hues)}
        self.x = x

    @staticmethod
    def linestyles(names: Sequence[str]) -> dict[str, str] | None:
        """A line style per distinct name (None when there are more than LINESTYLES: then colours carry it)."""
        distinct = list(dict.fromkeys(names))
        if len(distinct) > len(LINESTYLES):
            return None
        return {n: LINESTYLES[i] for i, n in enumerate(distinct)}


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
                      "n": len(vals), "label": g[ARM_LABEL].iloc[0]})
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
    styles = Palette.linestyles([s for _, s in series]) or {}
    single_style = len({s for _, s in series}) <= 1
    for i, (h, st) in enumerate(series):
        sub = table[table["hue"].eq(h) & table["style"].eq(st)]
        sub = sub.assign(_p=[positions[v] for v in sub["x"]]).sort_values("_p")
        line = (styles.get(st, "-") if numeric else None)  # a categorical x is never joined by a line
        label = h if single_style else (f"{h}, {st}" if not styles else h)
        style.plot_seed_points(ax, _dodge(list(sub["_p"]), i, len(series), log=log, numeric=numeric), sub,
                               color=pal.color[h], label=label, line=line)
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
    extra = []
    if styles and not single_style:
        from matplotlib.lines import Line2D

        extra = [Line2D([], [], color="0.35", linestyle=ls, label=st) for st, ls in styles.items()]
    style.figure_legend(fig, [ax], table["n"], max_cols=2, extra=extra)
    caption = (f"{ylabel[0].upper() + ylabel[1:]} against {xname or 'the arms'}: one colour per series (what "
               f"varies besides {xname or 'nothing'}), the same colours as the training curves"
               + ("; line styles: " + ", ".join(styles) if styles and not single_style else "")
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
    for aid in arms:
        group = sel[sel[ARM].eq(aid)]
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
            ax.plot(grid, mean, linestyle=ls, color=color, linewidth=1.4)
            if len(series) > 1:
                ax.fill_between(grid, low, high, color=color, alpha=0.15, linewidth=0)
        vals = [by_run[rid][by_run[rid]["val_loss"].notna()] for rid in group["run_id"]]
        vals = [v for v in vals if not v.empty]
        if vals:
            import pandas as pd

            v = pd.concat(vals).groupby("step").agg(tokens=("tokens", "mean"), val_loss=("val_loss", "mean"))
            ax.plot(v["tokens"], v["val_loss"], "o", color=color, markersize=3.5, markeredgecolor="black",
                    markeredgewidth=0.4)
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
