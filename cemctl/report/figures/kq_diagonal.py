"""Figure kind `kq_diagonal` (paper Fig. 3b), for `cemctl report`.

CEM attention (Llama MLP) with the three KQ diagonal strategies: none, shared
across heads, per head; one panel per size, the Llama baseline of the same dims
dashed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cemctl.report import style
from cemctl.report.aggregate import (aggregate_seeds, baseline_lines, match_baselines, series_labels,
                                     unpaired_notes)
from cemctl.report.parts import FigurePart, ReportParts, TablePart

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

STRATEGIES = ("none", "shared", "per_head")
KQ_COLUMN = "model.kq_diagonal"
SHORT = {"none": "none", "shared": "shared", "per_head": "per-head"}
SHOWN = (KQ_COLUMN, "model.size")  # x and panels


def render(runs: "pd.DataFrame", curves: "pd.DataFrame | None" = None) -> ReportParts:
    import pandas as pd

    from cemctl.report.generic import palette_of

    parts = ReportParts()
    palette = palette_of(runs)  # the report's colours
    agg = aggregate_seeds(runs)
    if agg.empty:
        parts.notes.append("kq_diagonal: no finished runs")
        return parts
    base_idx = match_baselines(agg)
    sub = agg[agg["role"].eq("attention")]
    if sub.empty:
        parts.notes.append("kq_diagonal: no CEM attention runs with a Llama MLP")
        return parts
    # Anything else that varies (preconditioner, T, lr, ...) becomes a separate series: arms are never merged.
    sub = sub.assign(series=series_labels(sub, [KQ_COLUMN, "model.size"]))
    others = sub["series"].nunique() > 1
    series_names = list(dict.fromkeys(sub["series"]))
    colors = {name: palette.color_for(g.iloc[0]) for name, g in sub.groupby("series", sort=False)}
    sizes = style.size_order(sub["model.size"])
    ncols, nrows = style.grid_shape(len(sizes))
    fig, axes = style.new_figure(ncols, nrows, panel_w=3.8)
    strategies = [s for s in STRATEGIES if s in set(sub[KQ_COLUMN])] + \
        sorted(set(sub[KQ_COLUMN]) - set(STRATEGIES))
    xpos = {s: i for i, s in enumerate(strategies)}
    base_ns = [int(agg.at[int(b), "n"]) for b in set(base_idx[sub.index]) if b >= 0]
    rows = []
    for ax, size in zip(axes, sizes):
        panel = sub[sub["model.size"].eq(size)]
        for j, series in enumerate(series_names):
            group = panel[panel["series"].eq(series)]
            if group.empty:
                continue
            offset = (j - (len(series_names) - 1) / 2) * 0.12
            for strategy, row in group.groupby(KQ_COLUMN):
                style.plot_seed_points(ax, [xpos[strategy] + offset], row, line=None, markersize=8,
                                       color=colors[series], marker=style.SIZE_MARKERS[j % len(style.SIZE_MARKERS)])
        bases = sorted({int(base_idx[i]) for i in panel.index if base_idx[i] >= 0})
        baseline_lines(ax, agg, bases, [KQ_COLUMN, "model.size"], label_ns=base_ns, palette=palette)
        ax.set_xticks(range(len(strategies)))
        ax.set_xticklabels([SHORT.get(s, s) for s in strategies])  # type: ignore[misc]
        ax.set_xlim(-0.6, len(strategies) - 0.4)
        ax.set_xlabel("KQ diagonal in A_k")
        ax.set_ylabel("test perplexity")
        params = f" ({style.params_m(agg.at[bases[0], 'params_total']):.3g}M Llama params)" if bases else ""
        ax.set_title(f"{size}{params}", fontsize=10)
        for i, r in panel.iterrows():  # each row against its own baseline: the same training setup, or none
            base = agg.loc[int(base_idx[i])] if base_idx[i] >= 0 else None
            rows.append({"size": size, **({"series": r["series"]} if others else {}),
                         "KQ diagonal": style.KQ_LABELS.get(r[KQ_COLUMN], r[KQ_COLUMN]),
                         "params (M)": style.params_m(r["params_total"]),
                         "test ppl (mean)": r["mean"], "test ppl (s.d.)": r["std"], "n seeds": int(r["n"]),
                         "Llama ppl": base["mean"] if base is not None else None,
                         "ppl - Llama": (r["mean"] - base["mean"]) if base is not None else None})
    parts.notes += unpaired_notes(agg, base_idx, series_labels(sub, []), "kq_diagonal")
    for ax in axes[len(sizes):]:
        ax.set_visible(False)
    from matplotlib.lines import Line2D

    extra = [Line2D([], [], color=colors[s], marker=style.SIZE_MARKERS[j % len(style.SIZE_MARKERS)], linestyle="none",
                    label=f"{s}, {style.n_note(sub.loc[sub['series'].eq(s), 'n'])}") for j, s in enumerate(series_names)]
    style.figure_legend(fig, axes[:len(sizes)], sub["n"], extra=extra)
    setting = series_names[0] if len(series_names) == 1 else "several settings"
    caption = ("KQ diagonal strategies in CEM attention (Llama MLP; " + setting + "): no diagonal, one diagonal "
               "shared by all heads, one per head. Dashed: the Llama baseline of the same dims (band = \u00b11 s.d.). "
               f"{style.SPREAD_NOTE}.")
    parts.figures.append(FigurePart("kq_diagonal", fig, caption))
    parts.tables.append(TablePart("kq_diagonal", pd.DataFrame(rows),
                                  "Test perplexity per size and KQ diagonal strategy (mean over seeds, s.d. with "
                                  "ddof=1) and the difference to Llama."))
    return parts
