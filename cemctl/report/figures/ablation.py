"""Figure kind `ablation` (experiments/t2_ablation.toml), for `cemctl report`.

One factor moved at a time away from a default arm, each arm at T=1 and T=2:
a dot plot of test loss per arm (T=1 and T=2 side by side, mean +- 1 s.d. over
seeds), the Llama reference dashed, and a table with the T=2 - T=1 difference
of each arm, paired by seed (mean and a 95% t interval over the seed pairs).

An arm is named by the settings in which it differs from the most common value
of each varied setting ("defaults" when it differs in none), so a grid of
[[extra]] runs that each change one knob reads as that knob.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cemctl.report import style
from cemctl.report.aggregate import SEED_COLUMN, finished
from cemctl.report.parts import FigurePart, ReportParts, TablePart

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

STEP_COLUMNS = ("model.attn_steps", "model.mlp_steps")
SHOWN = STEP_COLUMNS  # T=1 and T=2 by marker, side by side
VALUE = "test_loss"


def arm_labels(runs: "pd.DataFrame", step_col: str) -> "pd.Series":
    """'defaults' or the settings in which each run's arm differs from the most common value of each varied key (the
    one labelling path, `cemctl.records.labels.series_names(modal=True)`; T is the figure's own axis)."""
    import pandas as pd

    from cem_core.arms import config_of
    from cemctl.records.labels import series_names

    names = series_names([config_of(r) for r in runs.to_dict("records")], shown=[step_col], modal=True)
    return pd.Series(names, index=runs.index)


def _llama_arms(llama: "pd.DataFrame") -> "list[tuple[str, pd.DataFrame]]":
    """The Llama runs by arm, each named ("Llama" when there is one; else by what tells them apart)."""
    from cem_core.arms import config_of
    from cemctl.records.labels import series_names
    from cemctl.report.arms import ARM

    if llama.empty:
        return []
    if ARM not in llama.columns or llama[ARM].nunique() == 1:
        return [("Llama", llama)]
    groups = [g for _, g in llama.groupby(ARM, sort=False)]
    names = series_names([config_of(g.iloc[0].to_dict()) for g in groups], always_arch=True)
    return list(zip(names, groups))


def paired_difference(a: "pd.DataFrame", b: "pd.DataFrame") -> dict[str, Any]:
    """mean, 95% t half-width and n of (b - a) over the seeds both have (NaN half-width for n < 2)."""
    import math

    from scipy import stats

    left = a.set_index(SEED_COLUMN)[VALUE].astype(float)
    right = b.set_index(SEED_COLUMN)[VALUE].astype(float)
    seeds = sorted(set(left.index) & set(right.index))
    d = [float(right[s] - left[s]) for s in seeds]
    n = len(d)
    if n == 0:
        return {"mean": float("nan"), "ci95": float("nan"), "n": 0}
    mean = sum(d) / n
    if n < 2:
        return {"mean": mean, "ci95": float("nan"), "n": n}
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    return {"mean": mean, "ci95": float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n), "n": n}


def render(runs: "pd.DataFrame", curves: "pd.DataFrame | None" = None) -> ReportParts:
    import numpy as np
    import pandas as pd

    from matplotlib.lines import Line2D

    from cemctl.report.generic import palette_of

    parts = ReportParts()
    palette = palette_of(runs)  # the report's colours
    done = finished(runs, VALUE)
    if done.empty:
        parts.notes.append("ablation: no finished runs")
        return parts
    roles = pd.Series([style.role(r) for r in done.to_dict("records")], index=done.index)
    llama = done[roles.eq("llama")]
    cem = done[~roles.eq("llama")]
    if cem.empty:
        parts.notes.append("ablation: no CEM runs")
        return parts
    step_col = max(STEP_COLUMNS, key=lambda c: cem[c].nunique() if c in cem else 0)
    cem = cem.assign(arm=arm_labels(cem, step_col))
    arms = list(dict.fromkeys(["defaults"] + sorted(cem["arm"].unique())))
    arms = [a for a in arms if a in set(cem["arm"])]
    steps = sorted(int(t) for t in cem[step_col].unique())
    markers = {t: style.SIZE_MARKERS[i % len(style.SIZE_MARKERS)] for i, t in enumerate(steps)}
    fig, (ax,) = style.new_figure(1, panel_w=6.4, panel_h=0.45 * len(arms) + 1.6)
    rows = []
    for i, arm in enumerate(arms):
        group = cem[cem["arm"].eq(arm)]
        color = palette.color_for(group.iloc[0])  # the arm's colour in every figure of the report
        by_t = {t: group[group[step_col].eq(t)] for t in steps}
        for j, t in enumerate(steps):
            g = by_t[t]
            if g.empty:
                continue
            vals = g[VALUE].astype(float)
            stats = pd.DataFrame({"mean": [vals.mean()], "std": [vals.std(ddof=1) if len(vals) > 1 else np.nan],
                                  "n": [len(vals)]})
            y = i + (j - (len(steps) - 1) / 2) * 0.22
            style.tag(ax.errorbar(stats["mean"], [y], xerr=np.nan_to_num(stats["std"]), fmt=markers[t], color=color,
                                  capsize=3, markersize=6), list(g["run_id"].astype(str)))
        row: dict[str, Any] = {"arm": arm}
        for t in steps:
            vals = by_t[t][VALUE].astype(float)
            row[f"T={t} loss (mean)"] = float(vals.mean()) if len(vals) else None
            row[f"T={t} loss (s.d.)"] = float(vals.std(ddof=1)) if len(vals) > 1 else None
            row[f"T={t} n"] = int(len(vals))
        if 1 in steps and 2 in steps:
            diff = paired_difference(by_t[1], by_t[2])
            row["T2 - T1 (mean)"], row["T2 - T1 (95% CI +-)"], row["pairs"] = diff["mean"], diff["ci95"], diff["n"]
        rows.append(row)
    for name, base in _llama_arms(llama):  # one reference per Llama arm: two are never averaged into one
        mean, sd = float(base[VALUE].mean()), float(base[VALUE].std(ddof=1)) if len(base) > 1 else float("nan")
        style.baseline_line_vertical(ax, mean, sd, len(base), color=palette.color_for(base.iloc[0]),
                                     runs=list(base["run_id"].astype(str)), label=name)
        for row in rows:
            row["Llama loss" if name == "Llama" else f"{name} loss"] = mean
    ax.set_yticks(range(len(arms)))
    ax.set_yticklabels(arms)
    ax.invert_yaxis()
    from cemctl.report.generic import metric_label

    ax.set_xlabel(metric_label(VALUE, runs))  # the unit as it is: nats per byte with the byte tokenizer
    ax.set_ylabel("arm (what differs from the defaults)")
    handles = [Line2D([], [], color="0.35", marker=markers[t], linestyle="none", label=f"T={t}") for t in steps]
    ax.legend(handles=handles + ax.get_legend_handles_labels()[0], fontsize=8, loc="best")
    what = "attention" if step_col == "model.attn_steps" else "MLP"
    caption = (f"Test loss of CEM {what} at T={' and T='.join(map(str, steps))} (marker) for each arm (one setting "
               "moved away from the defaults; its colour in the report's other figures); dashed: Llama (band \u00b11 "
               "s.d.). "
               f"{style.SPREAD_NOTE}.")
    parts.figures.append(FigurePart("ablation", fig, caption))
    parts.tables.append(TablePart("ablation", pd.DataFrame(rows),
                                  "Test loss per arm and T (mean over seeds, s.d. with ddof=1), and T=2 - T=1 paired "
                                  "by seed with a 95% t interval (negative: T=2 is better)."))
    return parts
