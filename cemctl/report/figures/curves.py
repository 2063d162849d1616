"""Figure kind `curves` (the demo), for `cemctl report`.

The training curves per arm are in every report (`cemctl.report.generic.arm_curves`);
this kind adds a chart of test perplexity per arm (mean +- s.d. over seeds), each
arm named by the paper's name of its architecture where that tells the arms apart,
else by its label (the keys that vary), and the table behind it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cemctl.report import style
from cemctl.report.aggregate import aggregate_seeds
from cemctl.report.parts import FigurePart, ReportParts, TablePart

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


def arm_names(agg: "pd.DataFrame") -> list[str]:
    """Each arm named by the one labelling path (`cemctl.records.labels.series_names`)."""
    from cemctl.report.aggregate import series_labels

    return list(series_labels(agg, []))


def _colors(runs: "pd.DataFrame", agg: "pd.DataFrame") -> list[str]:
    """Each arm's colour in the report's other figures (its palette, `report.generic.palette_of`)."""
    from cemctl.report.generic import palette_of

    palette = palette_of(runs)
    return [palette.color_for(r) for r in agg.to_dict("records")]


def perplexity_chart(agg: "pd.DataFrame", names: list[str], colors: list[str] | None = None) -> FigurePart:
    """Horizontal point chart of test perplexity per arm, mean +- s.d. (each arm in its colour of the report)."""
    from matplotlib.ticker import NullLocator

    colors = colors or [style.CYCLE[i % len(style.CYCLE)] for i in range(len(agg))]
    order = sorted(range(len(agg)), key=lambda i: -float(agg["mean"].iloc[i]))
    fig, (ax,) = style.new_figure(1, panel_w=6.4, panel_h=max(2.2, 0.42 * len(agg) + 0.8))
    for y, i in enumerate(order):
        r = agg.iloc[i]
        color = colors[i]
        ids = r["run_ids"] if "run_ids" in r else None
        if int(r["n"]) >= 2:
            style.tag(ax.errorbar([r["mean"]], [y], xerr=[r["std"]], fmt="o", color=color, capsize=3, markersize=7),
                      ids)
        else:
            style.tag(ax.plot([r["mean"]], [y], "o", markerfacecolor="white", markeredgecolor=color,
                              markeredgewidth=1.6, markersize=7), ids)
    ax.set_yticks(range(len(order)))
    ax.set_yticklabels([f"{names[i]} (n={int(agg['n'].iloc[i])})" for i in order], fontsize=8.5)
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_ylim(-0.7, len(order) - 0.3)
    ax.set_xlabel("test perplexity")
    ax.set_ylabel("arm")
    ax.set_title("test perplexity per arm", fontsize=10)
    style.figure_legend(fig, [ax], agg["n"])
    return FigurePart("test_perplexity", fig, f"Test perplexity per arm (in its colour of the training curves). "
                      f"{style.SPREAD_NOTE}.")


def render(runs: "pd.DataFrame", curves: "pd.DataFrame | None" = None) -> ReportParts:
    parts = ReportParts()
    agg = aggregate_seeds(runs)
    if agg.empty:
        parts.notes.append("curves: no finished runs")
        return parts
    names = arm_names(agg)
    parts.figures.append(perplexity_chart(agg, names, _colors(runs, agg)))
    table = agg.assign(arm=names)[["arm", "params_total", "tokens", "mean", "std", "n", "seeds"]]
    table = table.rename(columns={"params_total": "params", "mean": "test ppl (mean)", "std": "test ppl (s.d.)",
                                  "n": "n seeds"}).sort_values("test ppl (mean)")
    parts.tables.append(TablePart("test_perplexity", table.reset_index(drop=True),
                                  "Test perplexity per arm: mean and s.d. (ddof=1) over the seeds listed."))
    return parts
