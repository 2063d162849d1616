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

from cem_core.arms import ArmLabelCollision, format_value, short_names
from cemctl.report import style
from cemctl.report.arms import ARM, ARM_LABEL, config_of
from cemctl.report.parts import FigurePart

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

METRIC_LABELS = {"test_loss": "test loss (nats/token)", "test_ppl": "test perplexity", "val_loss": "validation loss",
                 "val_ppl": "validation perplexity", "test_rmse": "test RMSE"}


def varying(runs: "pd.DataFrame", nuisance: Sequence[str] = ("train.seed",)) -> list[str]:
    """Config columns with more than one value among the runs (in column order), nuisance keys excluded."""
    keys = []
    for col in runs.columns:
        if ("." in col and not col.startswith("tag.")) or col == "task":
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


def metric_figure(runs: "pd.DataFrame", *, x: str | None = None, hue: Sequence[str] | None = None,
                  metric: str = "test_loss", order: Sequence[str] = (), nuisance: Sequence[str] = ("train.seed",),
                  name: str = "metric") -> FigurePart | None:
    import numpy as np
    import pandas as pd

    done = runs[runs["state"].eq("done")] if "state" in runs else runs
    done = done[pd.to_numeric(done.get(metric), errors="coerce").notna()] if metric in done else done.iloc[0:0]
    if done.empty:
        return None
    keys = varying(runs, nuisance)
    x = x or default_x(runs, keys, order)
    rest = [k for k in keys if k != x]
    hue_keys = list(hue) if hue else rest
    hue_keys += [k for k in rest if k not in hue_keys]  # nothing that varies is averaged over
    names = short_names(hue_keys)
    stats = []
    for aid, g in done.groupby(ARM, sort=False):
        vals = g[metric].astype(float).to_numpy()
        first = config_of(g.iloc[0].to_dict())
        stats.append({"arm": aid, "x": first.get(x) if x else None,
                      "hue": ", ".join(f"{names[k]}={format_value(first.get(k))}" for k in hue_keys) or "all runs",
                      "mean": float(np.mean(vals)), "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else float("nan"),
                      "n": len(vals), "label": g[ARM_LABEL].iloc[0]})
    table = pd.DataFrame(stats)
    dup = table.duplicated(["hue", "x"], keep=False)
    if dup.any():  # cannot happen when every varying key is x or in the hue; a guard, never a silent merge
        raise ArmLabelCollision(f"two arms at one point of the {name} figure: {sorted(set(table[dup]['arm']))}")
    xs = list(dict.fromkeys(table["x"]))
    numeric = x is not None and _numeric(xs)
    positions = {v: (float(v) if numeric else i) for i, v in enumerate(sorted(xs, key=lambda v: (str(type(v)), v))
                                                                      if numeric else xs)}
    fig, (ax,) = style.new_figure(1, panel_w=6.0, panel_h=4.0)
    groups = list(dict.fromkeys(table["hue"]))
    for i, h in enumerate(groups):
        sub = table[table["hue"].eq(h)]
        sub = sub.assign(_p=[positions[v] for v in sub["x"]]).sort_values("_p")
        offset = 0.0 if numeric else (i - (len(groups) - 1) / 2) * 0.06
        style.plot_seed_points(ax, [p + offset for p in sub["_p"]], sub, color=style.CYCLE[i % len(style.CYCLE)],
                               label=h if len(groups) > 1 or h != "all runs" else "all runs")
    if numeric:
        ticks = sorted(positions.values())
        ax.set_xticks(ticks)
        ax.set_xticklabels([format_value(v) for v in sorted(xs)])
        span = max(ticks) / min(ticks) if min(ticks) > 0 else 0
        if span >= 8:  # e.g. a learning-rate sweep
            ax.set_xscale("log")
            ax.set_xticks(ticks)
            ax.set_xticklabels([format_value(v) for v in sorted(xs)])
            ax.minorticks_off()
    else:
        ax.set_xticks(list(positions.values()))
        ax.set_xticklabels([format_value(v) for v in positions])
    xname = short_names([x, *hue_keys])[x] if x else ""
    ax.set_xlabel(xname or "")
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.set_title(f"{METRIC_LABELS.get(metric, metric)} against {xname}" if x else METRIC_LABELS.get(metric, metric),
                 fontsize=10)
    style.figure_legend(fig, [ax], table["n"], max_cols=2)
    caption = (f"{METRIC_LABELS.get(metric, metric).capitalize()} against {xname or 'the arms'}"
               + (f", one line per {', '.join(names[k] for k in hue_keys)}" if hue_keys else "")
               + f"; {style.SPREAD_NOTE}.")
    return FigurePart(name, fig, caption)


def arm_curves(runs: "pd.DataFrame", curves: "pd.DataFrame | None", *, name: str = "training_curves"
               ) -> FigurePart | None:
    """Training loss per arm: the mean over seeds (line) with a band from the lowest to the highest seed."""
    import numpy as np

    if curves is None or curves.empty or runs.empty:
        return None
    sel = runs[runs["run_id"].isin(set(curves["run_id"]))]
    if sel.empty:
        return None
    is_gp = "task" in sel.columns and sel["task"].eq("gp").all()
    by_run = dict(tuple(curves.groupby("run_id", sort=False)))
    fig, (ax,) = style.new_figure(1, panel_w=6.4, panel_h=4.2)
    arms = list(dict.fromkeys(sel[ARM]))
    from matplotlib.lines import Line2D

    handles = []
    for i, aid in enumerate(arms):
        group = sel[sel[ARM].eq(aid)]
        color = style.CYCLE[i % len(style.CYCLE)]
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
            ax.plot(grid, mean, "-", color=color, linewidth=1.3)
            if len(series) > 1:
                ax.fill_between(grid, low, high, color=color, alpha=0.18, linewidth=0)
        vals = [by_run[rid][by_run[rid]["val_loss"].notna()] for rid in group["run_id"]]
        vals = [v for v in vals if not v.empty]
        if vals:
            import pandas as pd

            v = pd.concat(vals).groupby("step").agg(tokens=("tokens", "mean"), val_loss=("val_loss", "mean"))
            ax.plot(v["tokens"], v["val_loss"], "o", color=color, markersize=3.5, markeredgecolor="black",
                    markeredgewidth=0.4)
        n = len(series)
        handles.append(Line2D([], [], color=color, label=f"{group[ARM_LABEL].iloc[0]}, n={n}"))
    from matplotlib.ticker import EngFormatter

    ax.xaxis.set_major_formatter(EngFormatter())
    ax.set_xlabel("training examples" if is_gp else "training tokens")
    ax.set_ylabel("loss (mean squared error)" if is_gp else "loss (nats/token)")
    handles.append(Line2D([], [], color="0.4", marker="o", linestyle="none", markersize=4, label="validation loss (mean)"))
    style.figure_legend(fig, [], [], extra=handles, max_cols=2)
    caption = ("Training loss against training " + ("examples" if is_gp else "tokens") + " per arm: the mean over seeds "
               "(line, rolling mean over ~5% of the steps) and the band from the lowest to the highest seed; "
               "dots: validation loss, mean over seeds.")
    return FigurePart(name, fig, caption)
