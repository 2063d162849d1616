"""Figure kind `reuse_vs_recursion` (paper Fig. 3c for the MLP, Fig. 4 for attention), for `cemctl report`.

The perplexity gain of going from T=1 to T=2 under three settings: plain reuse
(the same Llama sublayer applied twice, each time with its norm and residual),
dimension-matched CEM recursion and (MLP only) parameter-matched CEM recursion.
Plain reuse at T=1 is the Llama model itself, so the Llama baseline stands in
when no reuse run with T=1 exists. The gain's s.d. treats the two means as
independent: sqrt(s1^2 + s2^2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cemctl.report import style
from cemctl.report.aggregate import difference_std, render_per_component, series_labels
from cemctl.report.parts import FigurePart, ReportParts, TablePart

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from cemctl.report.generic import Palette

# component: (other sublayer column, this sublayer column, steps column, precond column, figure name, title)
COMPONENTS = {
    "mlp": ("model.attention", "model.mlp", "model.mlp_steps", "model.mlp_precond", "reuse_vs_recursion_mlp", "MLP"),
    "attention": ("model.mlp", "model.attention", "model.attn_steps", "model.attn_precond",
                  "reuse_vs_recursion_attention", "attention"),
}
SHOWN = ("model.size", "model.attn_steps", "model.mlp_steps")  # x, then T=1 / T=2 by marker
PRIVATE = ("kind", "_color", "_color T=1", "_runs", "_runs T=1", "_runs T=2")  # drawn, not tabled


def gain_table(agg: "pd.DataFrame", base_idx: "pd.Series", component: str, palette: "Palette") -> "pd.DataFrame":
    """One row per (setting, size) with T=1 and T=2 seed statistics and the gain (T=1 ppl - T=2 ppl); the columns
    in PRIVATE say how to draw a row (the setting's colour, the T=1 point's: Llama's where Llama stands in)."""
    import pandas as pd

    other_col, col, steps_col, precond_col, _, _ = COMPONENTS[component]
    rows = agg[agg[other_col].eq("llama") & agg[col].isin(["reuse", "cem", "cem_param_matched"])]
    # a setting is a series of the one labelling path: the variant, and anything else that varies (never two arms
    # in one T=1 -> T=2 pair)
    rows = rows.assign(_setting=series_labels(rows, [steps_col, "model.size"]))
    out = []
    for (setting, size), group in rows.groupby(["_setting", "model.size"], sort=False):
        kind = group[col].iloc[0]
        at = {int(t): g.iloc[0] for t, g in group.groupby(steps_col)}
        t1, t2 = at.get(1), at.get(2)
        t1_from = "run"
        if t1 is None and kind == "reuse":
            bases = [int(base_idx[i]) for i in group.index if base_idx[i] >= 0]
            if bases:
                t1, t1_from = agg.loc[bases[0]], "Llama baseline"
        if len(group.groupby(steps_col)) != len(group):
            from cem_core.arms import ArmLabelCollision

            raise ArmLabelCollision(f"two arms at one T in the {component} reuse/recursion figure ({kind}, {size})")
        rec = {"setting": setting, "kind": kind,
               "size": size, "T=1 from": t1_from if t1 is not None else "missing",
               "_color": palette.color_for(group.iloc[0]), "_runs": ",".join(group["run_ids"]),
               "_color T=1": palette.color_for(t1) if t1 is not None else None}
        for label, r in (("T=1", t1), ("T=2", t2)):
            rec[f"_runs {label}"] = r["run_ids"] if r is not None else ""
        for label, r in (("T=1", t1), ("T=2", t2)):
            rec[f"ppl {label} (mean)"] = float(r["mean"]) if r is not None else float("nan")
            rec[f"ppl {label} (s.d.)"] = float(r["std"]) if r is not None else float("nan")
            rec[f"n {label}"] = int(r["n"]) if r is not None else 0
        rec["params T=2 (M)"] = style.params_m(t2["params_total"]) if t2 is not None else float("nan")
        rec["gain (ppl T=1 - T=2)"] = rec["ppl T=1 (mean)"] - rec["ppl T=2 (mean)"]
        rec["gain (s.d.)"] = difference_std(rec["ppl T=1 (s.d.)"], rec["ppl T=2 (s.d.)"])
        rec["gain (%)"] = 100.0 * rec["gain (ppl T=1 - T=2)"] / rec["ppl T=1 (mean)"]
        out.append(rec)
    frame = pd.DataFrame(out)
    if frame.empty:
        return frame
    order_k = {"reuse": 0, "cem": 1, "cem_param_matched": 2}
    order_s = {s: i for i, s in enumerate(style.size_order(frame["size"]))}
    frame = frame.assign(_k=frame["kind"].map(order_k), _s=frame["size"].map(order_s))
    return frame.sort_values(["_k", "setting", "_s"]).drop(columns=["_k", "_s"]).reset_index(drop=True)


def render_component(agg: "pd.DataFrame", base_idx: "pd.Series", component: str, palette: "Palette") -> ReportParts:
    import numpy as np
    import pandas as pd
    from matplotlib.lines import Line2D

    parts = ReportParts()
    table = gain_table(agg, base_idx, component, palette)
    if table.empty:
        return parts
    _, _, _, _, name, title = COMPONENTS[component]
    settings = list(dict.fromkeys(table["setting"]))
    sizes = style.size_order(table["size"])
    ncols, nrows = style.grid_shape(len(settings) + 1, max_cols=4)
    fig, axes = style.new_figure(ncols, nrows, panel_w=3.6, panel_h=3.3)
    xs = {s: i for i, s in enumerate(sizes)}
    colors = dict(zip(table["setting"], table["_color"]))
    markers = {"T=1": "o", "T=2": "s"}
    for ax, setting in zip(axes, settings):
        sub = table[table["setting"].eq(setting)].sort_values("size", key=lambda c: c.map(xs))
        x = [xs[s] for s in sub["size"]]
        for label, dx in (("T=1", -0.06), ("T=2", 0.06)):  # each point in its row's colour (Llama's where it stands in)
            for xi, r in zip(x, sub.to_dict("records")):
                if r[f"n {label}"] > 0:
                    stats = pd.DataFrame({"mean": [r[f"ppl {label} (mean)"]], "std": [r[f"ppl {label} (s.d.)"]],
                                          "n": [r[f"n {label}"]]})
                    style.plot_seed_points(ax, [xi + dx], stats, marker=markers[label], line=None,
                                           color=r["_color T=1"] if label == "T=1" else r["_color"],
                                           runs=style.runs_of(r[f"_runs {label}"]))
        for xi, r in zip(x, sub.to_dict("records")):  # the gain shaded at each size (sizes are not joined)
            if r["n T=1"] > 0 and r["n T=2"] > 0:
                y1, y2 = r["ppl T=1 (mean)"], r["ppl T=2 (mean)"]
                style.tag(ax.fill_between([xi - 0.15, xi + 0.15], [y1, y1], [y2, y2], color=colors[setting],
                                          alpha=0.25, linewidth=0, zorder=0), style.runs_of(r["_runs"]))
        ax.set_title(setting, fontsize=10)
        ax.set_xticks(range(len(sizes)))
        ax.set_xticklabels(sizes)
        ax.set_xlim(-0.5, len(sizes) - 0.5)
        ax.set_xlabel("model size")
        ax.set_ylabel("test perplexity")
    gain_ax = axes[len(settings)]
    width = 0.8 / max(1, len(settings))
    for j, setting in enumerate(settings):
        sub = table[table["setting"].eq(setting)]
        pos = np.array([xs[s] for s in sub["size"]], dtype=float) + (j - (len(settings) - 1) / 2) * width
        gains = sub["gain (ppl T=1 - T=2)"].to_numpy(dtype=float)
        ok = np.isfinite(gains)  # a setting without T=1 or T=2 at a size has no gain: no bar (a note names it)
        if not ok.any():
            continue
        errs = np.nan_to_num(sub["gain (s.d.)"].to_numpy(dtype=float)[ok], nan=0.0)
        style.tag(gain_ax.bar(pos[ok], gains[ok], width=width * 0.95, yerr=errs, capsize=2.5,
                              color=colors[setting], edgecolor="0.35", linewidth=0.6, label=setting),
                  style.runs_of(sub["_runs"][ok]))
    ns = list(table["n T=1"][table["n T=1"] > 0]) + list(table["n T=2"][table["n T=2"] > 0])
    extra = [Line2D([], [], color="0.35", marker=m, linestyle="none", label=f"{label}, {style.n_note(ns)}")
             for label, m in markers.items()]
    gain_ax.axhline(0.0, color="0.3", linewidth=0.8)
    gain_ax.set_xticks(range(len(sizes)))
    gain_ax.set_xticklabels(sizes)
    gain_ax.set_xlabel("model size")
    gain_ax.set_ylabel("perplexity gain, T=1 \u2192 T=2")
    gain_ax.set_title("gain (higher is better)", fontsize=10)
    for ax in axes[len(settings) + 1:]:
        ax.set_visible(False)
    style.suptitle(fig, f"{title}: within-layer recursion vs plain reuse")
    style.figure_legend(fig, axes[:len(settings) + 1], ns, max_cols=4, extra=extra)
    missing = table[(table["n T=1"] == 0) | (table["n T=2"] == 0)]
    for r in missing.to_dict("records"):
        parts.notes.append(f"reuse_vs_recursion ({title}): {r['setting']} at size {r['size']} lacks "
                           f"{'T=1' if r['n T=1'] == 0 else 'T=2'}")
    caption = (f"{title}: test perplexity at T=1 (circles) and T=2 (squares) for plain reuse of the Llama sublayer and "
               "for CEM recursion (shaded: the gain), each setting in its colour of the report; last panel: the gain "
               "T=1 \u2192 T=2 per size, error bars sqrt(s1\u00b2 + s2\u00b2); a setting that lacks T=1 or T=2 at a "
               "size has no bar there. Plain reuse at T=1 is the Llama model "
               "(drawn in Llama's colour where no reuse run with T=1 exists). "
               f"{style.SPREAD_NOTE}.")
    parts.figures.append(FigurePart(name, fig, caption))
    parts.tables.append(TablePart(name, table.drop(columns=list(PRIVATE)),
                                  f"{title}: perplexity at T=1 and T=2 and the gain per setting and size (means over "
                                  "seeds, s.d. with ddof=1; gain s.d. assumes independent means)."))
    return parts


def render(runs: "pd.DataFrame", curves: "pd.DataFrame | None" = None) -> ReportParts:
    return render_per_component(runs, COMPONENTS, render_component, kind="reuse_vs_recursion",
                                none_note="no reuse or CEM runs paired with a Llama sublayer")
