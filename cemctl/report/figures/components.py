"""Figure kind `components` (paper Fig. 2a/2b), for `cemctl report`.

Test perplexity against parameters: each single-step CEM sublayer (attention:
2a; MLP dim-matched and parameter-matched: 2b) is linked by a thin line to the
Llama baseline of the same dims and training setup. Colours: the report's palette
(the Llama baseline pink); markers: Llama diamonds, CEM dots, parameter-matched CEM
MLP triangles, a KQ diagonal squares; the token budget is written above each Llama
baseline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cemctl.report import style
from cemctl.report.aggregate import aggregate_seeds, match_baselines, series_labels, unpaired_notes
from cemctl.report.parts import FigurePart, ReportParts, TablePart

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

PANELS = (
    ("attention", "(a) attention: Llama vs CEM attention"),
    ("mlp", "(b) MLP: gated MLP vs CEM MLP"),
)


SHOWN = ("model.size",)  # the x axis is the parameters of each size; the panel is the sublayer swapped


def _marker(row: dict) -> str:
    """The marker of a variant (its colour is the report's palette's)."""
    if row["role"] == "llama":
        return "D"
    if row.get("model.mlp") == "cem_param_matched":
        return "^"
    if row["role"] == "attention" and row.get("model.kq_diagonal") not in (None, "none"):
        return "s"  # our arm beside the paper's
    return "o"


def comparison_table(agg: "pd.DataFrame", base_idx: "pd.Series") -> "pd.DataFrame":
    """size, variant, params, tokens, test ppl stats, and the difference to the Llama baseline."""
    import pandas as pd

    rows = []
    for idx, r in agg.iterrows():
        b = base_idx[idx]
        base = agg.loc[b] if b >= 0 else None
        rows.append({
            "size": r.get("model.size"),
            "variant": r["variant"],
            **({"lr": r.get("train.lr")} if "train.lr" in agg.columns else {}),  # none: each arm at its chosen rate
            "params (M)": style.params_m(r["params_total"]),
            "non-emb. params (M)": style.params_m(r["params_non_embedding"]),
            "params / Llama": (float(r["params_total"]) / float(base["params_total"])) if base is not None else None,
            "tokens": int(round(float(r["tokens"]))) if "tokens" in r and r["tokens"] == r["tokens"] else None,
            "test ppl (mean)": r["mean"],
            "test ppl (s.d.)": r["std"],
            "n seeds": int(r["n"]),
            "ppl - Llama": (r["mean"] - base["mean"]) if base is not None else None,
        })
    return style.sort_by_size(pd.DataFrame(rows), ["size", "params (M)"])


def render(runs: "pd.DataFrame", curves: "pd.DataFrame | None" = None) -> ReportParts:
    from cemctl.report.generic import palette_of

    parts = ReportParts()
    palette = palette_of(runs)
    agg = aggregate_seeds(runs)
    if agg.empty:
        parts.notes.append("components: no finished runs")
        return parts
    base_idx = match_baselines(agg)
    # the paper's name of each arm, and whatever else varies (two arms never share a name)
    agg = agg.assign(variant=series_labels(agg, ["model.size"]))
    present = [(r, t) for r, t in PANELS if agg["role"].eq(r).any()]
    if not present:
        parts.notes.append("components: no CEM attention or CEM MLP runs (model.attention='cem' with a Llama MLP, "
                           "or model.mlp='cem'/'cem_param_matched' with Llama attention)")
        present = [("llama", "Llama baselines")]
    fig, axes = style.new_figure(len(present))
    for ax, (panel_role, title) in zip(axes, present):
        sub = agg[agg["role"].eq(panel_role)]
        bases = sorted({int(base_idx[i]) for i in sub.index if base_idx[i] >= 0}) if panel_role != "llama" \
            else list(sub.index)
        for i in sub.index:  # link lines first (under the markers)
            b = int(base_idx[i])
            if panel_role != "llama" and b >= 0:
                ax.plot([style.params_m(agg.at[i, "params_total"]), style.params_m(agg.at[b, "params_total"])],
                        [agg.at[i, "mean"], agg.at[b, "mean"]], color="0.6", linewidth=0.9, zorder=1)
        show = agg.loc[bases + list(sub.index)] if panel_role != "llama" else sub
        show = show[~show.index.duplicated()]
        for variant, group in show.groupby("variant", sort=False):
            marker, color = _marker(group.iloc[0].to_dict()), palette.color_for(group.iloc[0].to_dict())
            plot_group = group.sort_values("params_total")
            style.plot_seed_points(ax, [style.params_m(p) for p in plot_group["params_total"]], plot_group,
                                   color=color, marker=marker, label=str(variant), line=None, markersize=7.5)
        xs_panel = [style.params_m(p) for p in show["params_total"]]
        mid = (min(xs_panel) + max(xs_panel)) / 2 if xs_panel else 0.0
        for b in bases:  # token budget next to each baseline, on the side facing the middle of the panel
            x = style.params_m(agg.at[b, "params_total"])
            left = x <= mid
            ax.annotate(f"{agg.at[b, 'model.size']}: {style.human_count(agg.at[b, 'tokens'])} tokens",
                        (x, agg.at[b, "mean"]), textcoords="offset points", xytext=(8 if left else -8, -10),
                        ha="left" if left else "right", va="top", fontsize=7.5, color="0.3")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("parameters (M)")
        ax.set_ylabel("test perplexity")
        ax.margins(x=0.15, y=0.18)
    parts.notes += unpaired_notes(agg, base_idx, series_labels(agg, []), "components")
    style.figure_legend(fig, axes, agg["n"])
    caption = ("Test perplexity against total parameters (M). Each CEM variant (T=1) is linked to the Llama "
               "baseline with the same dimensions and token budget (training tokens written next to the baseline). "
               f"{style.SPREAD_NOTE}.")
    attn = agg[agg["role"].eq("attention")]
    if "model.kq_diagonal" in attn and attn["model.kq_diagonal"].nunique() > 1:
        caption += (" CEM attention without a KQ diagonal (dots) is the paper's Sec. 4.1 arm (Eq. 5); the "
                    "diagonal arm (squares) is our addition.")
    parts.figures.append(FigurePart("components", fig, caption))
    parts.tables.append(TablePart("components", comparison_table(agg, base_idx),
                                  "Test perplexity per size and variant, with the difference to the Llama baseline "
                                  "(mean over seeds; s.d. with ddof=1)."))
    return parts
