"""`cemctl claims [--scale S] [--out DIR] [--power]`: the claims the grids declare, tested on every run there is.

    result = claims_report(db_url, out_dir="reports/claims", scale="cpu", runs_root="runs")
    result.parts   # one row per (claim part, scale): effect, 95% interval, labels, verdicts, Holm-adjusted ones
    result.claims  # one row per (claim, scale): the verdict from the adjusted part verdicts

The claims are data: every recorded experiment's `[[claim]]` tables (the paper's six
findings live in experiments/*.toml; parts of one claim id may come from several
grids). Syncs the run directories (unless the database is read-only or `sync=False`),
evaluates them with `cemctl.report.claims` on the finished runs at each scale, and
writes `claims.md` (the statistical plan, the verdicts, every part unadjusted and
adjusted), `claims.csv` (every part with the runs it used), `claims_summary.csv` and
`claims.png` / `.pdf` into the output folder (replaced only if an earlier `cemctl
claims` wrote it).
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from cem_core.errors import CemError
from cemctl.report.claims import effect_text

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

VERDICT_COLORS = {"holds": "#2ca02c", "contradicted": "#d62728", "inconclusive": "#7f7f7f", "not run": "#c7c7c7"}
EXPLORATORY_COLOR = "#9467bd"  # a stage-1 row: exploratory, never a verdict
CSV_COLUMNS = ("claim", "part", "experiment", "scale", "statistic", "stage", "evidence", "confirmed_by", "unit",
               "expect", "margin", "rates", "variance", "variance_rule", "effect", "ci95_low", "ci95_high", "open",
               "method", "df", "n", "sizes", "p", "p_of", "label", "verdict", "p_holm", "holm_level", "holm_low",
               "holm_high", "label_holm", "verdict_holm", "stage1_rates", "stage1_effect", "stage1_low",
               "stage1_high", "stage1_label", "advice", "robustness", "trend", "trend_low", "trend_high",
               "fall_per_10pct", "convergence", "declared", "sequential", "why_not_run", "runs")
PLAN = (
    "How each part is decided (fixed before the numbers; `cemctl/report/claims.py`, docs/claims.md): a part names "
    "its arms by selectors that must each match exactly one arm (every config value but the seed) per scale and "
    "size, and its arms may differ only in what the selectors set apart, so no two configurations are pooled. A "
    "part at a fixed rate (`fixed`) is decided on its runs. A part about designs chooses each arm's rate in two "
    "stages: stage 1 takes the rate its grid's rule picks from the arm's lr profile (the sampled rate of lowest "
    "mean validation loss, or the interpolated optimum on the half-octave ladder) and shows the contrast at those "
    "rates as exploratory, never as a verdict (the seeds that chose a rate flatter it); stage 2, a confirmation "
    "grid written by `cemctl confirm` and registered before its runs, trains each arm at its chosen rate on "
    "fresh seeds (an lr_optimum part: both arms at both chosen rates, and the part asks which arm loses more at the "
    "lower one) and decides. The variance model is declared, else Welch. A 95% interval below 0 reads `lower` "
    "(the first arm's loss is lower: better), above 0 `higher`, within +-margin `close`, wholly beyond it `not "
    "close`, anything else `inconclusive`; a part `holds` when that is the expected label, is `contradicted` by "
    "the opposite or, for a directional part, by `close`. Margins are ours, not the paper's. Multiplicity: a "
    "step-down over every decisive part's label hypotheses at one scale (Holm's, counting the hypotheses that can "
    "still be true: Shaffer's S1; family-wise error 5%, measured by simulation of the whole page); a part of an "
    "experiment launched `--until-decided` is analysed over its looks with Lan-DeMets O'Brien-Fleming alpha "
    "spending. A part is `confirmatory` when its declaration was registered at a launch before any of its runs "
    "finished (stage 2: on seeds that chose nothing), `exploratory` otherwise. Robustness rows, the gap's trend "
    "over the last third of training and the size ladder are outside the family: they qualify a verdict, never "
    "make one.")


@dataclass
class ClaimsResult:
    parts: "pd.DataFrame"
    claims: "pd.DataFrame"
    out_dir: Path | None = None
    files: list[Path] = field(default_factory=list)
    code_notes: list[str] = field(default_factory=list)  # runs trained by older code; parts mixing code versions
    robustness: "pd.DataFrame | None" = None  # the same contrasts under other settings (secondary rows)
    ladder: "pd.DataFrame | None" = None  # each part's gap per model size (two sizes or more)


MARGIN_COLOR = "#fbe7a1"  # pale yellow: never a verdict's colour


def claims_figure(parts: "pd.DataFrame") -> "Figure":
    """Effect with its 95% interval (a line coloured by the adjusted verdict) and its adjusted interval (a hollow
    black box) per part; the pale yellow band is the part's margin; an interval cut at the axis ends in an arrow
    (the axis shows most parts' intervals whole); a part with no estimate is written 'not run' at 0. The
    learning-rate scale (log2(lr) / 10) is named, and a legend entry shown, only for what is drawn."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    from cemctl.report import style

    labels = list(dict.fromkeys(f"{r.claim}. {r.part}" for r in parts.itertuples()))
    scales = list(dict.fromkeys(parts["scale"]))
    fig, (ax,) = style.new_figure(1, panel_w=9.0, panel_h=0.42 * max(1, len(labels)) + 1.6)

    def k_of(unit: str) -> float:
        return 1.0 if unit == "nats" else 10.0

    ends = [abs(v) / k_of(r.unit) for r in parts.itertuples() for v in (r.effect, r.ci95_low, r.ci95_high, r.margin)
            if isinstance(v, (int, float)) and math.isfinite(v)]
    if ends:  # the axis shows most parts' 95% intervals whole; the widest few are cut (an arrow says so)
        import numpy as np

        span = 1.15 * max(float(np.quantile(ends, 0.85)),
                          max(abs(r.effect) / k_of(r.unit) for r in parts.itertuples() if math.isfinite(r.effect))
                          if any(math.isfinite(r.effect) for r in parts.itertuples()) else 0.0)
    span = span if ends and span > 0 else 0.1
    lim = (-span, span)
    drawn: set[str] = set()
    lr_parts = False
    for r in parts.itertuples():
        y = labels.index(f"{r.claim}. {r.part}") + (scales.index(r.scale) - (len(scales) - 1) / 2) * 0.25
        k = k_of(r.unit)
        lr_parts |= r.unit != "nats"
        if math.isfinite(r.margin) and r.margin > 0:
            ax.add_patch(Rectangle((-min(r.margin / k, span), y - 0.3), 2 * min(r.margin / k, span), 0.6,
                                   color=MARGIN_COLOR, linewidth=0, zorder=0))
            drawn.add("margin")
        if not math.isfinite(r.effect):
            ax.text(0, y, "not run", ha="center", va="center", fontsize=7, color="0.45", style="italic")
            drawn.add("not run")
            continue
        exploratory = getattr(r, "stage", "") == "stage 1"
        color = EXPLORATORY_COLOR if exploratory else VERDICT_COLORS.get(r.verdict_holm, "0.3")
        drawn.add("exploratory" if exploratory else r.verdict_holm)

        def segment(lo: float, hi: float, **kw: Any) -> None:
            a = -math.inf if not math.isfinite(lo) else lo / k
            b = math.inf if not math.isfinite(hi) else hi / k
            ca, cb = max(a, lim[0]), min(b, lim[1])
            ax.plot([ca, cb], [y, y], solid_capstyle="butt", **kw)
            for end, cut, sign in ((ca, a < lim[0], -1), (cb, b > lim[1], 1)):
                if cut:  # the interval goes on beyond the axis
                    ax.annotate("", xy=(end, y), xytext=(end - sign * span * 0.06, y),
                                arrowprops=dict(arrowstyle="->", color=kw.get("color", "0.3"), lw=1.2))
                    drawn.add("clipped")

        holm_lo, holm_hi = getattr(r, "holm_low", math.nan), getattr(r, "holm_high", math.nan)
        # an interval open on a side is +-inf there (censored optima: both sides too); only NaN means none
        if not (math.isnan(holm_lo) and math.isnan(holm_hi)):  # a hollow box: distinct from the margin and 'not run'
            a = max(lim[0], holm_lo / k) if math.isfinite(holm_lo) else lim[0]
            b = min(lim[1], holm_hi / k) if math.isfinite(holm_hi) else lim[1]
            ax.add_patch(Rectangle((a, y - 0.17), b - a, 0.34, fill=False, edgecolor="black", linewidth=0.9,
                                   zorder=1))
            for end, cut, sign in ((a, not (math.isfinite(holm_lo) and holm_lo / k >= lim[0]), -1),
                                   (b, not (math.isfinite(holm_hi) and holm_hi / k <= lim[1]), 1)):
                if cut:
                    ax.annotate("", xy=(end, y), xytext=(end - sign * span * 0.06, y),
                                arrowprops=dict(arrowstyle="->", color="black", lw=1.0))
                    drawn.add("clipped")
            drawn.add("holm")
        if not (math.isnan(r.ci95_low) and math.isnan(r.ci95_high)):
            segment(r.ci95_low, r.ci95_high, color=color, linewidth=1.4, zorder=2)
        ax.plot([max(lim[0], min(lim[1], r.effect / k))], [y], style.SIZE_MARKERS[scales.index(r.scale) %
                len(style.SIZE_MARKERS)], color=color, markersize=6, zorder=3)
    ax.set_xlim(*lim)
    ax.axvline(0, color="0.3", linewidth=0.8)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels([lab if len(lab) <= 72 else lab[:69] + "..." for lab in labels], fontsize=7.5)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlabel("effect (nats of test loss" + ("; learning-rate parts: log2(lr) / 10" if lr_parts else "") + ")")
    handles = [Line2D([], [], color=c, marker="o", linewidth=1.4, label=f"{v} (95% interval)")
               for v, c in VERDICT_COLORS.items() if v in drawn and v != "not run"]
    if "exploratory" in drawn:
        handles.append(Line2D([], [], color=EXPLORATORY_COLOR, marker="o", linewidth=1.4,
                              label="stage 1, exploratory (rates chosen on these seeds)"))
    if "holm" in drawn:
        handles.append(Patch(fill=False, edgecolor="black", linewidth=0.9, label="adjusted interval (step-down level)"))  # type: ignore[arg-type]
    if "margin" in drawn:
        handles.append(Patch(color=MARGIN_COLOR, label="the part's margin (+-)"))  # type: ignore[arg-type]
    if "clipped" in drawn:
        handles.append(Line2D([], [], color="0.3", marker=">", linestyle="none", label="goes on beyond the axis"))
    if len(scales) > 1:
        handles += [Line2D([], [], color="0.3", marker=style.SIZE_MARKERS[i % len(style.SIZE_MARKERS)],
                           linestyle="none", label=f"scale {s or '(none)'}") for i, s in enumerate(scales)]
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=min(3, len(handles)), fontsize=8,
                   frameon=False)
    return fig


def ladder_figure(ladder: "pd.DataFrame") -> "Figure":
    """Each part's gap (95% interval) against its model size's non-embedding parameters (log axis), with the
    weighted line whose slope the page quotes; titled directional."""
    import numpy as np

    from cemctl.report import style

    groups = list(ladder.groupby(["claim", "part", "scale"], sort=False))
    fig, (ax,) = style.new_figure(1, panel_w=7.5, panel_h=4.2)
    for i, ((claim, part, _), g) in enumerate(groups):
        color = f"C{i % 10}"
        x = g["params_non_embedding"].to_numpy(float)
        y = g["effect"].to_numpy(float)
        lo, hi = g["ci95_low"].to_numpy(float), g["ci95_high"].to_numpy(float)
        ax.errorbar(x * (1 + 0.02 * (i - len(groups) / 2)), y, yerr=[y - lo, hi - y], fmt="o", color=color,
                    capsize=3, label=f"{claim}. {part}"[:70])
        slope = float(g["slope_per_doubling"].iloc[0])
        if math.isfinite(slope):
            lx = np.log2(x)
            w = 1 / np.maximum(((hi - lo) / 3.92) ** 2, 1e-12)
            mx, my = float(np.sum(w * lx) / np.sum(w)), float(np.sum(w * y) / np.sum(w))
            grid = np.linspace(lx.min(), lx.max(), 20)
            ax.plot(2 ** grid, my + slope * (grid - mx), color=color, linewidth=1, alpha=0.7)
    ax.axhline(0, color="0.3", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("non-embedding parameters")
    ax.set_ylabel("gap (nats of test loss)")
    style.suptitle(fig, "The gap against model size (directional: a trend over this range, not a forecast)")
    ax.legend(fontsize=7, frameon=False, loc="best")
    return fig


def _fmt(v: float, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if math.isinf(v):
        return "+inf" if v > 0 else "-inf"
    return f"{v:+.{digits}f}"


def code_summary(runs: "pd.DataFrame") -> str:
    """The code fingerprints of the finished runs: "9f3a61c0b2d4 (93 runs)", older cemctl's runs as unrecorded."""
    if "code_fingerprint" not in runs.columns:
        return "-"
    done = runs[runs["state"] == "done"]
    counts = done["code_fingerprint"].fillna("not recorded").value_counts()
    return ", ".join(f"{fp} ({n} run{'s' if n != 1 else ''})" for fp, n in counts.items()) or "-"


def code_notes(engine: Any, runs: "pd.DataFrame", parts: "pd.DataFrame") -> list[str]:
    """Lines about the code behind the numbers: runs trained by older model code, and parts whose runs were
    trained by different code (a difference between them may be the code's, not the claim's)."""
    from cem_core.fingerprint import canonical
    from cemctl.db.outdated import outdated_note, outdated_runs

    notes: list[str] = []
    used = sorted({rid for ids in parts.get("runs", []) for rid in str(ids or "").split(",") if rid})
    if "outdated" in runs.columns:  # the record's judgement (`cemctl.records`): not judged a second time
        flags = dict(zip(runs["run_id"].astype(str), runs["outdated"]))
        stale = [rid for rid in used if flags.get(rid) is True]
    else:
        stale = list(outdated_runs(engine, used))
    if stale:
        notes.append(outdated_note(len(stale)).replace("were trained", "used here were trained")
                     .replace("was trained", "used here was trained"))
    if "code_fingerprint" in runs.columns:
        code = dict(zip(runs["run_id"], runs["code_fingerprint"]))
        for r in parts.itertuples():
            found = (code.get(rid) for rid in str(getattr(r, "runs", "") or "").split(",") if rid)
            fps = {fp for fp in found if isinstance(fp, str) and fp}
            if len({canonical(fp) for fp in fps}) > 1:  # code shown to compute the same is one version
                notes.append(f"{r.claim}. {r.part} ({r.scale}): its runs were trained by {len(fps)} versions of the "
                             f"model code ({', '.join(sorted(fps))}); a difference may be the code's")  # type: ignore[arg-type]
    return notes


def evidence(row: Any) -> str:
    """confirmatory / exploratory (why), the one mark the page, the terminal and the dashboard show per part."""
    declared = str(getattr(row, "declared", "") or "")
    stage = str(getattr(row, "stage", ""))
    if stage == "stage 1":
        return "exploratory (rates chosen on these seeds)"
    if declared.startswith("confirmatory"):
        return declared
    if declared.startswith("exploratory"):
        return declared
    return "exploratory (" + (declared or "not registered") + ")"


def claim_evidence(parts: "pd.DataFrame", claim: str, scale: str) -> str:
    """A claim's evidence mark over its parts: 'confirmatory' when every part that was run is, else 'exploratory (k
    of n parts: the first reason)' (the page's one-line summary, the terminal's claims table, the dashboard's)."""
    g = parts[(parts["claim"].astype(str) == str(claim)) & (parts["scale"] == scale) & (parts["verdict"] != "not run")]
    if g.empty:
        return ""
    marks = [evidence(r) for r in g.itertuples()]
    loose = [m for m in marks if not m.startswith("confirmatory")]
    if not loose:
        return "confirmatory"
    return f"exploratory ({len(loose)} of {len(marks)} part{'s' if len(marks) != 1 else ''}: {loose[0]})"


def verdict_text(r: Any) -> str:
    """'not close: contradicted (adjusted)', 'exploratory: not close', 'not run: why'."""
    if r.verdict == "not run":
        why = str(getattr(r, "why_not_run", "") or "")
        return "not run" + (f": {why}" if why else "")
    if r.stage == "stage 1":
        return f"exploratory: {r.label}"
    return f"{r.label_holm}: {r.verdict_holm}" if r.verdict_holm in DECIDED else \
        f"{r.verdict_holm} ({r.label} before the adjustment)" if r.label not in ("inconclusive", "not run") \
        else r.verdict_holm


DECIDED = ("holds", "contradicted")


def _trend(r: Any) -> str:
    t = getattr(r, "trend", math.nan)
    text = effect_text(t, getattr(r, "trend_low", math.nan), getattr(r, "trend_high", math.nan)) \
        if isinstance(t, float) and math.isfinite(t) else "-"
    conv = str(getattr(r, "convergence", "") or "")
    return f"{text}; {conv}" if conv and text != "-" else (conv or text)


def claim_lines(parts: "pd.DataFrame", verdicts: "pd.DataFrame") -> list[str]:
    """One line per claim and scale: the verdict, the part that decides it (or the first) with its effect and
    interval, the scale, model size and seeds, and whether it is confirmatory."""
    out = []
    for v in verdicts.itertuples():
        g = parts[(parts["claim"].astype(str) == str(v.claim)) & (parts["scale"] == v.scale)]
        if g.empty:
            continue
        lead = next((r for r in g.itertuples() if r.verdict_holm in DECIDED), None) or \
            next((r for r in g.itertuples() if r.verdict != "not run"), None) or next(g.itertuples())
        where = ", ".join(x for x in (v.scale or "-", str(getattr(lead, "model", "") or ""),
                                      f"{int(lead.n)} seeds" if lead.n else "") if x)
        unit = "" if lead.unit == "log2(lr)" and lead.stage == "stage 1" else f" {lead.unit}"
        more = f" (+{len(g) - 1} more part{'s' if len(g) > 2 else ''})" if len(g) > 1 else ""
        text = f"- **Claim {v.claim}** ({where}): **{v.verdict}**. {lead.part}: " + \
            (effect_text(lead.effect, lead.ci95_low, lead.ci95_high, lead.unit) + unit
             if lead.verdict != "not run" else "not run") + f", {evidence(lead)}{more}."
        if lead.stage == "stage 1" and lead.verdict != "not run":
            text += f" Confirm it: `cemctl confirm {lead.experiment} --scale {lead.scale}`."
        out.append(text)
    return out


def claims_markdown(parts: "pd.DataFrame", claims: "pd.DataFrame", header: list[tuple[str, str]], *,
                    notes: Sequence[str] = (), robustness: "pd.DataFrame | None" = None,
                    ladder: "pd.DataFrame | None" = None) -> str:
    from cem_core.names import printable
    from cemctl.report.tables import to_markdown

    out = ["# Does CEM hold up? The claims, decided", ""]
    out += [f"- **{k}**: {printable(v)}" for k, v in header]
    out += ["", "## The claims, one line each", ""] + [printable(x) for x in claim_lines(parts, claims)]
    body = parts.assign(
        evidence=[evidence(r) for r in parts.itertuples()],
        effect=[effect_text(r.effect, r.ci95_low, r.ci95_high, r.unit) +
                (f" {r.unit}" if r.unit != "log2(lr)" or r.stage != "stage 1" else "") if r.verdict != "not run"
                else "" for r in parts.itertuples()],
        verdict=[verdict_text(r) for r in parts.itertuples()],
        trend=[_trend(r) for r in parts.itertuples()],
        checks=["; ".join(x for x in (getattr(r, "robustness", ""), getattr(r, "sequential", ""),
                                      f"rates {r.rates}" if getattr(r, "rates", "") else "") if x) or "-"
                for r in parts.itertuples()],
        part=[f"{r.part} ({r.scale})" if parts["scale"].nunique() > 1 else r.part for r in parts.itertuples()],
    ).rename(columns={"effect": "effect [95% interval]", "verdict": "verdict (adjusted)",
                      "trend": "gap trend per 10% of training (last third)"})
    out += ["", "## Every part", ""]
    out.append(to_markdown(body[["claim", "part", "evidence", "effect [95% interval]", "verdict (adjusted)",
                                 "gap trend per 10% of training (last third)", "checks"]]).rstrip())
    out += ["", "`evidence`: `confirmatory` when the part's declaration was registered before any of its runs "
            "finished (stage 2: on seeds that chose nothing), `exploratory` otherwise (a stage-1 row: the "
            "contrast at rates chosen on its own seeds, never a verdict). `effect`: the first arm minus the second "
            "(an interaction: the difference of differences), rounded to two significant digits of its interval's "
            "half-width; `(-inf` / `+inf)`: open on that side (an arm's chosen rate at the edge of its profile). "
            "`verdict (adjusted)`: the label and verdict after the step-down over every decisive part of the page. "
            "`gap trend`: the contrast of the arms' validation-loss slopes over the last third of training, per "
            "10% of the budget, with its 95% interval (negative: the gap moves toward the first arm), and whether "
            "the fastest arm still falls faster than the margin. `checks`: the sign under other settings "
            "(robustness rows below; the step size of a T >= 2 arm), the sequential looks, each arm's rate. "
            "Everything else (p-values, levels, df, methods, runs) is in `claims.csv`."]
    if "stage1_effect" in parts.columns and parts["stage1_effect"].notna().any():
        both = parts[parts["stage1_effect"].notna()]
        table = both.assign(
            stage1=[f"{effect_text(r.stage1_effect, r.stage1_low, r.stage1_high)} at {r.stage1_rates}"
                    for r in both.itertuples()],
            stage2=[f"{effect_text(r.effect, r.ci95_low, r.ci95_high)} at {r.rates}" if r.verdict != "not run"
                    else f"not run ({r.why_not_run})" for r in both.itertuples()])
        out += ["", "## Stage 1 beside stage 2", "",
                "Stage 1 chose the rates on its own seeds (exploratory); stage 2 decided on fresh seeds at those "
                "rates (its row above).", ""]
        out.append(to_markdown(table[["claim", "part", "confirmed_by", "stage1", "stage2"]].rename(
            columns={"confirmed_by": "confirmation", "stage1": "stage 1 (exploratory)",
                     "stage2": "stage 2"})).rstrip())
    if ladder is not None and not ladder.empty:
        lines = []
        for (claim, part, scale), g in ladder.groupby(["claim", "part", "scale"], sort=False):
            first = g.iloc[0]
            gaps = "; ".join(f"{r.size} ({r.params_non_embedding / 1e6:.2g}M"
                             + (f", rate {r.rate}" if getattr(r, "rate", "chosen") != "chosen" else "") + "): "
                             f"{effect_text(r.effect, r.ci95_low, r.ci95_high)}"
                             + (f", Llama at {_ratio(r.compute_x, r.compute_x_low, r.compute_x_high)} its compute"
                                if math.isfinite(r.compute_x) else "") for r in g.itertuples())
            slope = effect_text(first.slope_per_doubling, first.slope_low, first.slope_high)
            lines.append({"claim": claim, "part": part, "scale": scale, "gap per size": gaps,
                          "slope per doubling of parameters": slope})
        import pandas as pd

        lo, hi = ladder["params_non_embedding"].min(), ladder["params_non_embedding"].max()
        b = float(ladder["llama_per_compute_doubling"].iloc[0]) if "llama_per_compute_doubling" in ladder else math.nan
        llama = (f"The Llama baseline's test loss falls {-b:.3g} nats per doubling of its training compute over these "
                 "sizes." if math.isfinite(b) and b < 0 else
                 "The Llama baseline's loss does not fall with its compute over these sizes (or it ran at one size): "
                 "no compute equivalent.")
        out += ["", "## The size ladder (directional)", "",
                f"Each part's gap at each model size ({lo / 1e6:.2g}M-{hi / 1e6:.2g}M non-embedding parameters), "
                "the weighted slope of the gap per doubling of parameters with its 95% interval, and the compute "
                "at which the Llama baseline's loss (its line of test loss against log2 training FLOPs over the "
                "sizes) would be as much higher: 'Llama at 0.8x its compute' means the arm matches Llama "
                "trained on 0.8 of the compute (the interval is the gap's; the line's own error is not in it). "
                "Directional: the slope says which way a gap moves over this range, not its size at 86M-162M, "
                f"{86e6 / hi:.0f}x beyond the largest rung; small-scale proxies pick the large-scale winner in "
                "about 80% of comparisons at best, and rankings can flip with scale. " + llama, ""]
        out.append(to_markdown(pd.DataFrame(lines)).rstrip())
    if robustness is not None and not robustness.empty:
        rob = robustness.assign(setting=[f"{k}={v}" for k, v in zip(robustness["key"], robustness["value"])],
                                effect=[effect_text(e, lo, hi) if lab != "not run" else "not run"
                                        for e, lo, hi, lab in zip(robustness["effect"], robustness["ci95_low"],
                                                                  robustness["ci95_high"], robustness["label"])])
        out += ["", "## Robustness: the same contrast under other settings", "",
                "Secondary rows, each with its own 95% interval (not adjusted, not in the family): the part's "
                "contrast with one key it pins set to another value the runs hold; for a part with a T >= 2 arm, "
                "the step size at the other of eta = 1 and 1/T (declared: `not run` says it is missing).", ""]
        out.append(to_markdown(rob[["claim", "part", "scale", "setting", "effect", "n", "label"]].rename(
            columns={"effect": "effect [95% interval]"})).rstrip())
    advice = [f"{r.claim}. {r.part} ({r.scale}): {r.advice}" for r in parts.itertuples() if getattr(r, "advice", "")]
    if advice:
        out += ["", "Extend a profile before confirming (learning rates to add to the grid; nothing was edited):", ""] \
            + [f"- {printable(a)}" for a in advice]
    confirm = sorted({f"cemctl confirm {r.experiment} --scale {r.scale}" for r in parts.itertuples()
                      if r.stage == "stage 1" and r.verdict != "not run"})
    if confirm:
        out += ["", "To decide the stage-1 parts (a confirmation grid on fresh seeds, registered before it trains):",
                ""] + [f"- `{c}`" for c in confirm]
    why = [f"{r.claim}. {r.part} ({r.scale}): {r.why_not_run}" for r in parts.itertuples()
           if getattr(r, "why_not_run", "") and r.verdict == "not run"]
    if why:
        out += ["", "Not run:", ""] + [f"- {printable(w)}" for w in why]
    if notes:
        out += ["", "Code versions:", ""] + [f"- {printable(n)}" for n in notes]
    out += ["", PLAN, "", "![claims](claims.png)", ""]
    return "\n".join(out)


def _ratio(x: float, lo: float, hi: float) -> str:
    k = max(1, min(3, 1 - math.floor(math.log10(max(1e-9, (hi - lo) / 2))))) if math.isfinite(lo) and \
        math.isfinite(hi) and hi > lo else 2
    return f"{x:.{k}f}x [{lo:.{k}f}, {hi:.{k}f}]" if math.isfinite(lo) else f"{x:.{k}f}x"


def val_slopes(engine: Any, runs: "pd.DataFrame") -> dict[str, float]:
    """Each finished run's change of the validation loss per 10% of its training budget at the end of training:
    the least-squares slope over the evaluations in the last third of its steps (at least the last two). One
    query for the columns it needs, one vectorised pass (grouped sums), no per-run frame."""
    import numpy as np
    from sqlalchemy import select

    from cemctl.db.models import Metric
    from cemctl.db.engine import read_session

    done = runs[runs["state"] == "done"] if "state" in runs.columns else runs
    if done.empty:
        return {}
    budget_col = "steps" if "steps" in done.columns else "total_steps"  # the result's steps, or the planned ones
    budget = dict(zip(done["run_id"].astype(str), done[budget_col] if budget_col in done.columns else [None] * len(done)))
    ids = list(budget)
    rid, step, val = [], [], []
    with read_session(engine) as s:
        for i in range(0, len(ids), 500):
            q = select(Metric.run_id, Metric.step, Metric.val_loss).where(
                Metric.kind == "val", Metric.run_id.in_(ids[i:i + 500]), Metric.val_loss.is_not(None))
            for r, st, v in s.execute(q):
                rid.append(r)
                step.append(st)
                val.append(v)
    if not rid:
        return {}
    names, codes = np.unique(np.asarray(rid).astype(str), return_inverse=True)
    x, y = np.asarray(step, dtype=float), np.asarray(val, dtype=float)
    ok = np.isfinite(y)
    x, y, codes = x[ok], y[ok], codes[ok]
    order = np.lexsort((x, codes))
    x, y, codes = x[order], y[order], codes[order]
    k = len(names)
    last = np.zeros(k)
    np.maximum.at(last, codes, x)
    total = np.array([_budget(budget.get(str(n)), last[j]) for j, n in enumerate(names)])
    start = np.searchsorted(codes, np.arange(k))
    count = np.bincount(codes, minlength=k)
    rank_from_end = (start + count)[codes] - np.arange(len(codes))  # 1 for each run's last evaluation
    keep = (x >= total[codes] * (2 / 3)) | (rank_from_end <= 2)
    x, y, c = x[keep], y[keep], codes[keep]
    n = np.bincount(c, minlength=k).astype(float)
    sx, sy = np.bincount(c, x, k), np.bincount(c, y, k)
    sxx, sxy = np.bincount(c, x * x, k), np.bincount(c, x * y, k)
    with np.errstate(divide="ignore", invalid="ignore"):
        den = n * sxx - sx * sx
        slope = (n * sxy - sx * sy) / den
    out = {}
    for j, name in enumerate(names):
        if n[j] >= 2 and den[j] > 1e-12 * max(1.0, n[j] * sxx[j]):
            out[str(name)] = float(slope[j]) * 0.1 * total[j]
    return out


def _budget(steps: Any, last_step: float) -> float:
    try:
        v = float(steps)
    except (TypeError, ValueError):
        return float(last_step)
    return v if math.isfinite(v) and v > 0 else float(last_step)


def gather_claims(engine: Any) -> list[Any]:
    """Every recorded experiment's [[claim]] tables; parts of one claim id from several grids are one claim; a
    confirmation grid's part ([confirm], stage 2) is attached to the part it confirms (the same claim and name in
    the experiment its [confirm] names) rather than listed again, or listed as its own part where that part is
    gone."""
    from cemctl.db.runs import list_experiments
    from cemctl.grid.claims import ClaimSpec, recorded_claims

    merged: dict[str, ClaimSpec] = {}
    confirming: list[tuple[Any, Any]] = []
    for exp in list_experiments(engine):
        for claim in recorded_claims(exp.grid_text, exp.grid_path or exp.name):
            for part in claim.parts:
                part.source = exp.name
            if claim.parts and claim.parts[0].confirm is not None:
                confirming.append((claim, exp))
                continue
            if claim.id in merged:
                merged[claim.id].parts += claim.parts
            else:
                claim.source = exp.name
                merged[claim.id] = claim
    for claim, exp in confirming:
        target = merged.get(claim.id)
        for part in claim.parts:
            stage1 = next((p for p in (target.parts if target else []) if p.name == part.name
                           and p.source == part.confirm.of), None)
            if stage1 is not None:
                stage1.confirmation = part
            elif target is not None:
                target.parts.append(part)
            else:
                claim.source = exp.name
                merged[claim.id] = target = ClaimSpec(claim.id, claim.statement, [part], source=exp.name)
    return sorted(merged.values(), key=lambda c: (not c.id.isdigit(), int(c.id) if c.id.isdigit() else 0, c.id))



def next_command(part: Any) -> str:
    """What decides a part not run yet: its confirmation grid's loop where one is registered (stage 2 decides
    there, never the stage-1 grid again), else its grid's launch; "" for a part that ran or cannot be evaluated."""
    if part.verdict != "not run" or not part.scale or isinstance(getattr(part, "error", None), str):
        return ""
    confirmed_by = getattr(part, "confirmed_by", "")
    if isinstance(confirmed_by, str) and confirmed_by:
        return f"cemctl launch {confirmed_by} --scale {part.scale} --until-decided"
    return f"cemctl launch {part.experiment} --scale {part.scale}"

def claims_report(db_url: str, *, out_dir: Path | str | None = None, scale: str | None = None,
                  runs_root: Path | str | None = None, sync: bool = True, power: bool = False,
                  formats: tuple[str, ...] = ("png", "pdf")) -> ClaimsResult:
    from cemctl.db.engine import is_readonly, open_existing_db, open_readonly_db
    from cemctl.db.runs import resolve_runs_root
    from cemctl.records import load_records
    from cemctl.report.claims import claim_verdicts, evaluate_page
    from cemctl.services.claim_plans import declared_labels, load_designs

    engine = open_existing_db(db_url) if sync else open_readonly_db(db_url)  # a read writes nothing, not even a WAL
    if runs_root is not None:
        runs_root = resolve_runs_root(engine, runs_root)
    if sync and not is_readonly(engine) and runs_root is not None and Path(runs_root).is_dir():
        from cemctl.db.ingest import sync_runs

        sync_runs(engine, runs_root)
    if out_dir is not None:  # a folder cemctl may not replace is refused before any work
        from cemctl.report.outdir import check_output_dir

        check_output_dir(out_dir, what="claims")
    claims = gather_claims(engine)
    if not claims:
        raise CemError("claims: no recorded grid declares a [[claim]] (plan the figure grids first, e.g. "
                       "`cemctl plan fig2a --scale cpu`)")
    runs = load_records(engine, None, scale=scale, per_scale=True).frame()
    if runs.empty:
        raise CemError("claims: the results database holds no runs yet (plan and launch the figure grids first)")
    page = evaluate_page(runs, claims, scales=[scale] if scale is not None else None, power=power,
                         slopes=lambda ids: val_slopes(engine, runs[runs["run_id"].isin(ids)]),
                         declared=declared_labels(runs_root, claims),
                         designs=load_designs(runs_root, scale))
    parts = page.parts
    parts["evidence"] = [evidence(r) for r in parts.itertuples()]
    parts["next"] = [next_command(r) for r in parts.itertuples()]
    verdicts = claim_verdicts(parts)
    result = ClaimsResult(parts, verdicts, robustness=page.robustness, ladder=page.ladder)
    result.code_notes = code_notes(engine, runs, parts)
    if out_dir is None:
        return result
    from cemctl.report.index import git_commit
    from cemctl.report.outdir import check_output_dir, new_build_dir, swap_in
    from cemctl.report.tables import write_csv

    out = check_output_dir(out_dir, what="claims")
    tmp = new_build_dir(out)
    try:
        from cemctl.db.runs import list_experiments

        grids = ", ".join(f"{e.name} {e.grid_sha256[:12]}" for e in list_experiments(engine) if e.grid_sha256)
        header = [("generated", _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
                  ("git commit", git_commit()), ("scales", ", ".join(sorted(set(parts["scale"]))) or "-"),
                  ("finished runs", str(int((runs["state"] == "done").sum()))),
                  ("grids (sha256)", grids or "-"),
                  ("model code", code_summary(runs))]
        (tmp / "claims.md").write_text(claims_markdown(parts, verdicts, header, notes=result.code_notes,
                                                       robustness=page.robustness, ladder=page.ladder))
        csv_cols = [c for c in CSV_COLUMNS if c in parts.columns] + \
            [c for c in ("seeds_for_80pct_power", "seeds_unadjusted", "seeds_low", "seeds_high", "next")
             if c in parts.columns]
        write_csv(page.robustness, tmp / "claims_robustness.csv")
        if page.ladder is not None and not page.ladder.empty:
            write_csv(page.ladder, tmp / "claims_ladder.csv")
        write_csv(parts[csv_cols], tmp / "claims.csv")  # text cells with their control characters escaped
        write_csv(verdicts, tmp / "claims_summary.csv")
        fig = claims_figure(parts)
        for fmt in formats:
            fig.savefig(tmp / f"claims.{fmt}", dpi=150, format=fmt)
        fig.clear()
        if page.ladder is not None and not page.ladder.empty:
            lad = ladder_figure(page.ladder)
            for fmt in formats:
                lad.savefig(tmp / f"claims_ladder.{fmt}", dpi=150, format=fmt)
            lad.clear()
        swap_in(tmp, out, what="claims")
    finally:
        if tmp.exists():
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    result.out_dir = out
    result.files = sorted(p for p in out.iterdir() if not p.name.startswith("."))
    return result
