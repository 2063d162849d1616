"""`cemctl claims [--scale S] [--out DIR]`: the paper's six findings, tested on every run in the database.

    result = claims_report(db_url, out_dir="reports/claims", scale=None, runs_root="runs")
    result.parts   # one row per (claim part, scale): effect, 95% interval, n, verdict, next step
    result.claims  # one row per (claim, scale): the verdict

Syncs the run directories (unless the database is read-only or `sync=False`),
loads the finished runs of every experiment with the scale they were planned
at, evaluates `cemctl.report.claims.PARTS`, and writes `claims.md`,
`claims.csv` (every part with the runs it used), `claims_summary.csv` and
`claims.png` / `.pdf` (effect +- interval per claim part and scale) into the
output folder, replaced only if an earlier `cemctl claims` wrote it
(`cemctl.report.outdir`).
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cem_core.errors import CemError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

VERDICT_COLORS = {"holds": "#2ca02c", "reversed": "#d62728", "inconclusive": "#7f7f7f", "not run": "#c7c7c7"}


@dataclass
class ClaimsResult:
    parts: "pd.DataFrame"
    claims: "pd.DataFrame"
    out_dir: Path | None = None
    files: list[Path] = field(default_factory=list)


def claims_figure(parts: "pd.DataFrame") -> "Figure":
    """Effect +- 95% interval of every claim part (rows) at every scale (marker), coloured by verdict."""
    from matplotlib.lines import Line2D

    from cemctl.report import style

    shown = parts[parts["n"] > 0]
    labels = list(dict.fromkeys(f"{r.claim}. {r.part}" for r in parts.itertuples()))
    scales = list(dict.fromkeys(parts["scale"]))
    fig, (ax,) = style.new_figure(1, panel_w=8.5, panel_h=0.42 * len(labels) + 1.5)
    for r in shown.itertuples():
        y = labels.index(f"{r.claim}. {r.part}") + (scales.index(r.scale) - (len(scales) - 1) / 2) * 0.25
        x = r.effect / (1.0 if r.unit == "nats" else 10.0)  # log2(lr) parts drawn at 1/10 scale
        lo, hi = (r.ci95_low, r.ci95_high) if math.isfinite(r.ci95_low) else (r.effect, r.effect)
        xerr = [[x - lo / (1.0 if r.unit == "nats" else 10.0)], [hi / (1.0 if r.unit == "nats" else 10.0) - x]]
        ax.errorbar([x], [y], xerr=xerr, fmt=style.SIZE_MARKERS[scales.index(r.scale) % len(style.SIZE_MARKERS)],
                    color=VERDICT_COLORS.get(r.verdict, "0.3"), capsize=3, markersize=6)
    ax.axvline(0, color="0.3", linewidth=0.8)
    from cemctl.report.claims import TOLERANCE

    ax.axvspan(-TOLERANCE, TOLERANCE, color="0.85", alpha=0.5, linewidth=0)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels([lab if len(lab) <= 70 else lab[:67] + "..." for lab in labels], fontsize=7.5)
    ax.invert_yaxis()
    ax.set_xlabel("difference in test loss (nats)\noptimal-lr part: log2(lr) / 10; grey band: +-tolerance")
    handles = [Line2D([], [], color=c, marker="o", linestyle="none", label=v) for v, c in VERDICT_COLORS.items()]
    handles += [Line2D([], [], color="0.3", marker=style.SIZE_MARKERS[i % len(style.SIZE_MARKERS)], linestyle="none",
                       label=f"scale {s or '(none)'}") for i, s in enumerate(scales)]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(6, len(handles)), fontsize=8, frameon=False)
    return fig


def _fmt(v: float) -> str:
    return "" if v is None or not math.isfinite(v) else f"{v:+.4f}"


def claims_markdown(parts: "pd.DataFrame", claims: "pd.DataFrame", header: list[tuple[str, str]]) -> str:
    from cem_core.names import printable
    from cemctl.report.claims import TOLERANCE
    from cemctl.report.tables import to_markdown

    out = ["# Does CEM hold up? The paper's six findings", ""]
    out += [f"- **{k}**: {printable(v)}" for k, v in header]
    out += ["", "Each part is a difference of test losses (nats per token; lower is better) between arms that differ "
            "only in what the claim is about, paired by setting and seed; the interval is a 95% t interval over "
            f"the pairs. `close` holds when the interval lies within +-{TOLERANCE} nats, `lower` when it lies below 0, "
            f"`not_worse` when its upper end is below +{TOLERANCE}.", "", "## Verdicts", ""]
    out.append(to_markdown(claims[["claim", "scale", "verdict", "statement"]]).rstrip())
    out += ["", "## Every part", ""]
    table = parts.assign(effect=[_fmt(v) for v in parts["effect"]],
                         ci95=[f"[{_fmt(lo)}, {_fmt(hi)}]" if math.isfinite(lo) else ""
                               for lo, hi in zip(parts["ci95_low"], parts["ci95_high"])])
    out.append(to_markdown(table[["claim", "part", "scale", "expect", "unit", "effect", "ci95", "n", "verdict",
                                  "next"]]).rstrip())
    out += ["", "![claims](claims.png)", "", "The runs each part used are listed in `claims.csv`.", ""]
    return "\n".join(out)


def claims_report(db_url: str, *, out_dir: Path | str | None = None, scale: str | None = None,
                  runs_root: Path | str | None = None, sync: bool = True,
                  formats: tuple[str, ...] = ("png", "pdf")) -> ClaimsResult:
    from cemctl.db.engine import is_readonly, open_existing_db
    from cemctl.report.claims import claim_verdicts, evaluate_claims
    from cemctl.report.frame import load_runs
    from cemctl.report.index import git_commit

    from cemctl.db.runs import resolve_runs_root

    engine = open_existing_db(db_url)
    if runs_root is not None:
        runs_root = resolve_runs_root(engine, runs_root)
    if sync and not is_readonly(engine) and runs_root is not None and Path(runs_root).is_dir():
        from cemctl.db.ingest import sync_runs

        sync_runs(engine, runs_root)
    runs = load_runs(engine, None, scale=scale)
    if runs.empty:
        raise CemError("claims: the results database holds no runs yet (plan and launch the figure grids first)")
    parts = evaluate_claims(runs, scales=[scale] if scale is not None else None)
    claims = claim_verdicts(parts)
    result = ClaimsResult(parts, claims)
    if out_dir is None:
        return result
    from cemctl.report.outdir import check_output_dir, new_build_dir, swap_in

    out = check_output_dir(out_dir, what="claims")
    tmp = new_build_dir(out)
    try:
        from cemctl.db.runs import list_experiments

        grids = ", ".join(f"{e.name} {e.grid_sha256[:12]}" for e in list_experiments(engine) if e.grid_sha256)
        header = [("generated", _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
                  ("git commit", git_commit()), ("scales", ", ".join(sorted(set(parts["scale"]))) or "-"),
                  ("finished runs", str(int((runs["state"] == "done").sum()))),
                  ("grids (sha256)", grids or "-")]
        (tmp / "claims.md").write_text(claims_markdown(parts, claims, header))
        from cemctl.report.tables import write_csv

        write_csv(parts, tmp / "claims.csv")  # text cells with their control characters escaped
        write_csv(claims, tmp / "claims_summary.csv")
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
