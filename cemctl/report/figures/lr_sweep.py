"""Figure kind `lr_sweep` (paper Fig. 3a), for `cemctl report`.

Left: test perplexity against the learning rate (log axis) for each variant
(the report's colours: Llama pink) and size (marker shape), with the optimum
of the Akima interpolant in log-lr (`cemctl.report.optimum`) marked by a star.
Right: the interpolated optimal perplexity against parameters, Llama vs CEM.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cemctl.report import style
from cemctl.report.aggregate import aggregate_seeds, series_labels
from cemctl.report.optimum import akima_curve, akima_optimum
from cemctl.report.parts import FigurePart, ReportParts, TablePart

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

LR_COLUMN = "train.lr"
SHOWN = (LR_COLUMN, "model.size")  # x, marker


def optima_table(agg: "pd.DataFrame") -> "pd.DataFrame":
    """One row per (variant, size): Akima optimum and best sampled point of the seed means."""
    import pandas as pd

    rows = []
    for (variant, size), group in agg.groupby(["variant", "model.size"], sort=False):
        group = group.sort_values(LR_COLUMN)
        opt = akima_optimum(group[LR_COLUMN].tolist(), group["mean"].tolist())
        best = group.loc[group["mean"].idxmin()]
        rows.append({
            "variant": variant, "size": size, "role": group["role"].iloc[0],
            "params (M)": style.params_m(group["params_total"].iloc[0]),
            "learning rates": int(group[LR_COLUMN].nunique()),
            "n seeds": style.n_note(group["n"]).removeprefix("n="),
            "optimal lr": opt.lr, "optimal test ppl": opt.value, "method": opt.method,
            "optimum at edge": opt.at_edge,
            "best sampled lr": float(best[LR_COLUMN]), "best sampled ppl (mean)": float(best["mean"]),
            "best sampled ppl (s.d.)": float(best["std"]),
            "note": "; ".join(sorted({m for m in group.get("marks", []) if isinstance(m, str) and m})),
        })
    return style.sort_by_size(pd.DataFrame(rows), ["role", "size"])


def render(runs: "pd.DataFrame", curves: "pd.DataFrame | None" = None) -> ReportParts:
    from cemctl.report.generic import palette_of

    parts = ReportParts()
    palette = palette_of(runs)  # the report's colours
    agg = aggregate_seeds(runs)
    if agg.empty:
        parts.notes.append("lr_sweep: no finished runs")
        return parts
    # a sweep per arm-without-lr: anything else that varies is named in the variant (never two arms in one curve)
    agg = agg.assign(variant=series_labels(agg, [LR_COLUMN, "model.size"]))
    table = optima_table(agg)
    sizes = style.size_order(agg["model.size"])
    variants = list(dict.fromkeys(table["variant"]))
    colors = {v: palette.color_for(g.iloc[0]) for v, g in agg.groupby("variant", sort=False)}
    fig, (ax_lr, ax_opt) = style.new_figure(2, panel_w=5.2, panel_h=3.9)
    for (variant, size), group in agg.groupby(["variant", "model.size"], sort=False):
        group = group.sort_values(LR_COLUMN)
        color, marker = colors[variant], style.size_marker(size, sizes)
        xs, ys = akima_curve(group[LR_COLUMN].tolist(), group["mean"].tolist())
        ids = style.runs_of(group["run_ids"])
        style.tag(ax_lr.plot(xs, ys, "-", color=color, linewidth=1.2, alpha=0.8, zorder=2), ids)
        style.plot_seed_points(ax_lr, group[LR_COLUMN].tolist(), group, color=color, marker=marker, line=None)
        row = table[(table["variant"] == variant) & (table["size"] == size)].iloc[0]
        style.tag(ax_lr.plot([row["optimal lr"]], [row["optimal test ppl"]], "*", color=color, markersize=15,
                             markeredgecolor="black", markeredgewidth=0.7, zorder=5), ids)
        if row["learning rates"] < 3:
            parts.notes.append(f"lr_sweep: {variant} ({size}) has {row['learning rates']} learning rate(s); "
                               "the star is the best sampled point, not an Akima optimum")
        elif row["optimum at edge"]:
            parts.notes.append(f"lr_sweep: the optimum of {variant} ({size}) lies at the edge of the sweep "
                               f"(lr={row['optimal lr']:.3g}); widen the sweep")
    style.lr_axis(ax_lr, agg[LR_COLUMN])
    ax_lr.set_ylabel("test perplexity")
    ax_lr.set_title("(a) learning-rate sweep, \u2605 = Akima optimum", fontsize=10)
    for variant in variants:
        sub = table[table["variant"].eq(variant)]
        sub = sub.assign(_o=sub["size"].map({s: i for i, s in enumerate(sizes)})).sort_values("_o")
        ids = style.runs_of(agg.loc[agg["variant"].eq(variant), "run_ids"])
        style.tag(ax_opt.plot(sub["params (M)"], sub["optimal test ppl"], "-", color=colors[variant], linewidth=1.0,
                              alpha=0.6), ids)
        for _, r in sub.iterrows():
            style.tag(ax_opt.plot([r["params (M)"]], [r["optimal test ppl"]], style.size_marker(r["size"], sizes),
                                  color=colors[variant], markersize=9, markeredgecolor="black", markeredgewidth=0.5),
                      style.runs_of(agg.loc[agg["variant"].eq(variant) & agg["model.size"].eq(r["size"]), "run_ids"]))
    ax_opt.set_xlabel("parameters (M)")
    ax_opt.set_ylabel("optimal test perplexity (interpolated)")
    ax_opt.set_title("(b) optimal perplexity against parameters", fontsize=10)
    ax_opt.margins(x=0.12, y=0.12)
    from matplotlib.lines import Line2D

    extra = [Line2D([], [], color=colors[v], marker="s", linestyle="-",
                    label=f"{v}, {style.n_note(agg.loc[agg['variant'].eq(v), 'n'])}") for v in variants]
    extra += [Line2D([], [], color="0.35", marker=style.size_marker(s, sizes), linestyle="none", label=f"size {s}")
              for s in sizes]
    extra.append(Line2D([], [], color="0.35", marker="*", markersize=12, markeredgecolor="black", linestyle="none",
                        label="Akima optimum (log-lr)"))
    style.figure_legend(fig, [], agg["n"], extra=extra, max_cols=4)
    caption = ("(a) Test perplexity against the peak learning rate (log scale) per variant (colour) and size "
               "(marker); lines are the Akima interpolant of the seed means in log-lr, stars its minimum. "
               "(b) The interpolated optimal perplexity against total parameters (M). "
               f"{style.SPREAD_NOTE}.")
    parts.figures.append(FigurePart("lr_sweep", fig, caption))
    parts.tables.append(TablePart("lr_sweep_optima", table.drop(columns=["role"]),
                                  "Akima-interpolated optimal learning rate and test perplexity per variant and size, "
                                  "with the best sampled point (seed mean, s.d. with ddof=1)."))
    return parts
