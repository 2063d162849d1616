"""Figure kind `gp_table` (synthetic Gaussian-process study of the arXiv version), for `cemctl report`.

Input: one row per (kernel, T, seed) with `test_rmse` (and `params`, `flops`),
either as such columns or from a runs frame (`data.kernel` / `gp.kernel` /
`task.kernel`, `model.mlp_steps`, `train.seed`, `test_rmse`, `params_total`,
`flops`). Output: RMSE mean +- s.d. (ddof=1) per kernel and T, the best T per
kernel, and a figure of RMSE against T.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cem_core.arms import is_config_key
from cemctl.report import style
from cemctl.report.aggregate import extra_settings
from cemctl.report.parts import FigurePart, ReportParts, TablePart

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from cemctl.report.generic import Palette

GP_COLUMNS = ("kernel", "T", "seed", "test_rmse", "params", "flops")
_SOURCES = {
    "kernel": ("kernel", "data.kernel", "gp.kernel", "task.kernel", "data.gp_kernel"),
    "T": ("T", "model.mlp_steps"),
    "seed": ("seed", "train.seed"),
    "test_rmse": ("test_rmse",),
    "params": ("params", "params_total"),
    "flops": ("flops", "train_flops"),
}
SHOWN = ("model.mlp_steps",)  # T on the x axis
REFERENCE = "bayes_rmse"  # test RMSE of the exact GP posterior mean (cem_core.gp), when known


def gp_frame(runs: "pd.DataFrame", palette: "Palette | None" = None) -> "pd.DataFrame":
    """Normalise a runs frame (finished runs only) or a GP frame to GP_COLUMNS; missing columns are NaN. With the
    report's `palette` (a runs frame), also `_color` (each run's) and `_run` (its id), to draw by."""
    import pandas as pd

    frame = runs
    if "state" in frame.columns:
        frame = frame[frame["state"].eq("done")]
    out = pd.DataFrame(index=frame.index)
    for col, sources in _SOURCES.items():
        src = next((s for s in sources if s in frame.columns), None)
        out[col] = frame[src] if src is not None else float("nan")
    if REFERENCE in frame.columns:
        out[REFERENCE] = frame[REFERENCE]
    # what else varies among the runs (lr, width, ...) splits a series: two arms are never averaged together
    has_config = any(is_config_key(c) and c != "task" for c in frame.columns)
    out["setting"] = extra_settings(frame, [*_SOURCES["kernel"], *_SOURCES["T"]]) if has_config and len(frame) else ""
    if palette is not None and has_config and "run_id" in frame.columns:
        out["_color"] = [palette.color_for(r) for r in frame.to_dict("records")]
        out["_run"] = frame["run_id"].astype(str).to_numpy()
    out = out[pd.to_numeric(out["test_rmse"], errors="coerce").notna()]
    return out.reset_index(drop=True)


def rmse_table(gp: "pd.DataFrame", *, ddof: int = 1) -> "pd.DataFrame":
    """kernel, T, RMSE mean, s.d. (ddof), n seeds, params, FLOPs, best T of the kernel."""
    import pandas as pd

    rows = []
    gp = gp if "setting" in gp.columns else gp.assign(setting="")
    for (kernel, setting, t), group in gp.groupby(["kernel", "setting", "T"], sort=True):
        vals = group["test_rmse"].astype(float)
        rows.append({"kernel": kernel, "setting": setting, "T": int(t), "test RMSE (mean)": float(vals.mean()),
                     "test RMSE (s.d.)": float(vals.std(ddof=ddof)) if len(vals) > ddof else float("nan"),
                     "n seeds": int(len(vals)),
                     "params": float(pd.to_numeric(group["params"], errors="coerce").mean()),
                     "FLOPs": float(pd.to_numeric(group["flops"], errors="coerce").mean())})
        if REFERENCE in group.columns:
            rows[-1]["exact GP RMSE"] = float(pd.to_numeric(group[REFERENCE], errors="coerce").mean())
    columns = ["kernel", "setting", "T", "test RMSE (mean)", "test RMSE (s.d.)", "n seeds", "params", "FLOPs"]
    table = pd.DataFrame(rows, columns=columns + (["exact GP RMSE"] if REFERENCE in gp.columns else []))
    if not table.empty:
        best = table.loc[table.groupby(["kernel", "setting"])["test RMSE (mean)"].idxmin(), ["kernel", "setting", "T"]]
        table["best T"] = table.apply(lambda r: bool((best["kernel"].eq(r["kernel"]) & best["setting"].eq(r["setting"])
                                                      & best["T"].eq(r["T"])).any()), axis=1)
    if not table["setting"].astype(bool).any():
        table = table.drop(columns="setting")
    return table


def render(runs: "pd.DataFrame", curves: "pd.DataFrame | None" = None) -> ReportParts:
    from cemctl.report.generic import palette_of

    parts = ReportParts()
    has_config = any(is_config_key(c) and c != "task" for c in runs.columns)
    gp = gp_frame(runs, palette_of(runs) if has_config and "run_id" in runs.columns else None)
    if gp.empty or gp["kernel"].isna().all():
        parts.notes.append("gp_table: no finished runs with columns kernel and test_rmse")
        return parts
    table = rmse_table(gp)
    fig, (ax,) = style.new_figure(1, panel_w=5.0, panel_h=3.6)
    series = ["kernel", "setting"] if "setting" in table.columns else ["kernel"]
    gp_keys = gp.assign(setting=gp["setting"] if "setting" in table.columns else "")
    for j, (key, sub) in enumerate(table.groupby(series, sort=True)):
        key = key if isinstance(key, tuple) else (key,)
        mine = gp_keys[gp_keys["kernel"].eq(key[0]) & (gp_keys["setting"].eq(key[1]) if len(key) > 1 else True)]
        color = mine["_color"].iloc[0] if "_color" in mine.columns else style.CYCLE[j % len(style.CYCLE)]
        ids = list(mine["_run"]) if "_run" in mine.columns else None
        stats = sub.rename(columns={"test RMSE (mean)": "mean", "test RMSE (s.d.)": "std", "n seeds": "n"})
        style.plot_seed_points(ax, sub["T"].astype(float).tolist(), stats[["mean", "std", "n"]], color=color,
                               marker=style.SIZE_MARKERS[j % len(style.SIZE_MARKERS)], runs=ids,
                               label=f"{key[0]} kernel" + (f", {key[1]}" if len(key) > 1 and key[1] else ""))
        best = sub[sub["best T"]].iloc[0]
        style.tag(ax.plot([best["T"]], [best["test RMSE (mean)"]], "*", color=color, markersize=15,
                          markeredgecolor="black", markeredgewidth=0.7, zorder=5), ids)
    ts = sorted(table["T"].unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(ts)
    ax.set_xticklabels([str(t) for t in ts])
    ax.set_xlabel("recursion steps T (CEM MLP)")
    ax.set_ylabel("test RMSE")
    ax.set_title("GP regression: test RMSE against T (\u2605 = best T)", fontsize=10)
    style.figure_legend(fig, [ax], table["n seeds"])
    parts.figures.append(FigurePart("gp_rmse", fig, "Test RMSE of the recursive CEM MLP on Gaussian-process data "
                                    f"against T, per kernel. {style.SPREAD_NOTE}."))
    parts.tables.append(TablePart("gp_rmse", table, "Test RMSE mean and s.d. (ddof=1) over seeds per kernel and T, "
                                  "with parameters and FLOPs; 'best T' marks the lowest mean RMSE per kernel; 'exact GP RMSE' (when "
                                  "present) is the RMSE of the exact GP posterior mean, the floor."))
    return parts
