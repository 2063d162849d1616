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

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

VERDICT_COLORS = {"holds": "#2ca02c", "contradicted": "#d62728", "inconclusive": "#7f7f7f", "not run": "#c7c7c7"}
CSV_COLUMNS = ("claim", "part", "experiment", "scale", "statistic", "unit", "expect", "margin", "at", "variance", "variance_rule",
               "effect", "ci95_low", "ci95_high", "method", "df", "n", "p", "p_of", "label", "verdict", "p_holm",
               "holm_level", "holm_low", "holm_high", "label_holm", "verdict_holm", "censored", "other_at",
               "other_effect", "other_low", "other_high", "other_label", "disagree", "optima", "seed_optima",
               "advice", "robustness", "fall_per_10pct", "convergence", "declared", "sequential", "why_not_run",
               "runs")
PLAN = (
    "How each part is decided (fixed before the numbers; `cemctl/report/claims.py`, docs/claims.md): a part names "
    "its arms by selectors that must each match exactly one arm (every config value but the seed) per scale and "
    "size, and its arms may differ only in what the selectors set apart, so no two configurations are pooled; a "
    "part that changes more than one key (an interaction: two) says so in its grid. Its primary contrast is "
    "declared: each arm at its own optimal learning rate (`own optimum`: the Akima optimum of the arm's seed-mean "
    "lr profile, with a jackknife over seeds that carries the noise of choosing the rate; an optimum at the edge of "
    "a profile leaves the interval open on that side) or at the learning rate the selectors pin; the other "
    "contrast is shown beside it and a part where the two labels differ is flagged. The variance model is "
    "declared or follows the rule, from the design: Welch when the arms differ in a sublayer kind or are each "
    "tuned, the within-arm variance pooled over the part's own arms otherwise, paired by seed only when declared. "
    "Learning-rate optima are bootstrapped over seeds once every rate of both sweeps has two finished seeds. A 95% "
    "interval below 0 reads `lower` (the first arm's loss is lower: better), above 0 `higher`, within +-margin "
    "`close`, wholly beyond it `not close`, anything else `inconclusive`. A part `holds` when that label is the "
    "expected one; it is `contradicted` by the opposite label, or, for a directional part, by `close` (no "
    "difference as large as the margin). Margins are ours, not the paper's (it gives none): a % of the reference "
    "arm's test loss, or stated units. Multiplicity: a step-down procedure over every part's label hypotheses at "
    "one scale (Holm's, counting the hypotheses that can still be true: Shaffer's S1; family-wise error 5%); the "
    "claim verdicts use the adjusted part verdicts. A part whose experiment was launched `--until-decided` is "
    "analysed over its recorded looks with Lan-DeMets O'Brien-Fleming alpha spending (repeated confidence "
    "intervals). Robustness rows (the same contrast under another value of one key the part pins) and the other "
    "contrast are sensitivity checks, outside the family. A part whose arms' validation loss still falls faster "
    "than its margin per 10% of the training budget is `not converged`. A part is `confirmatory` when its "
    "declaration was registered at a launch before any of its runs finished, `exploratory` when it changed after.")


@dataclass
class ClaimsResult:
    parts: "pd.DataFrame"
    claims: "pd.DataFrame"
    out_dir: Path | None = None
    files: list[Path] = field(default_factory=list)
    code_notes: list[str] = field(default_factory=list)  # runs trained by older code; parts mixing code versions
    robustness: "pd.DataFrame | None" = None  # the same contrasts under other settings (secondary rows)


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
        color = VERDICT_COLORS.get(r.verdict_holm, "0.3")
        drawn.add(r.verdict_holm)

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
    if "holm" in drawn:
        handles.append(Patch(fill=False, edgecolor="black", linewidth=0.9, label="adjusted interval (step-down level)"))
    if "margin" in drawn:
        handles.append(Patch(color=MARGIN_COLOR, label="the part's margin (+-)"))
    if "clipped" in drawn:
        handles.append(Line2D([], [], color="0.3", marker=">", linestyle="none", label="goes on beyond the axis"))
    if len(scales) > 1:
        handles += [Line2D([], [], color="0.3", marker=style.SIZE_MARKERS[i % len(style.SIZE_MARKERS)],
                           linestyle="none", label=f"scale {s or '(none)'}") for i, s in enumerate(scales)]
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=min(3, len(handles)), fontsize=8,
                   frameon=False)
    return fig


def _fmt(v: float, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if math.isinf(v):
        return "+inf" if v > 0 else "-inf"
    return f"{v:+.{digits}f}"


def _interval(lo: float, hi: float) -> str:
    return f"[{_fmt(lo)}, {_fmt(hi)}]" if math.isfinite(lo) or math.isfinite(hi) else ""


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
    from cemctl.db.outdated import outdated_note, outdated_runs

    notes: list[str] = []
    used = sorted({rid for ids in parts.get("runs", []) for rid in str(ids or "").split(",") if rid})
    stale = outdated_runs(engine, used)
    if stale:
        notes.append(outdated_note(len(stale)).replace("were trained", "used here were trained")
                     .replace("was trained", "used here was trained"))
    if "code_fingerprint" in runs.columns:
        code = dict(zip(runs["run_id"], runs["code_fingerprint"]))
        for r in parts.itertuples():
            fps = {code.get(rid) for rid in str(getattr(r, "runs", "") or "").split(",") if rid}
            fps = {fp for fp in fps if isinstance(fp, str) and fp}
            if len(fps) > 1:
                notes.append(f"{r.claim}. {r.part} ({r.scale}): its runs were trained by {len(fps)} versions of the "
                             f"model code ({', '.join(sorted(fps))}); a difference may be the code's")
    return notes


def _df(d: Any, method: str) -> str:
    if method == "bootstrap":
        return "boot"
    return f"{d:.1f}".rstrip("0").rstrip(".") if isinstance(d, (int, float)) and math.isfinite(d) else "-"


def _seeds(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(int(v))


def _power_cell(r: Any) -> str:
    """'25 (14-100)': seeds per arm for 80% power at the part's adjusted level, over the 80% interval of its s.d."""
    need = getattr(r, "seeds_for_80pct_power", None)
    lo, hi = _seeds(getattr(r, "seeds_low", None)), _seeds(getattr(r, "seeds_high", None))
    main = _seeds(need) or ("> 1000" if getattr(r, "method", "") not in ("", "bootstrap") else "")
    if not main:
        return ""
    return main + (f" ({lo or '?'}-{hi or '> 1000'})" if lo or hi else "")


def claims_markdown(parts: "pd.DataFrame", claims: "pd.DataFrame", header: list[tuple[str, str]], *,
                    notes: Sequence[str] = (), robustness: "pd.DataFrame | None" = None) -> str:
    from cem_core.names import printable
    from cemctl.report.tables import to_markdown

    out = ["# Does CEM hold up? The claims, decided", ""]
    out += [f"- **{k}**: {printable(v)}" for k, v in header]
    out += ["", PLAN, "", "## Verdicts (adjusted for every part of the page)", ""]
    out.append(to_markdown(claims[["claim", "scale", "verdict", "statement"]]).rstrip())
    out += ["", "## Every part", ""]

    def col(name: str, default: Any = "") -> list[Any]:
        return list(parts[name]) if name in parts.columns else [default] * len(parts)

    table = parts.assign(
        effect=[_fmt(v) for v in parts["effect"]],
        ci95=[_interval(lo, hi) for lo, hi in zip(parts["ci95_low"], parts["ci95_high"])],
        holm=[_interval(lo, hi) for lo, hi in zip(parts["holm_low"], parts["holm_high"])],
        margin=[f"{m:.4f}" if math.isfinite(m) else "" for m in parts["margin"]],
        p=[f"{p:.3g}" if math.isfinite(p) else "" for p in parts["p"]],
        p_holm=[f"{p:.3g}" if math.isfinite(p) else "" for p in parts["p_holm"]],
        df=[_df(d, m) for d, m in zip(parts["df"], parts["method"])],
        at=col("at"), p_of=col("p_of"),
        unadjusted=[f"{lab}: {v}" for lab, v in zip(parts["label"], parts["verdict"])],
        adjusted=[f"{lab}: {v}" for lab, v in zip(parts["label_holm"], parts["verdict_holm"])],
    )
    cols = ["claim", "part"] + (["experiment"] if "experiment" in parts.columns else []) + ["scale", "at", "expect", "unit", "margin", "effect", "ci95", "method", "df", "n", "p",
            "p_of", "unadjusted", "holm", "p_holm", "adjusted"]
    if "seeds_for_80pct_power" in parts.columns:
        table = table.assign(seeds_needed=[_power_cell(r) for r in parts.itertuples()])
        cols.append("seeds_needed")
    out.append(to_markdown(table[cols]).rstrip())
    out += ["", "`at`: the primary contrast (`own optimum`: each arm at its own optimal learning rate; `lr x`: the "
            "arms at that rate; `optima`: the optima's locations). `df`: the degrees of freedom of the part's t "
            "test (Satterthwaite's for Welch; a sequential part's at its last look); `boot`: a bootstrap over "
            "seeds, which has none. `p`: the smallest p-value over the part's label tests, and `p_of` names that "
            "test: `lower` / `higher` the two-sided t test of the effect against 0, `close` the two one-sided "
            "tests against -margin and +margin, `not close` the effect beyond the margin (for a sequential part, "
            "the least level at which its alpha-spending boundaries are crossed at some look). `unadjusted`: "
            "label and verdict at the part's own 95% interval; `adjusted`: after the step-down over the page "
            "(the interval `holm` is at the level the part was decided at, `p_holm` its adjusted p-value). "
            "`margin` in the part's unit. The runs each part used are listed in `claims.csv`."
            + (" `seeds_needed`: seeds per arm for 80% power at the margin, at the part's adjusted level (in "
               "brackets: at the ends of the 80% confidence interval of the s.d. it rests on)."
               if "seeds_needed" in cols else "")]
    checks = parts.assign(
        variance=[f"{m} ({why})" if m else "" for m, why in zip(col("variance"), col("variance_rule"))],
        other=[f"{a}: {_fmt(e)} {_interval(lo, hi)} {lab}".strip() if a and isinstance(e, float) and math.isfinite(e)
               else (f"{a}: not run" if a else "") for a, e, lo, hi, lab in
               zip(col("other_at"), col("other_effect", math.nan), col("other_low", math.nan),
                   col("other_high", math.nan), col("other_label"))],
        flag=["DIFFERS" if d is True else "" for d in col("disagree", False)],
        converged=[(f"{c} ({f:+.4f} per 10%)" if isinstance(f, float) and math.isfinite(f) else c) if c else "-"
                   for c, f in zip(col("convergence"), col("fall_per_10pct", math.nan))],
        declared=[d or "-" for d in col("declared")],
        design=[sq or "fixed" for sq in col("sequential")],
        robustness=[r or "-" for r in col("robustness")],
    )
    out += ["", "## How each part was decided, and what checks it", ""]
    out.append(to_markdown(checks[["claim", "part", "scale", "variance", "other", "flag", "robustness", "converged",
                                   "declared", "design"]]).rstrip())
    out += ["", "`variance`: the model and whether it was declared or follows the rule. `other`: the contrast that "
            "is not primary (own optimum or fixed learning rate), with its 95% interval and label; `DIFFERS` where "
            "its label differs from the primary one. `robustness`: whether the sign of the effect holds where the "
            "runs hold the same contrast under another value of one key the part pins (the rows are below). "
            "`converged`: the fastest fall of any arm's validation loss per 10% of the training budget at the end "
            "of training (negative: still rising), against the part's margin. `declared`: when the part's "
            "declaration was registered (at a launch) and whether results existed then. `design`: fixed, or the "
            "looks of an until-decided launch."]
    if robustness is not None and not robustness.empty:
        rob = robustness.assign(setting=[f"{k}={v}" for k, v in zip(robustness["key"], robustness["value"])],
                                effect=[_fmt(v) for v in robustness["effect"]],
                                ci95=[_interval(lo, hi) for lo, hi in zip(robustness["ci95_low"],
                                                                         robustness["ci95_high"])])
        out += ["", "## Robustness: the same contrast under other settings", "",
                "Secondary rows, each with its own 95% interval (not adjusted, not in the family): the part's "
                "contrast with one key it pins set to another value the runs hold.", ""]
        out.append(to_markdown(rob[["claim", "part", "scale", "setting", "effect", "ci95", "method", "n",
                                    "label"]]).rstrip())
    advice = [f"{r.claim}. {r.part} ({r.scale}): {r.advice}" for r in parts.itertuples()
              if getattr(r, "advice", "")]
    if advice:
        out += ["", "Extend the profile (learning rates to add to the grid; nothing was edited):", ""] + \
            [f"- {printable(a)}" for a in advice]
    why = [f"{r.claim}. {r.part} ({r.scale}): {r.why_not_run}" for r in parts.itertuples()
           if getattr(r, "why_not_run", "") and not math.isfinite(r.effect)]
    if why:
        out += ["", "Not run:", ""] + [f"- {printable(w)}" for w in why]
    censored = [f"{r.claim}. {r.part}: an optimum is not bracketed (at the edge of its sweep or profile, in an end "
                "interval, or next to a rate an extension added): the interval is open "
                + ("on both sides" if r.censored == "both" else f"on the {r.censored} side")
                for r in parts.itertuples() if r.censored]
    if censored:
        out += ["", "Censored optima:", ""] + [f"- {printable(n)}" for n in censored]
    if notes:
        out += ["", "Code versions:", ""] + [f"- {printable(n)}" for n in notes]
    out += ["", "![claims](claims.png)", ""]
    return "\n".join(out)


def val_slopes(engine: Any, runs: "pd.DataFrame") -> dict[str, float]:
    """Each finished run's change of the validation loss per 10% of its training budget at the end of training:
    the least-squares slope over the evaluations in the last quarter of its steps (at least the last two)."""
    import numpy as np
    import pandas as pd

    from cemctl.db.frames import metrics_frame

    done = runs[runs["state"] == "done"] if "state" in runs.columns else runs
    ids = [str(r) for r in done["run_id"]]
    if not ids:
        return {}
    budget = "steps" if "steps" in done.columns else "total_steps"  # the result's steps, or the run's planned ones
    total = {str(r): s for r, s in zip(done["run_id"], done.get(budget, pd.Series([None] * len(done))))}
    frames = [metrics_frame(engine, ids[i:i + 500], kind="val") for i in range(0, len(ids), 500)]
    metrics = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    out: dict[str, float] = {}
    if metrics.empty:
        return out
    for rid, g in metrics.dropna(subset=["val_loss"]).groupby("run_id", sort=False):
        steps = total.get(str(rid))
        steps = float(steps) if steps is not None and not pd.isna(steps) and float(steps) > 0 else float(g["step"].max())
        tail = g[g["step"] >= 0.75 * steps]
        if len(tail) < 2:
            tail = g.tail(2)
        if len(tail) < 2 or tail["step"].nunique() < 2:
            continue
        slope = float(np.polyfit(tail["step"].astype(float), tail["val_loss"].astype(float), 1)[0])
        out[str(rid)] = slope * 0.1 * steps
    return out


def gather_claims(engine: Any) -> list[Any]:
    """Every recorded experiment's [[claim]] tables; parts of one claim id from several grids are one claim."""
    from cemctl.db.runs import list_experiments
    from cemctl.grid.claims import ClaimSpec, recorded_claims

    merged: dict[str, ClaimSpec] = {}
    for exp in list_experiments(engine):
        for claim in recorded_claims(exp.grid_text, exp.grid_path or exp.name):
            for part in claim.parts:
                part.source = exp.name
            if claim.id in merged:
                merged[claim.id].parts += claim.parts
            else:
                claim.source = exp.name
                merged[claim.id] = claim
    return sorted(merged.values(), key=lambda c: (not c.id.isdigit(), int(c.id) if c.id.isdigit() else 0, c.id))


def claims_report(db_url: str, *, out_dir: Path | str | None = None, scale: str | None = None,
                  runs_root: Path | str | None = None, sync: bool = True, power: bool = False,
                  formats: tuple[str, ...] = ("png", "pdf")) -> ClaimsResult:
    from cemctl.db.engine import is_readonly, open_existing_db
    from cemctl.records import load_records
    from cemctl.report.claims import claim_verdicts, evaluate_page
    from cemctl.services.claim_plans import declared_labels, load_designs
    from cemctl.report.index import git_commit

    from cemctl.db.runs import resolve_runs_root

    engine = open_existing_db(db_url)
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
                         slopes=val_slopes(engine, runs), declared=declared_labels(runs_root, claims),
                         designs=load_designs(runs_root, scale))
    parts = page.parts
    parts["next"] = [f"cemctl launch {r.experiment} --scale {r.scale}" if r.verdict == "not run" and r.scale else ""
                     for r in parts.itertuples()]
    verdicts = claim_verdicts(parts)
    result = ClaimsResult(parts, verdicts, robustness=page.robustness)
    result.code_notes = code_notes(engine, runs, parts)
    if out_dir is None:
        return result
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
                                                       robustness=page.robustness))
        csv_cols = [c for c in CSV_COLUMNS if c in parts.columns] + \
            [c for c in ("seeds_for_80pct_power", "seeds_unadjusted", "seeds_low", "seeds_high", "next")
             if c in parts.columns]
        write_csv(page.robustness, tmp / "claims_robustness.csv")
        write_csv(parts[csv_cols], tmp / "claims.csv")  # text cells with their control characters escaped
        write_csv(verdicts, tmp / "claims_summary.csv")
        fig = claims_figure(parts)
        for fmt in formats:
            fig.savefig(tmp / f"claims.{fmt}", dpi=150, format=fmt)
        fig.clear()
        swap_in(tmp, out, what="claims")
    finally:
        if tmp.exists():
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    result.out_dir = out
    result.files = sorted(p for p in out.iterdir() if not p.name.startswith("."))
    return result
