"""The learning-rate profiles a report's figures chose from (`cemctl.report.lr_choice`), for `cemctl report`.

Drawn for any grid whose arms run at several learning rates when its figures show each arm at one rate: test
perplexity (the report's metric, as perplexity for a loss) against the learning rate (log axis), one line per arm in
the report's colour (arms sharing a colour by line style and marker), the rate each figure shows ringed, one panel per
model size. Not a figure kind: the profiles of a grid whose kind draws every rate anyway (`lr_sweep`) are that kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cemctl.report import style
from cemctl.report.parts import FigurePart, ReportParts, TablePart

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from cemctl.report.lr_choice import RateChoice

LR = "train.lr"
MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def render(runs: "pd.DataFrame", choice: "RateChoice", *, value: str = "test_ppl") -> ReportParts:
    """`runs`: every run of the report (with `train.lr`); `choice`: the rates the figures show."""
    import pandas as pd
    from matplotlib.lines import Line2D

    from cemctl.report.aggregate import aggregate_seeds, series_labels
    from cemctl.report.generic import Palette, palette_of

    parts = ReportParts()
    agg = aggregate_seeds(runs, value)
    if agg.empty:
        return parts
    agg = agg.assign(_arm=series_labels(agg, [LR, "model.size"]))
    palette = palette_of(runs)
    shown_runs = set(choice.runs["run_id"]) if "run_id" in choice.runs.columns else set()
    arms = list(dict.fromkeys(agg["_arm"]))
    colors = {a: palette.color_for(agg[agg["_arm"].eq(a)].iloc[0]) for a in arms}
    # arms of one colour told apart by line style and marker, in their order
    by_color: dict[str, list[str]] = {}
    for a in arms:
        by_color.setdefault(colors[a], []).append(a)
    styles = {}
    for same in by_color.values():
        same = sorted(same)  # T=1 before T=2: solid and circles first, as the recursion figures
        lines = Palette.linestyles(same) or {a: "-" for a in same}
        for j, a in enumerate(same):
            styles[a] = (lines[a], MARKERS[j % len(MARKERS)])
    sizes = style.size_order(agg["model.size"]) if "model.size" in agg.columns else [None]
    ncols, nrows = style.grid_shape(len(sizes))
    fig, axes = style.new_figure(ncols, nrows, panel_w=5.6, panel_h=4.0)
    rows = []
    for ax, size in zip(axes, sizes):
        panel = agg if size is None else agg[agg["model.size"].eq(size)]
        for arm, group in panel.groupby("_arm", sort=False):
            group = group.sort_values(LR)
            line, marker = styles[arm]
            ids = style.runs_of(group["run_ids"])
            xs = group[LR].astype(float).tolist()
            style.tag(ax.plot(xs, group["mean"], linestyle=line, color=colors[arm], linewidth=1.3, zorder=2), ids)
            style.plot_seed_points(ax, xs, group, color=colors[arm], marker=marker, line=None)
            for r in group.to_dict("records"):
                chosen = bool(style.runs_of(r["run_ids"]) & shown_runs)
                if chosen:  # the rate the other figures show: ringed
                    style.tag(ax.plot([float(r[LR])], [r["mean"]], "o", markersize=15, markerfacecolor="none",
                                      markeredgecolor=colors[arm], markeredgewidth=1.4, zorder=4),
                              style.runs_of(r["run_ids"]))
                rows.append({"size": size, "arm": arm, "lr": float(r[LR]), f"{value} (mean)": r["mean"],
                             f"{value} (s.d.)": r["std"], "n seeds": int(r["n"]), "shown in the figures": chosen})
        style.lr_axis(ax, panel[LR], fontsize=8, rotate_over=6)
        ax.set_ylabel("test perplexity" if value == "test_ppl" else value)
        if size is not None and len(sizes) > 1:
            ax.set_title(f"size {size}", fontsize=10)
    for ax in axes[len(sizes):]:
        ax.set_visible(False)
    extra = [Line2D([], [], color=colors[a], linestyle=styles[a][0], marker=styles[a][1],  # type: ignore[arg-type]
                    label=f"{a}, {style.n_note(agg.loc[agg['_arm'].eq(a), 'n'])}") for a in arms]
    extra.append(Line2D([], [], marker="o", markersize=12, markerfacecolor="none", markeredgecolor="0.3",
                        linestyle="none", label="the rate the figures show"))
    style.figure_legend(fig, [], agg["n"], extra=extra, max_cols=2)
    style.suptitle(fig, "learning-rate profiles: each arm at every rate it ran")
    caption = ("Test perplexity against the peak learning rate (log scale), one line per arm (every config value but "
               "the seed and the rate), in the report's colours; ringed: the rate the report's other figures show "
               "(the lowest mean validation loss among the rates with the arm's full seed count). "
               f"{style.SPREAD_NOTE}.")
    parts.figures.append(FigurePart("lr_profiles", fig, caption))
    parts.tables.append(TablePart("learning_rates", choice.table, "The learning rate each figure shows per arm: "
                                  "the rates it ran (finished seeds at each), the chosen one (the lowest mean "
                                  "validation loss among the rates with the arm's full seed count), whether it is an "
                                  "end of the profile (the optimum may lie beyond it) or a run an earlier version of "
                                  "the grid planned, what it was chosen by and the mean of that (validation loss, "
                                  "nats per token of the tokenizer) at it and at the runner-up rate: a small gap is a "
                                  "near tie."))
    parts.tables.append(TablePart("lr_profiles", pd.DataFrame(rows), "Every arm at every learning rate it ran: "
                                  "the seed mean and s.d. (ddof=1) and whether the report's figures show that rate."))
    return parts
