"""Energy diagnostics figures of `cemctl report` (data: runs trained with `train.energy_layers`).

The trainer logs, at every evaluation, the mean energy of each chosen CEM
sublayer after t = 0..T recursive steps and the share of tokens whose energy
fell in step t (`descent_frac`). Drawn for any experiment whose runs have such
lines (see `cemctl.report.figures.EXTRA_FIGURES`):

- `energy_descent`: one column per run (at most MAX_RUNS), at its last
  evaluation: the energy change E_t - E_0 against t, one row per sublayer kind
  (attention and MLP energies have different scales; one line per layer), so
  a descending recursion slopes down; bottom row, the descent fraction of each
  step (1 = every token's energy fell).
- `energy_training`: how it evolves (runs with more than one evaluation):
  against the optimizer step, the relative energy change over the whole
  recursion (E_T - E_0) / |E_0| and the mean descent fraction over t >= 1.
- table `energy_descent`: energy, change and descent fraction per run, layer,
  sublayer and t at the last evaluation.

`load(engine, run_ids)` reads the lines (`cemctl.db.frames.energy_frame`);
`render(runs, energy)` is a pure function of the frames.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from cemctl.report import style
from cemctl.report.parts import FigurePart, ReportParts, TablePart

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

MAX_RUNS = 6
LINESTYLES = {"attention": "-", "mlp": "--"}


def load(engine: Any, run_ids: Iterable[str]) -> "pd.DataFrame":
    from cemctl.db.frames import energy_frame

    return energy_frame(engine, list(run_ids))


def last_evaluation(energy: "pd.DataFrame") -> "pd.DataFrame":
    """Each run's lines at its last logged optimizer step, with `delta` = E_t - E_0 and `step_change` = E_t - E_{t-1}."""
    last = energy.groupby("run_id")["step"].transform("max")
    out = energy[energy["step"].eq(last)].copy()
    out = out.sort_values(["run_id", "layer", "sublayer", "t"], kind="stable")
    grouped = out.groupby(["run_id", "layer", "sublayer"], sort=False)["energy"]
    out["delta"] = out["energy"] - grouped.transform("first")
    out["step_change"] = grouped.diff()
    return out.reset_index(drop=True)


def run_names(runs: "pd.DataFrame") -> dict[str, str]:
    """Each run's series name (the one labelling path; the seed named too, since each run is drawn alone)."""
    from cem_core.arms import config_of
    from cemctl.records.labels import series_names

    records = runs.to_dict("records")
    names = series_names([config_of(r) for r in records], nuisance=())
    return {r["run_id"]: n for r, n in zip(records, names)}


def _run_titles(runs: "pd.DataFrame", run_ids: list[str]) -> dict[str, str]:
    names = run_names(runs)
    return {rid: f"{names.get(rid, '')}\n{rid}" for rid in run_ids}


def _series_styles(frame: "pd.DataFrame") -> dict[tuple[int, str], dict[str, Any]]:
    """A layer's marker and a sublayer kind's line style (the colour is the run's: its arm's in the report)."""
    layers = sorted({int(x) for x in frame["layer"]})
    markers = {layer: style.SIZE_MARKERS[i % len(style.SIZE_MARKERS)] for i, layer in enumerate(layers)}
    return {(int(layer), sub): {"marker": markers[int(layer)], "linestyle": LINESTYLES.get(sub, ":")}
            for layer, sub in frame[["layer", "sublayer"]].drop_duplicates().itertuples(index=False)}


def _run_colors(runs: "pd.DataFrame", run_ids: list[str]) -> dict[str, str]:
    """Each run in its arm's colour of the report (`report.generic.palette_of`)."""
    from cemctl.report.generic import palette_of

    palette = palette_of(runs)
    rows = {r["run_id"]: r for r in runs.to_dict("records")}
    return {rid: palette.color_for(rows[rid]) for rid in run_ids}


def _legend(styles: dict[tuple[int, str], dict[str, Any]]) -> list[Any]:
    from matplotlib.lines import Line2D

    return [Line2D([], [], markersize=4, color="0.35", label=f"layer {layer}, {SUBLAYER_NAMES.get(sub, sub)}", **st)
            for (layer, sub), st in sorted(styles.items())]


SUBLAYER_NAMES = {"attention": "attention", "mlp": "MLP"}


def descent_figure(runs: "pd.DataFrame", last: "pd.DataFrame", run_ids: list[str]) -> FigurePart:
    """Columns = runs; one row of E_t - E_0 per sublayer kind (their scales differ), then the descent fractions."""
    from matplotlib.ticker import MaxNLocator

    n = len(run_ids)
    kinds = [k for k in ("attention", "mlp") if k in set(last["sublayer"])] + \
        sorted(set(last["sublayer"]) - {"attention", "mlp"})
    fig, axes = style.new_figure(n, len(kinds) + 1, panel_w=4.2, panel_h=2.7)
    styles = _series_styles(last)
    titles = _run_titles(runs, run_ids)
    colors = _run_colors(runs, run_ids)
    for col, rid in enumerate(run_ids):
        data = last[last["run_id"].eq(rid)]
        bottom = axes[len(kinds) * n + col]
        for row, kind in enumerate(kinds):
            ax = axes[row * n + col]
            for (layer, sub), g in data[data["sublayer"].eq(kind)].groupby(["layer", "sublayer"], sort=True):
                style.tag(ax.plot(g["t"].astype(float), g["delta"], markersize=4, linewidth=1.3, color=colors[rid],
                                  **styles[(int(layer), sub)]), [rid])
            ax.axhline(0.0, color="0.5", linewidth=0.8)
            ax.set_ylabel(f"{SUBLAYER_NAMES.get(kind, kind)}: $E_t - E_0$")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if row == 0:
                ax.set_title(f"{titles[rid]} (step {int(data['step'].max())})", fontsize=8.5, color=colors[rid])
        for (layer, sub), g in data[data["t"] >= 1].groupby(["layer", "sublayer"], sort=True):
            style.tag(bottom.plot(g["t"].astype(float), g["descent_frac"], markersize=4, linewidth=1.3,
                                  color=colors[rid], **styles[(int(layer), sub)]), [rid])
        bottom.set_ylabel("descent fraction of step t")
        bottom.set_ylim(-0.03, 1.03)
        bottom.axhline(0.5, color="0.5", linewidth=0.8, linestyle=":")
        bottom.set_xlabel("recursion step t")
        bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    style.figure_legend(fig, [], [], extra=_legend(styles), max_cols=4)
    caption = ("Energy along the CEM recursion at each run's last evaluation (`train.energy_layers`; mean over the "
               "tokens of the first validation sequences). Upper rows: change of the energy from the sublayer's input "
               "(t = 0) after t recursive steps, one row per sublayer kind (their scales differ); a descending "
               "recursion slopes down. Bottom row: share of tokens whose energy fell in step t (1 = all). "
               "Colour: the run's arm, as in the report's other figures; marker: the layer; attention solid, MLP "
               "dashed.")
    return FigurePart("energy_descent", fig, caption)


def training_figure(runs: "pd.DataFrame", energy: "pd.DataFrame", run_ids: list[str]) -> FigurePart | None:
    """Columns = runs; top: relative energy drop over the whole recursion, bottom: mean descent fraction, per evaluation."""
    import numpy as np

    keys = ["run_id", "step", "layer", "sublayer"]
    ordered = energy.sort_values(keys + ["t"], kind="stable")
    ends = ordered.groupby(keys, as_index=False).agg(e0=("energy", "first"), e_last=("energy", "last"))
    ends["relative"] = 100.0 * (ends["e_last"] - ends["e0"]) / ends["e0"].abs().replace(0.0, np.nan)
    frac = ordered[ordered["t"] >= 1].groupby(keys, as_index=False)["descent_frac"].mean()
    per_eval = ends.merge(frac, on=keys, how="left")
    multi = [rid for rid in run_ids if per_eval.loc[per_eval["run_id"].eq(rid), "step"].nunique() > 1]
    if not multi:
        return None
    from matplotlib.ticker import MaxNLocator

    n = len(multi)
    fig, axes = style.new_figure(n, 2, panel_w=4.2, panel_h=2.8)
    styles = _series_styles(per_eval)
    titles = _run_titles(runs, multi)
    colors = _run_colors(runs, multi)
    for col, rid in enumerate(multi):
        top, bottom = axes[col], axes[n + col]
        data = per_eval[per_eval["run_id"].eq(rid)]
        for (layer, sub), g in data.groupby(["layer", "sublayer"], sort=True):
            st = {**styles[(int(layer), sub)], "color": colors[rid]}
            style.tag(top.plot(g["step"].astype(float), g["relative"], markersize=3.5, linewidth=1.2, **st), [rid])
            style.tag(bottom.plot(g["step"].astype(float), g["descent_frac"], markersize=3.5, linewidth=1.2, **st),
                      [rid])
        top.axhline(0.0, color="0.5", linewidth=0.8)
        top.set_title(titles[rid], fontsize=8.5, color=colors[rid])
        top.set_ylabel("$(E_T - E_0)/|E_0|$ (%)")
        bottom.set_ylim(-0.03, 1.03)
        bottom.axhline(0.5, color="0.5", linewidth=0.8, linestyle=":")
        bottom.set_xlabel("optimizer step")
        bottom.set_ylabel("mean descent fraction (t \u2265 1)")
        for ax in (top, bottom):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    style.figure_legend(fig, [], [], extra=_legend(styles), max_cols=4)
    caption = ("Energy descent over training, at each evaluation. Top: change of the energy over the whole recursion "
               "(t = 0 to T) relative to |E_0|. Bottom: share of tokens whose energy fell in a recursive step, averaged "
               "over the steps t \u2265 1. Colour: the run's arm, as in the report's other figures; marker: the layer; "
               "attention solid, MLP dashed.")
    return FigurePart("energy_training", fig, caption)


def render(runs: "pd.DataFrame", energy: "pd.DataFrame | None") -> ReportParts:
    """The energy figures and table; empty parts when no run of `runs` logged energies."""
    parts = ReportParts()
    if energy is None or energy.empty or runs.empty:
        return parts
    energy = energy[energy["run_id"].isin(set(runs["run_id"]))]
    if energy.empty:
        return parts
    run_ids = [rid for rid in runs["run_id"] if rid in set(energy["run_id"])]
    shown = run_ids[:MAX_RUNS]
    if len(run_ids) > MAX_RUNS:
        parts.notes.append(f"energy: {len(run_ids)} runs logged energies; the figures show the first {MAX_RUNS} "
                           "(the table lists all)")
    last = last_evaluation(energy)
    parts.figures.append(descent_figure(runs, last, shown))
    evolution = training_figure(runs, energy[energy["run_id"].isin(shown)], shown)
    if evolution is not None:
        parts.figures.append(evolution)
    labels = run_names(runs)
    table = last.assign(series=last["run_id"].map(labels))[
        ["run_id", "series", "step", "layer", "sublayer", "t", "energy", "step_change", "descent_frac"]
    ].rename(columns={"step": "train step", "step_change": "E_t - E_(t-1)", "descent_frac": "descent fraction"})
    parts.tables.append(TablePart("energy_descent", table, "Mean energy after t recursive steps at each run's last "
                                  "evaluation, its change in step t and the share of tokens whose energy fell."))
    return parts
