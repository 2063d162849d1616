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
CSV_COLUMNS = ("claim", "part", "scale", "statistic", "unit", "expect", "margin", "effect", "ci95_low", "ci95_high",
               "method", "df", "n", "p", "label", "verdict", "p_holm", "holm_low", "holm_high", "label_holm",
               "verdict_holm", "censored", "runs")
PLAN = (
    "How each part is decided (fixed before the numbers; `cemctl/report/claims.py`): a part names its arms by "
    "selectors that must each match exactly one arm (every config value but the seed) per scale and size, and its "
    "arms may differ only in what the selectors set apart, so no two configurations are pooled. Parts declared "
    "paired (the same model at initialisation) use the per-seed contrast and a paired t interval; the others the "
    "contrast of arm means with the within-arm variance pooled over the finished arms of the experiment that "
    "declares the part, at that scale and size (its df shown; other experiments' arms are not assumed to share "
    "its variance), or Welch when nothing can be pooled; learning-rate optima are bootstrapped over seeds once "
    "every rate of both sweeps has two finished seeds, an optimum at the edge of the sweep leaving the interval "
    "open on that side. A 95% interval below 0 reads "
    "`lower` (the first arm's loss is lower: better), above 0 `higher`, within +-margin `close`, wholly beyond it "
    "`not close`, anything else `inconclusive`. A part `holds` when that label is the expected one; it is "
    "`contradicted` by the opposite label, or, for a directional part, by `close` (no difference as large as the "
    "margin). Margins are ours, not the paper's (it gives none): a % of the reference arm's test loss, or stated "
    "units. Multiplicity: Holm's step-down procedure over every part of the page at one scale (family-wise error "
    "5%); the claim verdicts use the adjusted part verdicts.")


@dataclass
class ClaimsResult:
    parts: "pd.DataFrame"
    claims: "pd.DataFrame"
    out_dir: Path | None = None
    files: list[Path] = field(default_factory=list)
    code_notes: list[str] = field(default_factory=list)  # runs trained by older code; parts mixing code versions


def claims_figure(parts: "pd.DataFrame") -> "Figure":
    """Effect with its 95% interval (thin) and Holm-adjusted interval (thick) per part, coloured by the adjusted
    verdict; the grey band is the part's margin. Learning-rate parts are drawn in log2(lr) / 10."""
    from matplotlib.lines import Line2D

    from cemctl.report import style

    labels = list(dict.fromkeys(f"{r.claim}. {r.part}" for r in parts.itertuples()))
    scales = list(dict.fromkeys(parts["scale"]))
    fig, (ax,) = style.new_figure(1, panel_w=9.0, panel_h=0.42 * len(labels) + 1.6)
    for r in parts.itertuples():
        y = labels.index(f"{r.claim}. {r.part}") + (scales.index(r.scale) - (len(scales) - 1) / 2) * 0.25
        k = 1.0 if r.unit == "nats" else 10.0
        if math.isfinite(r.margin) and r.margin > 0:
            ax.fill_betweenx([y - 0.3, y + 0.3], -r.margin / k, r.margin / k, color="0.88", linewidth=0, zorder=0)
        if not math.isfinite(r.effect):
            continue
        color = VERDICT_COLORS.get(r.verdict_holm, "0.3")

        def clip(v: float) -> float:
            return v / k if math.isfinite(v) else (1e3 if v > 0 else -1e3)

        if math.isfinite(r.ci95_low) or math.isfinite(r.ci95_high):
            ax.plot([clip(r.ci95_low), clip(r.ci95_high)], [y, y], "-", color=color, linewidth=1.0)
        if math.isfinite(r.holm_low) or math.isfinite(r.holm_high):
            ax.plot([clip(r.holm_low), clip(r.holm_high)], [y, y], "-", color=color, linewidth=3.0, alpha=0.45)
        ax.plot([r.effect / k], [y], style.SIZE_MARKERS[scales.index(r.scale) % len(style.SIZE_MARKERS)],
                color=color, markersize=6)
    finite = [v / (1.0 if u == "nats" else 10.0) for v, u in zip(
        list(parts["ci95_low"]) + list(parts["ci95_high"]) + list(parts["effect"]), list(parts["unit"]) * 3)
        if math.isfinite(v)]
    if finite:
        span = max(abs(min(finite)), abs(max(finite))) * 1.15 or 0.1
        ax.set_xlim(-span, span)
    ax.axvline(0, color="0.3", linewidth=0.8)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels([lab if len(lab) <= 72 else lab[:69] + "..." for lab in labels], fontsize=7.5)
    ax.invert_yaxis()
    ax.set_xlabel("effect (nats of test loss; learning-rate parts: log2(lr) / 10)\n"
                  "thin: 95% interval; thick: Holm-adjusted interval; grey band: the part's margin")
    handles = [Line2D([], [], color=c, marker="o", linestyle="none", label=v) for v, c in VERDICT_COLORS.items()]
    handles += [Line2D([], [], color="0.3", marker=style.SIZE_MARKERS[i % len(style.SIZE_MARKERS)], linestyle="none",
                       label=f"scale {s or '(none)'}") for i, s in enumerate(scales)]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(6, len(handles)), fontsize=8, frameon=False)
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


def claims_markdown(parts: "pd.DataFrame", claims: "pd.DataFrame", header: list[tuple[str, str]], *,
                    notes: Sequence[str] = ()) -> str:
    from cem_core.names import printable
    from cemctl.report.tables import to_markdown

    out = ["# Does CEM hold up? The claims, decided", ""]
    out += [f"- **{k}**: {printable(v)}" for k, v in header]
    out += ["", PLAN, "", "## Verdicts (Holm-adjusted)", ""]
    out.append(to_markdown(claims[["claim", "scale", "verdict", "statement"]]).rstrip())
    out += ["", "## Every part", ""]
    table = parts.assign(
        effect=[_fmt(v) for v in parts["effect"]],
        ci95=[_interval(lo, hi) for lo, hi in zip(parts["ci95_low"], parts["ci95_high"])],
        holm=[_interval(lo, hi) for lo, hi in zip(parts["holm_low"], parts["holm_high"])],
        margin=[f"{m:.4f}" if math.isfinite(m) else "" for m in parts["margin"]],
        p=[f"{p:.3g}" if math.isfinite(p) else "" for p in parts["p"]],
        p_holm=[f"{p:.3g}" if math.isfinite(p) else "" for p in parts["p_holm"]],
        df=[f"{d:.0f}" if isinstance(d, float) and math.isfinite(d) else "" for d in parts["df"]],
        unadjusted=[f"{lab}: {v}" for lab, v in zip(parts["label"], parts["verdict"])],
        adjusted=[f"{lab}: {v}" for lab, v in zip(parts["label_holm"], parts["verdict_holm"])],
    )
    cols = ["claim", "part", "scale", "expect", "unit", "margin", "effect", "ci95", "method", "df", "n", "p",
            "unadjusted", "holm", "p_holm", "adjusted"]
    if "seeds_for_80pct_power" in parts.columns:
        table = table.assign(seeds_needed=[("" if v is None or (isinstance(v, float) and math.isnan(v)) else
                                            str(int(v))) if v is not None else "> 64"
                                           for v in parts["seeds_for_80pct_power"]])
        cols.append("seeds_needed")
    out.append(to_markdown(table[cols]).rstrip())
    out += ["", "`unadjusted`: label and verdict at the part's own 95% interval; `adjusted`: after Holm (the "
            "interval `holm` is at the part's Holm level). `margin` in the part's unit. The runs each part used "
            "are listed in `claims.csv`."]
    censored = [f"{r.claim}. {r.part}: " + ("the optimum lies at the edge of the sweep (the interval is open on that "
                                          "side)" if r.censored else "")
             for r in parts.itertuples() if r.censored]
    if censored:
        out += ["", "Censored optima:", ""] + [f"- {printable(n)}" for n in censored]
    if notes:
        out += ["", "Code versions:", ""] + [f"- {printable(n)}" for n in notes]
    out += ["", "![claims](claims.png)", ""]
    return "\n".join(out)


def gather_claims(engine: Any) -> list[Any]:
    """Every recorded experiment's [[claim]] tables; parts of one claim id from several grids are one claim."""
    from cemctl.db.runs import list_experiments
    from cemctl.grid.claims import ClaimSpec
    from cemctl.grid.spec import claims_from_text

    merged: dict[str, ClaimSpec] = {}
    for exp in list_experiments(engine):
        for claim in claims_from_text(exp.grid_text, exp.grid_path or exp.name):
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
    from cemctl.report.claims import claim_verdicts, evaluate_claims
    from cemctl.records import load_records
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
    parts = evaluate_claims(runs, claims, scales=[scale] if scale is not None else None, power=power)
    parts["next"] = [f"cemctl launch {r.source} --scale {r.scale}" if r.verdict == "not run" and r.scale else ""
                     for r in parts.itertuples()]
    verdicts = claim_verdicts(parts)
    result = ClaimsResult(parts, verdicts)
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
        (tmp / "claims.md").write_text(claims_markdown(parts, verdicts, header, notes=result.code_notes))
        csv_cols = [c for c in CSV_COLUMNS if c in parts.columns] + \
            [c for c in ("seeds_for_80pct_power", "next") if c in parts.columns]
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
