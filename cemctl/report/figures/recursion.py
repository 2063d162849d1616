"""Figure kind `recursion` (paper Fig. 2c/2d), for `cemctl report`.

Test perplexity against the recursion steps T of a CEM sublayer, one line per
preconditioner (and whatever else varies; the report's colours), one panel per
model size, the Llama baseline of the same dims and training setup dashed. One figure for CEM attention (2c: Llama MLP) and one for the
CEM MLP (2d: Llama attention), for those present in the results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cemctl.report import style
from cemctl.report.aggregate import baseline_lines, render_per_component, series_labels, unpaired_notes
from cemctl.report.parts import FigurePart, ReportParts, TablePart

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from cemctl.report.generic import Palette

SHOWN = ("model.attn_steps", "model.mlp_steps", "model.size")  # x (the first that varies), panels

COMPONENTS = {
    # role: (steps column, preconditioner column, figure name, title)
    "attention": ("model.attn_steps", "model.attn_precond", "recursion_attention", "CEM attention"),
    "mlp": ("model.mlp_steps", "model.mlp_precond", "recursion_mlp", "CEM MLP"),
}


def render_component(agg: "pd.DataFrame", base_idx: "pd.Series", component: str, palette: "Palette") -> ReportParts:
    import pandas as pd

    steps_col, precond_col, name, title = COMPONENTS[component]
    parts = ReportParts()
    sub = agg[agg["role"].eq(component)]
    if sub.empty:
        return parts
    # a series per preconditioner, and per value of anything else that varies (never two arms in one line)
    sub = sub.assign(series=series_labels(sub, [steps_col, "model.size"]))
    sizes = style.size_order(sub["model.size"])
    ncols, nrows = style.grid_shape(len(sizes))
    fig, axes = style.new_figure(ncols, nrows)
    colors = {lab: palette.color_for(g.iloc[0]) for lab, g in sub.groupby("series", sort=False)}
    series_ns: dict[str, list[int]] = {}
    for lab, n in zip(sub["series"], sub["n"]):
        series_ns.setdefault(lab, []).append(int(n))
    base_ns = [int(agg.at[int(b), "n"]) for b in set(base_idx[sub.index]) if b >= 0]
    rows = []
    for ax, size in zip(axes, sizes):
        panel = sub[sub["model.size"].eq(size)].copy()
        for j, (series, group) in enumerate(panel.groupby("series", sort=True)):
            group = group.sort_values(steps_col)
            # a small horizontal offset per series keeps error bars apart
            offset = (j - (panel["series"].nunique() - 1) / 2) * 0.04
            style.plot_seed_points(ax, [float(t) + offset for t in group[steps_col]], group, color=colors[series],
                                   label=str(series), label_ns=series_ns[series])
        bases = sorted({int(base_idx[i]) for i in panel.index if base_idx[i] >= 0})
        baseline_lines(ax, agg, bases, [steps_col, "model.size"], label_ns=base_ns, palette=palette)
        steps = sorted({int(t) for t in panel[steps_col]})
        ax.set_xticks(steps)
        ax.set_xlim(min(steps) - 0.4, max(steps) + 0.4)
        params = f" ({style.params_m(agg.at[bases[0], 'params_total']):.3g}M Llama params)" if bases else ""
        ax.set_title(f"{size}{params}", fontsize=10)
        ax.set_xlabel("recursion steps T")
        ax.set_ylabel("test perplexity")
        for i, r in panel.iterrows():  # each row against its own baseline: the same training setup, or none
            base = agg.loc[int(base_idx[i])] if base_idx[i] >= 0 else None
            rows.append({"size": size, "series": r["series"], "T": int(r[steps_col]),
                         "params (M)": style.params_m(r["params_total"]), "test ppl (mean)": r["mean"],
                         "test ppl (s.d.)": r["std"], "n seeds": int(r["n"]),
                         "Llama ppl": base["mean"] if base is not None else None,
                         "ppl - Llama": (r["mean"] - base["mean"]) if base is not None else None})
    parts.notes += unpaired_notes(agg, base_idx, series_labels(sub, []), f"recursion ({title})")
    for ax in axes[len(sizes):]:
        ax.set_visible(False)
    style.suptitle(fig, f"{title}: recursion steps and preconditioners (dashed: Llama baseline)")
    style.figure_legend(fig, axes[:len(sizes)], sub["n"])
    caption = (f"{title} with T recursion steps per layer and each preconditioner (colour), one panel per size; "
               f"all models dimension-matched to the Llama baseline (dashed, band = \u00b11 s.d.). "
               f"{style.SPREAD_NOTE}.")
    parts.figures.append(FigurePart(name, fig, caption))
    parts.tables.append(TablePart(name, pd.DataFrame(rows), f"{title}: test perplexity per size, series (the "
                                  "preconditioner, and whatever else varies) and T (mean over seeds, s.d. with ddof=1) "
                                  "and the difference to Llama of the same training setup."))
    return parts


def render(runs: "pd.DataFrame", curves: "pd.DataFrame | None" = None) -> ReportParts:
    return render_per_component(runs, COMPONENTS, render_component, kind="recursion",
                                none_note="no CEM attention (with Llama MLP) or CEM MLP (with Llama attention) runs")
