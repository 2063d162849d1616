"""Figure kind `curves` (the demo), and the training curves of every report (`cemctl report --curves`).

`training_curves(runs, curves)`: training loss against tokens, one line per run
(seeds of a variant share a colour), validation loss as dots; one panel per
model size. The training loss is smoothed with a centred rolling mean (window
~5% of the steps, shown raw when short). `render` adds a chart of test
perplexity per variant (mean +- s.d. over seeds) and its table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cemctl.report import style
from cemctl.report.aggregate import aggregate_seeds
from cemctl.report.parts import FigurePart, ReportParts, TablePart

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


def _run_labels(runs: "pd.DataFrame") -> "pd.Series":
    """Variant name per run, with the learning rate when it varies."""
    import pandas as pd

    labels = [style.variant_label(r) for r in runs.to_dict("records")]
    if "train.lr" in runs.columns and runs["train.lr"].nunique() > 1:
        labels = [f"{lab}, lr={lr:g}" for lab, lr in zip(labels, runs["train.lr"])]
    return pd.Series(labels, index=runs.index)


def training_curves(runs: "pd.DataFrame", curves: "pd.DataFrame | None", *, name: str = "training_curves"
                    ) -> FigurePart | None:
    """Loss against tokens for every run of `runs` that has curve points; None when there are none."""
    import numpy as np

    if curves is None or curves.empty or runs.empty:
        return None
    have = set(curves["run_id"])
    sel = runs[runs["run_id"].isin(have)]
    if sel.empty:
        return None
    labels = _run_labels(sel)
    is_gp = "task" in sel.columns and sel["task"].eq("gp").all()
    panel_col = "gp.kernel" if is_gp and "gp.kernel" in sel.columns else "model.size"
    if panel_col not in sel.columns:
        sizes: list = [None]
    elif panel_col == "model.size":
        sizes = style.size_order(sel[panel_col])
    else:
        sizes = sorted(sel[panel_col].unique())
    ncols, nrows = style.grid_shape(len(sizes))
    fig, axes = style.new_figure(ncols, nrows, panel_w=4.6, panel_h=3.4)
    variants = list(dict.fromkeys(labels))
    colors = {v: style.CYCLE[i % len(style.CYCLE)] for i, v in enumerate(variants)}
    if "Llama" in colors and len(variants) <= len(style.CYCLE):
        colors["Llama"] = style.LLAMA_COLOR
    counts = labels.value_counts()
    by_run = dict(tuple(curves.groupby("run_id", sort=False)))
    for ax, size in zip(axes, sizes):
        panel = sel if size is None else sel[sel[panel_col].eq(size)]
        for idx, r in panel.iterrows():
            c = by_run[r["run_id"]]
            train = c[c["train_loss"].notna()]
            if not train.empty:
                window = max(1, len(train) // 20)
                y = train["train_loss"].rolling(window, center=True, min_periods=1).mean()
                ax.plot(train["tokens"].astype(float), y, "-", color=colors[labels[idx]], linewidth=1.1, alpha=0.85)
            val = c[c["val_loss"].notna()]
            if not val.empty:
                ax.plot(val["tokens"].astype(float), val["val_loss"], "o", color=colors[labels[idx]], markersize=3.5,
                        markeredgecolor="black", markeredgewidth=0.4)
            if r.get("state") == "diverged" and not train.empty:
                ax.plot([float(train["tokens"].iloc[-1])], [float(train["train_loss"].dropna().iloc[-1])
                        if train["train_loss"].dropna().size else np.nan], "x", color="red", markersize=8)
        from matplotlib.ticker import EngFormatter

        ax.xaxis.set_major_formatter(EngFormatter())
        ax.set_xlabel("training examples" if is_gp else "training tokens")
        ax.set_ylabel("loss (mean squared error)" if is_gp else "loss (nats/token)")
        ax.set_title("" if size is None else (f"{size} kernel" if is_gp else f"{size}"), fontsize=10)
    for ax in axes[len(sizes):]:
        ax.set_visible(False)
    from matplotlib.lines import Line2D

    extra = [Line2D([], [], color=colors[v], label=f"{v}, {counts[v]} run{'s' if counts[v] > 1 else ''}")
             for v in variants]
    extra.append(Line2D([], [], color="0.4", marker="o", linestyle="none", markersize=4, label="validation loss"))
    if sel.get("state") is not None and sel["state"].eq("diverged").any():
        extra.append(Line2D([], [], color="red", marker="x", linestyle="none", label="diverged"))
    style.figure_legend(fig, [], [], extra=extra, max_cols=3)
    caption = ("Training loss (lines, rolling mean over ~5% of the steps) and validation loss (dots) against "
               f"training {'examples' if is_gp else 'tokens'}, one line per run; seeds of a variant share a colour.")
    return FigurePart(name, fig, caption)


def perplexity_chart(agg: "pd.DataFrame") -> FigurePart:
    """Horizontal point chart of test perplexity per variant (and size), mean +- s.d."""
    agg = agg.copy()
    agg["label"] = [f"{v} [{s}]" if agg["model.size"].nunique() > 1 else v
                    for v, s in zip(agg["variant"], agg["model.size"])]
    if "train.lr" in agg.columns and agg["train.lr"].nunique() > 1:
        agg["label"] = [f"{lab}, lr={lr:g}" for lab, lr in zip(agg["label"], agg["train.lr"])]
    order = {s: i for i, s in enumerate(style.size_order(agg["model.size"]))}
    agg = agg.assign(_o=agg["model.size"].map(order)).sort_values(["_o", "mean"], ascending=[True, False])
    fig, (ax,) = style.new_figure(1, panel_w=6.4, panel_h=max(2.2, 0.42 * len(agg) + 0.8))
    ys = list(range(len(agg)))
    from matplotlib.ticker import NullLocator

    for y, (_, r) in zip(ys, agg.iterrows()):
        color = style.LLAMA_COLOR if r["role"] == "llama" else style.CEM_COLOR
        n = int(r["n"])
        if n >= 2:
            ax.errorbar([r["mean"]], [y], xerr=[r["std"]], fmt="o", color=color, capsize=3, markersize=7)
        else:
            ax.plot([r["mean"]], [y], "o", markerfacecolor="white", markeredgecolor=color, markeredgewidth=1.6,
                    markersize=7)
    ax.set_yticks(ys)
    ax.set_yticklabels([f"{lab} (n={int(n)})" for lab, n in zip(agg["label"], agg["n"])], fontsize=8.5)
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_ylim(-0.7, len(agg) - 0.3)
    ax.set_xlabel("test perplexity")
    ax.set_ylabel("variant [size]" if agg["model.size"].nunique() > 1 else "variant")
    ax.set_title("test perplexity per variant", fontsize=10)
    style.figure_legend(fig, [ax], agg["n"])
    return FigurePart("test_perplexity", fig, f"Test perplexity per variant (Llama pink, CEM blue). {style.SPREAD_NOTE}.")


def render(runs: "pd.DataFrame", curves: "pd.DataFrame | None" = None) -> ReportParts:
    parts = ReportParts()
    curve_fig = training_curves(runs, curves)
    if curve_fig is not None:
        parts.figures.append(curve_fig)
    agg = aggregate_seeds(runs)
    if agg.empty:
        parts.notes.append("curves: no finished runs")
        return parts
    parts.figures.append(perplexity_chart(agg))
    table = agg.assign(size=agg["model.size"])[["size", "variant", "params_total", "tokens", "mean", "std", "n",
                                                 "seeds"]]
    table = table.rename(columns={"params_total": "params", "mean": "test ppl (mean)", "std": "test ppl (s.d.)",
                                  "n": "n seeds"})
    order = {s: i for i, s in enumerate(style.size_order(table["size"]))}
    table = table.assign(_o=table["size"].map(order)).sort_values(["_o", "test ppl (mean)"]).drop(columns="_o")
    parts.tables.append(TablePart("test_perplexity", table.reset_index(drop=True),
                                  "Test perplexity per variant: mean and s.d. (ddof=1) over the seeds listed."))
    return parts
