"""Test-time recursion figure of `cemctl report` (data from `cemctl eval RUN --steps 1,2,4,8`).

Drawn for any experiment whose runs have rows in the `evals` table (see
`cemctl.report.figures.EXTRA_FIGURES`), besides the experiment's own figure kind:

- `test_time_recursion`: test perplexity against the recursion steps T used at
  evaluation, one line per trained variant (seeds aggregated: mean +- 1 s.d.,
  hollow marker for a single seed), the trained T starred; forward FLOPs per
  token of the modified model as dashed lines on a second (right) axis; one
  panel per varied sublayer (attention, MLP, both).
- table `test_time_recursion`: the same numbers.

`load(engine, run_ids)` reads the rows (`cemctl.db.frames.evals_frame`);
`render(runs, evals)` is a pure function of the frames.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from cemctl.report import style
from cemctl.report.parts import FigurePart, ReportParts, TablePart

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

NAME = "test_time_recursion"
SUBLAYER_ORDER = ("attention", "mlp", "both")
SUBLAYER_TITLES = {"attention": "T of CEM attention varied", "mlp": "T of CEM MLP varied",
                   "both": "T of every CEM sublayer varied"}
EVAL_COLUMNS = ("run_id", "attn_steps", "mlp_steps", "eval_steps", "sublayer", "test_loss", "test_ppl",
                "test_tokens", "flops_per_token", "trained_attn_steps", "trained_mlp_steps")


def load(engine: Any, run_ids: Iterable[str]) -> "pd.DataFrame":
    """The `evals` rows of the runs (empty frame with EVAL_COLUMNS when none)."""
    import pandas as pd

    from cemctl.db.frames import evals_frame

    ids = list(run_ids)
    if not ids:
        return pd.DataFrame(columns=list(EVAL_COLUMNS))
    return evals_frame(engine, ids)


def _merged(runs: "pd.DataFrame", evals: "pd.DataFrame") -> "pd.DataFrame":
    """One row per (run, evaluation): the run's config and state, the evaluation's numbers."""
    import pandas as pd

    from cemctl.report.aggregate import config_columns

    keep = ["run_id", "state"] + config_columns(runs)
    ev = evals[[c for c in EVAL_COLUMNS if c in evals.columns]].copy()
    ev["eval_steps"] = ev["eval_steps"].fillna(ev[["attn_steps", "mlp_steps"]].max(axis=1))
    out = runs[[c for c in keep if c in runs.columns]].merge(ev, on="run_id", how="inner")
    for col in ("test_ppl", "flops_per_token"):
        out[col] = pd.to_numeric(out[col], errors="coerce").astype(float)
    for col in ("attn_steps", "mlp_steps", "eval_steps"):
        out[col] = pd.to_numeric(out[col], errors="coerce").astype(int)
    return out


def aggregate(runs: "pd.DataFrame", evals: "pd.DataFrame") -> "pd.DataFrame":
    """Seed-aggregated test perplexity per (trained variant, varied sublayer, evaluated depths)."""
    from cemctl.report.aggregate import SEED_COLUMN, aggregate_seeds, config_columns

    data = _merged(runs, evals)
    if data.empty:
        return data
    keys = [c for c in config_columns(runs) if c != SEED_COLUMN and c in data.columns]
    agg = aggregate_seeds(data, "test_ppl", by=keys + ["sublayer", "eval_steps", "attn_steps", "mlp_steps"])
    if agg.empty:
        return agg
    agg["trained"] = [
        int(r["attn_steps"]) == int(r.get("model.attn_steps", 1)) and int(r["mlp_steps"]) == int(r.get("model.mlp_steps", 1))
        for r in agg.to_dict("records")
    ]
    return agg


def render(runs: "pd.DataFrame", evals: "pd.DataFrame | None") -> ReportParts:
    """The figure and table; empty parts when no run of `runs` has evaluations."""
    parts = ReportParts()
    if evals is None or evals.empty or runs.empty:
        return parts
    agg = aggregate(runs, evals)
    if agg.empty:
        parts.notes.append("test-time recursion: evaluations exist but none of a finished run with a finite perplexity")
        return parts
    from cemctl.report.aggregate import series_labels
    from cemctl.report.generic import palette_of

    palette = palette_of(runs)  # the report's colours
    # one series per trained arm (every config key, size and rank included), named by the one labelling path
    agg["series"] = series_labels(agg, [])
    panels = [s for s in SUBLAYER_ORDER if s in set(agg["sublayer"])]
    ncols, nrows = style.grid_shape(len(panels))
    fig, axes = style.new_figure(ncols, nrows, panel_w=5.0, panel_h=3.7)
    series = list(dict.fromkeys(agg["series"]))
    colors = {name: palette.color_for(g.iloc[0]) for name, g in agg.groupby("series", sort=False)}
    # series of one colour (their hue is alike: they differ in what the report's other figures plot) by marker
    markers = {name: style.SIZE_MARKERS[[n for n in series if colors[n] == colors[name]].index(name)
                                        % len(style.SIZE_MARKERS)] for name in series}
    from matplotlib.lines import Line2D
    from matplotlib.ticker import EngFormatter, FixedLocator, NullLocator, ScalarFormatter

    for ax, sub in zip(axes, panels):
        panel = agg[agg["sublayer"].eq(sub)]
        right = ax.twinx()
        for name, group in panel.groupby("series", sort=False):
            group = group.sort_values("eval_steps")
            color = colors[name]
            style.plot_seed_points(ax, group["eval_steps"].astype(float), group, color=color, label=name,
                                   marker=markers[name])
            ids = style.runs_of(group["run_ids"])
            trained = group[group["trained"]]
            if not trained.empty:
                style.tag(ax.plot(trained["eval_steps"].astype(float), trained["mean"], "*", color=color,
                                  markersize=15, markeredgecolor="black", markeredgewidth=0.6, zorder=5), ids)
            style.tag(right.plot(group["eval_steps"].astype(float), group["flops_per_token"].astype(float), "--",
                                 color=color, linewidth=1.0, alpha=0.6), ids)
        ts = sorted({int(t) for t in panel["eval_steps"]})
        for a in (ax, right):
            a.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(ts))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlim(min(ts) / 1.25, max(ts) * 1.25)
        right.yaxis.set_major_formatter(EngFormatter())
        right.set_ylabel("forward FLOPs per token (dashed)", fontsize=9)
        right.grid(False)
        ax.set_xlabel("recursion steps T at evaluation")
        ax.set_ylabel("test perplexity")
        ax.set_title(SUBLAYER_TITLES[sub], fontsize=10)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    extra = [Line2D([], [], color="black", marker="*", linestyle="none", markersize=11, label="trained T"),
             Line2D([], [], color="0.4", linestyle="--", label="FLOPs/token (right axis)")]
    style.figure_legend(fig, axes[:len(panels)], agg["n"], extra=extra, max_cols=3)
    caption = ("Test perplexity of trained CEM models evaluated with T recursive steps (`cemctl eval`; the same "
               "weights and the same fixed test tokens for every T; star: the T the model was trained with) and the "
               f"forward FLOPs per token of each depth (dashed, right axis). {style.SPREAD_NOTE}.")
    parts.figures.append(FigurePart(NAME, fig, caption))
    trained_attn = agg["model.attn_steps"] if "model.attn_steps" in agg.columns else [1] * len(agg)
    trained_mlp = agg["model.mlp_steps"] if "model.mlp_steps" in agg.columns else [1] * len(agg)
    table = agg.assign(size=agg["model.size"] if "model.size" in agg.columns else "",
                       trained_T=[f"{int(a)}/{int(m)}" for a, m in zip(trained_attn, trained_mlp)])
    table = table[["size", "series", "trained_T", "sublayer", "eval_steps", "attn_steps", "mlp_steps", "mean", "std",
                   "n", "flops_per_token"]].rename(columns={
        "trained_T": "trained T (attn/MLP)", "eval_steps": "eval T", "attn_steps": "attn T", "mlp_steps": "MLP T",
        "mean": "test ppl (mean)", "std": "test ppl (s.d.)", "n": "n seeds", "flops_per_token": "FLOPs/token"})
    table["FLOPs/token"] = table["FLOPs/token"].round().astype("Int64")
    table = table.sort_values(["size", "series", "sublayer", "eval T"], kind="stable").reset_index(drop=True)
    parts.tables.append(TablePart(NAME, table, "Test perplexity at each evaluation-time recursion depth T "
                                               "(mean and s.d. (ddof=1) over seeds) and forward FLOPs per token."))
    return parts
