"""Build an experiment's report: figures, tables and index (`cemctl report EXPERIMENT`).

    build_report(info, runs, curves, out_dir, formats=("png", "pdf")) -> ReportResult

takes the tidy frames of `cemctl.report.frame`, renders the experiment's figure
kind (`cemctl.report.figures`), the training curves and the list of missing and
failed runs, and writes everything into `out_dir` at once: the report is built
in a temporary sibling folder and swapped in, so a failure never leaves a
half-written report behind; it only ever replaces a folder an earlier report
wrote (`cemctl.report.outdir`). `report_experiment(...)` is the same from the
results database.
"""

from __future__ import annotations

import datetime as _dt
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from cem_core.errors import CemError, ConfigError
from cemctl.report.figures import FIGURE_KINDS, get_figure_kind
from cemctl.report.index import IndexContent, IndexFigure, IndexTable, git_commit, render_html, render_markdown
from cemctl.report.outdir import check_output_dir, new_build_dir, swap_in
from cemctl.grid.spec import ReportOptions
from cemctl.report.parts import ReportParts, TablePart

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from cemctl.report.generic import Palette
    from cemctl.report.lr_choice import RateChoice

FIGURE_FORMATS = ("png", "pdf", "svg")
DPI = 150


class NoResults(CemError):
    """The experiment exists but has no finished run to report."""


@dataclass
class ExperimentInfo:
    name: str
    figure: str  # a key of cemctl.report.figures.FIGURE_KINDS
    grid_path: str = ""
    grid_sha256: str = ""
    description: str = ""
    planned_run_ids: Sequence[str] | None = None  # runs of the grid; ids absent from `runs` are "missing"
    scale: str = ""  # the scale of these runs
    other_scales: Sequence[str] = ()  # the experiment's other scales, for the index
    options: ReportOptions = field(default_factory=ReportOptions)  # [experiment] x / hue / metric / nuisance
    axes: Sequence[str] = ()  # the grid's varied keys, in file order (labels and the default x follow it)
    where: str = ""  # the --where filter the runs were selected with ("" = none)
    claims: Sequence[object] = ()  # the grid's [[claim]] tables (cemctl.grid.claims.ClaimSpec)


@dataclass
class ReportResult:
    out_dir: Path
    index_md: Path
    index_html: Path
    figures: list[Path] = field(default_factory=list)
    tables: list[Path] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def parse_formats(text: str | Sequence[str]) -> tuple[str, ...]:
    """'png,pdf' -> ('png', 'pdf'); unknown formats raise ConfigError naming the allowed ones."""
    items = [t.strip().lower() for t in (text.split(",") if isinstance(text, str) else text) if t.strip()]
    if not items:
        raise ConfigError("--format", "needs at least one format", allowed=FIGURE_FORMATS)
    for item in items:
        if item not in FIGURE_FORMATS:
            raise ConfigError("--format", f"unknown figure format {item!r}", value=item, allowed=FIGURE_FORMATS)
    return tuple(dict.fromkeys(items))


def _first_line(text: object, limit: int = 200) -> str:
    if text is None or (isinstance(text, float) and text != text):
        return ""
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    line = lines[-1] if lines else ""  # the last line of a traceback names the exception
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"


def problem_runs(runs: "pd.DataFrame", planned_run_ids: Sequence[str] | None = None, *,
                 value: str = "test_ppl") -> "pd.DataFrame":
    """Runs with no usable result, with a reason each: failed, diverged, unfinished, or not in the database."""
    import math

    import pandas as pd

    from cemctl.records.labels import arm_labels

    rows = []
    records = runs.to_dict("records") if {"run_id", "state"} <= set(runs.columns) else []
    labels = list(runs["arm_label"]) if "arm_label" in runs.columns else arm_labels(records)[1]
    for r, label in zip(records, labels):
        state = r.get("state") or "planned"
        ppl = r.get(value)
        finite = ppl is not None and not (isinstance(ppl, float) and not math.isfinite(ppl))
        if state == "done" and finite:
            continue
        error, reason = _first_line(r.get("error")), _first_line(r.get("reason"))
        if state == "done":
            why = f"finished without a finite {value}"
        elif state == "failed":
            why = f"failed: {error or reason or 'no error recorded'}"
        elif state == "diverged":
            step = r.get("diverged_step")
            at = f" at step {int(step)}" if step is not None and not pd.isna(step) else ""
            why = f"diverged{at}" + (f": {error}" if error else "")
        elif state == "stale":
            why = "stale: no heartbeat (the job may have died); relaunch it"
        elif state == "cancelled":
            why = "cancelled" + (f": {reason}" if reason else "")
        else:
            why = f"no result yet (state {state})" + (f": {reason}" if reason and reason != state else "")
        rows.append({"run_id": r["run_id"], "arm": label,
                     "seed": r.get("train.seed"), "state": state, "reason": why})
    if planned_run_ids is not None:
        known = set(runs["run_id"]) if "run_id" in runs.columns else set()
        for rid in planned_run_ids:
            if rid not in known:
                rows.append({"run_id": rid, "arm": "", "seed": None, "state": "missing",
                             "reason": "planned in the grid but not in the database (run `cemctl plan`/`sync`)"})
    return pd.DataFrame(rows, columns=["run_id", "arm", "seed", "state", "reason"])


def claims_tables(runs: "pd.DataFrame", claims: Sequence[object]) -> list[TablePart]:
    """The grid's own [[claim]] tables tested on these runs (`cemctl.report.claims`), if any part has runs."""
    if not claims or runs.empty:
        return []
    from cemctl.report.claims import evaluate_claims

    table = evaluate_claims(runs, claims)  # type: ignore[arg-type]
    table = table[table["n"] > 0]
    if table.empty:
        return []
    shown = table[["claim", "part", "scale", "expect", "effect", "ci95_low", "ci95_high", "method", "n", "label",
                   "verdict", "label_holm", "verdict_holm"]]
    return [TablePart("claims", shown.reset_index(drop=True),
                      "The claims this grid declares ([[claim]]), tested on its runs: the part's statistic with a 95% "
                      "interval, its label and verdict, unadjusted and after Holm over this table; `cemctl claims` "
                      "tests every grid's claims on every run, with the statistical plan written out.")]


def mark_notes(runs: "pd.DataFrame") -> list[str]:
    """One note per [[mark]] label: which arms carry it (e.g. 'beyond the paper'), each named by the one labelling
    path among the report's arms (two arms are never run together into one name)."""
    from cem_core.arms import config_of
    from cemctl.records.labels import series_names

    if "marks" not in runs.columns or runs.empty:
        return []
    records = runs.to_dict("records")
    names = series_names([config_of(r) for r in records])
    by_label: dict[str, list[str]] = {}
    for r, what in zip(records, names):
        for label in filter(None, (m.strip() for m in str(r.get("marks") or "").split(";"))):
            by_label.setdefault(label, [])
            if what not in by_label[label]:
                by_label[label].append(what)
    return [f"{label}: {'; '.join(items)}" for label, items in by_label.items()]


def grid_notes(runs: "pd.DataFrame") -> list[str]:
    """A note naming the runs an edited grid no longer holds (their results stay in the report and runs.csv)."""
    if "in_grid" not in runs.columns:
        return []
    left = runs[~runs["in_grid"].astype(bool)]
    if left.empty:
        return []
    ids = ", ".join(left["run_id"].astype(str).head(5)) + (", ..." if len(left) > 5 else "")
    return [f"{len(left)} run(s) are no longer in the grid (planned by an earlier version of the grid file): "
            f"{ids}; their results are kept in this report and in runs.csv (column in_grid)"]


def code_notes(runs: "pd.DataFrame", experiment: str) -> list[str]:
    """A note counting the runs trained by older model code (they stay in the report; runs.csv marks them)."""
    from cemctl.db.outdated import outdated_note

    if "outdated" not in runs.columns:
        return []
    old = runs[runs["outdated"].astype(bool)]
    note = outdated_note(len(old), experiment)
    if not note:
        return []
    ids = ", ".join(old["run_id"].astype(str).head(5)) + (", ..." if len(old) > 5 else "")
    return [f"{note}: {ids}; the report includes them (runs.csv column outdated)"]


def _counts(runs: "pd.DataFrame", problems: "pd.DataFrame") -> dict[str, int]:
    counts = {"runs": int(len(runs)) + int(problems["state"].eq("missing").sum())}
    if "state" in runs.columns:
        for state, n in runs["state"].value_counts().items():
            counts[str(state)] = int(n)
    counts["missing"] = int(problems["state"].eq("missing").sum())
    return counts


def generic_parts(info: ExperimentInfo, runs: "pd.DataFrame", curves: "pd.DataFrame | None", *,
                  include_curves: bool = True, shown: "pd.DataFrame | None" = None) -> ReportParts:
    """What every report starts with: the arms table (every run), the metric against x and the training curves per
    arm (of `shown`: the runs the figures show, default every run; `figure_runs`)."""
    from cemctl.report.arms import arms_display, arms_table
    from cemctl.report.generic import arm_curves, metric_figure

    opts = info.options
    parts = ReportParts()
    table = arms_table(runs, metric=_metric(info))
    from cemctl.report.arms import ARM, config_of
    from cemctl.report.generic import arm_names

    firsts = {aid: config_of(g.iloc[0].to_dict()) for aid, g in runs.groupby(ARM, sort=False)}
    names = arm_names(firsts, nuisance=opts.nuisance, order=info.axes)  # as the dashboard names them
    parts.tables.append(TablePart(
        "arms", arms_display(table, _metric(info), names),
        "One row per arm (every config value equal but the seed), named by the fewest keys that tell the arms apart "
        "(arms.csv has each arm's full label): seeds with a result / planned, mean \u00b1 sample s.d. and 95% t "
        "interval over the seeds, parameters, tokens, training FLOPs, tokens/s and wall time (means over the "
        "seeds); arms.csv has every number at full precision.",
        csv=table, lead=True))
    palette = report_palette(info, runs)
    shown = runs if shown is None else shown
    x = palette.x if palette is not None else None
    fig = metric_figure(shown, x=x, hue=opts.hue or None, metric=_metric(info), order=info.axes,
                        nuisance=opts.nuisance, palette=palette)
    if fig is not None:
        parts.figures.append(fig)
    if include_curves:
        curve_fig = arm_curves(shown, curves, palette=palette)
        if curve_fig is not None:
            parts.figures.append(curve_fig)
    return parts


def figure_runs(info: ExperimentInfo, runs: "pd.DataFrame") -> "tuple[pd.DataFrame, RateChoice | None]":
    """The runs a report's figures show, and the learning rates chosen for them: every run, or, where arms ran at
    several learning rates and the figure does not show the rate, each arm at its chosen rate
    (`cemctl.report.lr_choice`)."""
    from cemctl.report.figures import kind_shown
    from cemctl.report.lr_choice import rate_choice

    opts = info.options
    drawn = [*kind_shown(info.figure), *([opts.x] if opts.x else []), *opts.hue]
    choice = rate_choice(runs, metric=_metric(info), drawn=drawn, nuisance=opts.nuisance, order=info.axes)
    return (runs if choice is None else choice.runs), choice


def report_palette(info: ExperimentInfo, runs: "pd.DataFrame", shown: "pd.DataFrame | None" = None
                   ) -> "Palette | None":
    """The one palette of a report (`cemctl.report.generic.Palette`), left on `runs` for every figure: the generic
    figures, the figure kind's and the extra ones (test-time recursion, energy) colour a value alike. Made from the
    runs the figures show (`figure_runs`): a learning rate chosen per arm never colours."""
    from cemctl.report.figures import kind_shown
    from cemctl.report.generic import PALETTE_ATTR, Palette, default_x, varying

    if runs.attrs.get(PALETTE_ATTR) is None and not runs.empty:
        opts = info.options
        if shown is None:  # (`shown`: `figure_runs(info, runs)` already computed, by the dashboard)
            shown, _ = figure_runs(info, runs)
        keys = varying(shown, opts.nuisance)
        kind = kind_shown(info.figure)  # the kind's own x first: the metric figure draws what the kind draws
        x = opts.x or next((k for k in kind if k in keys), None) or default_x(shown, keys, info.axes)
        runs.attrs[PALETTE_ATTR] = Palette(shown, x=x, hue=opts.hue, order=info.axes, nuisance=opts.nuisance,
                                           shown=kind)
    return runs.attrs.get(PALETTE_ATTR)


def _metric(info: ExperimentInfo) -> str:
    return "test_rmse" if info.figure == "gp_table" else info.options.metric


def render_parts(info: ExperimentInfo, runs: "pd.DataFrame", curves: "pd.DataFrame | None", *,
                 include_curves: bool = True) -> ReportParts:
    """The parts any grid gets (`generic_parts`), then the figure kind's own; where the figures show each arm at a
    chosen learning rate (`figure_runs`), the profiles it was chosen from and a caption saying so."""
    from cemctl.report.arms import has_arms, with_arms
    from cemctl.report.generic import PALETTE_ATTR

    if not has_arms(runs):
        runs = with_arms(runs, nuisance=info.options.nuisance, order=info.axes)
    shown, choice = figure_runs(info, runs)
    if choice is not None:
        shown.attrs[PALETTE_ATTR] = report_palette(info, runs)  # one palette: made from the shown runs
    parts = generic_parts(info, runs, curves, include_curves=include_curves, shown=shown)
    render = get_figure_kind(info.figure)
    parts.extend(render(shown, curves))
    if choice is not None:
        from cemctl.report.figures import lr_profiles
        from cemctl.report.lr_choice import CAPTION_NOTE

        for fp in parts.figures:
            fp.caption = f"{fp.caption} {CAPTION_NOTE}"
        metric = _metric(info)
        parts.extend(lr_profiles.render(runs, choice, value="test_ppl" if metric == "test_loss" else metric))
    return parts


def build_report(info: ExperimentInfo, runs: "pd.DataFrame", curves: "pd.DataFrame | None", out_dir: Path | str, *,
                 formats: str | Sequence[str] = ("png", "pdf"), include_curves: bool = True,
                 dpi: int = DPI, extras: ReportParts | None = None) -> ReportResult:
    """Render and write the report of one experiment into `out_dir` (replaced as a whole).

    `extras`: parts drawn for any experiment with their data (`figures.extra_parts`: test-time recursion, energy).
    """
    formats = parse_formats(formats)
    get_figure_kind(info.figure)  # unknown kinds fail before any work
    out_dir = check_output_dir(out_dir)  # never replace anything an earlier report did not write
    from cemctl.report.aggregate import finished
    from cemctl.report.arms import has_arms, with_arms

    if not has_arms(runs):  # a frame built without the run record's arms (synthetic data)
        runs = with_arms(runs, nuisance=info.options.nuisance, order=info.axes)
    value = _metric(info)
    states = runs["state"].value_counts().to_dict() if "state" in runs.columns else {}
    if finished(runs, value).empty:
        summary = ", ".join(f"{n} {s}" for s, n in states.items()) or "no runs"
        if not any(s in ("failed", "diverged", "damaged", "stale", "cancelled", "done") for s in states):
            raise NoResults(f"experiment {info.name!r} has no finished runs yet ({summary})")
        # Every run ended without a usable result: the report lists them with their reasons.
        parts = ReportParts(notes=[f"no run has a usable result ({summary}): the runs are listed below with reasons"])
    else:
        parts = render_parts(info, runs, curves, include_curves=include_curves)
    if extras is not None:
        parts.extend(extras)
    parts.notes += mark_notes(runs) + grid_notes(runs) + code_notes(runs, info.name)
    parts.tables += claims_tables(runs, info.claims)
    problems = problem_runs(runs, info.planned_run_ids, value=value)
    tmp = new_build_dir(out_dir)
    try:
        result = _write(info, runs, parts, problems, tmp, formats, dpi)
        kept = swap_in(tmp, out_dir)
        if kept is not None:
            result.notes.append(f"the previous report held files cemctl did not write: they are kept in {kept}")
    finally:
        for fp in parts.figures:  # free the figures' memory
            fp.figure.clear()
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    rebase = lambda p: out_dir / p.relative_to(tmp)  # noqa: E731
    return ReportResult(out_dir, out_dir / "index.md", out_dir / "index.html",
                        [rebase(p) for p in result.figures], [rebase(p) for p in result.tables],
                        result.counts, result.notes)


def _write(info: ExperimentInfo, runs: "pd.DataFrame", parts: ReportParts, problems: "pd.DataFrame", out: Path,
           formats: tuple[str, ...], dpi: int) -> ReportResult:
    from cemctl.report.style import freeze_layout
    from cemctl.report.tables import write_table

    (out / "figures").mkdir()
    (out / "tables").mkdir()
    result = ReportResult(out, out / "index.md", out / "index.html")
    figures, tables = [], []  # type: ignore[var-annotated]
    for fp in parts.figures:
        files = {}
        if len(formats) > 1:  # lay the figure out once, not again for every format it is saved in
            freeze_layout(fp.figure)
        for fmt in formats:
            path = out / "figures" / f"{fp.name}.{fmt}"
            fp.figure.savefig(path, dpi=dpi, format=fmt)  # constrained layout keeps the (wrapped) legend inside
            files[fmt] = f"figures/{fp.name}.{fmt}"
            result.figures.append(path)
        figures.append(IndexFigure(fp.name, fp.caption, files))
    all_tables = list(parts.tables)
    if not problems.empty:
        all_tables.append(TablePart("missing_and_failed", problems, "Runs with no usable result, with reasons."))
    lead = []  # type: ignore[var-annotated]
    for tp in all_tables:
        paths = write_table(tp.frame, out / "tables", tp.name, caption=tp.caption, csv=tp.csv)
        result.tables += list(paths.values())
        if tp.name != "missing_and_failed":
            (lead if tp.lead else tables).append(IndexTable(tp.name, tp.caption, tp.frame,
                                                            {fmt: f"tables/{p.name}" for fmt, p in paths.items()}))
    from cemctl.report.tables import write_csv

    write_csv(runs, out / "runs.csv")  # text cells with their control characters escaped
    counts = _counts(runs, problems)
    result.counts, result.notes = counts, list(dict.fromkeys(parts.notes))
    grid = info.grid_path or "unknown"
    if info.grid_sha256:
        grid += f" (sha256 {info.grid_sha256[:12]})"
    header = [
        ("figure kind", f"{info.figure}: {FIGURE_KINDS.describe(info.figure)}"),
        ("grid file", grid),
        ("git commit", git_commit()),
        ("generated", _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
        ("runs", ", ".join(f"{n} {k}" for k, n in counts.items() if n) + " (all runs: runs.csv)"),
        ("seeds", "points show the mean over seeds; error bars \u00b11 sample s.d. (ddof=1); hollow markers "
                  "a single seed (n=1); n is given in legends and tables"),
    ]
    if info.scale:
        header.insert(1, ("scale", info.scale + (f"; other scales: {', '.join(info.other_scales)}"
                                                 if info.other_scales else "")))
    if info.where:
        header.insert(1, ("runs selected", f"--where {info.where}"))
    if info.description:
        header.insert(0, ("description", info.description))
    content = IndexContent(title=f"Report: {info.name}", header=header, notes=result.notes, figures=figures,
                           tables=tables, problems=problems, lead=lead)
    (out / "index.md").write_text(render_markdown(content))
    (out / "index.html").write_text(render_html(content))
    return result


def report_experiment(experiment: str, *, db_url: str, out_dir: Path | str | None = None,
                      runs_root: Path | str | None = None, formats: str | Sequence[str] = ("png", "pdf"),
                      include_curves: bool = True, sync: bool = True, where: Sequence[str] = (),
                      dpi: int = DPI, scale: str | None = None) -> ReportResult:
    """`cemctl report EXPERIMENT`: sync the experiment's run dirs (unless `sync=False`), load its runs and
    curves from the database, keep the runs matching `where` (`key=value` items) and build the report
    into `out_dir` (default `reports/EXPERIMENT`). One scale per report: `scale`, else the most
    recently planned scale with finished runs (the others are named in the index).

    Raises CemError (one line) for a missing database, an unknown experiment or no finished runs.
    """
    formats = parse_formats(formats)
    from cemctl.db.engine import is_readonly, open_existing_db
    from cemctl.db.runs import get_experiment, list_experiments, list_runs, pick_scale, scale_summaries
    from cemctl.report.frame import curves_from_run_dirs, load_curves

    from cemctl.db.runs import resolve_runs_root

    engine = open_existing_db(db_url)  # never creates a database; read-only where it cannot be written
    stale_note = ("the results database was read-only: results are as last recorded (the run folders were not read)"
                  if sync and is_readonly(engine) else "")
    sync = sync and not is_readonly(engine)
    if runs_root is not None:
        runs_root = resolve_runs_root(engine, runs_root)
    exp = get_experiment(engine, experiment)
    if exp is None:
        known = ", ".join(e.name for e in list_experiments(engine)) or "none yet; run cemctl plan FILE"
        raise CemError(f"experiment: unknown experiment {experiment!r} in {db_url} (known: {known})")
    if sync and runs_root is not None:  # a folder that is not this project's is refused there, in one line
        from cemctl.db.ingest import sync_runs

        sync_runs(engine, runs_root, run_ids=[r.id for r in list_runs(engine, experiment=experiment)])
    chosen = pick_scale(engine, experiment, scale)
    from cemctl.records import load_records
    from cemctl.records.where import describe, parse_where

    conds = parse_where(where)
    records = load_records(engine, experiment, scale=chosen)
    runs = records.where(conds).frame()  # `outdated`: trained by older model code (runs.csv)
    curves = load_curves(engine, runs["run_id"]) if include_curves else None
    if include_curves and (curves is None or curves.empty) and runs_root is not None:
        curves = curves_from_run_dirs(runs_root, runs["run_id"])
    others = [x for x in scale_summaries(engine, experiment) if x.scale != chosen]
    from cemctl.grid.claims import recorded_claims
    from cemctl.grid.spec import options_from_text

    axes = records.experiments[experiment].axes if experiment in records.experiments else []
    info = ExperimentInfo(exp.name, exp.figure, grid_path=exp.grid_path, grid_sha256=exp.grid_sha256,
                          description=exp.description, scale=chosen or "",
                          other_scales=[f"{x.scale} ({x.done}/{x.runs} done; --scale {x.scale})" for x in others],
                          options=options_from_text(exp.grid_text, exp.grid_path), axes=axes, where=describe(conds),
                          claims=recorded_claims(exp.grid_text, exp.grid_path))
    if info.figure not in FIGURE_KINDS:
        raise ConfigError("experiment.figure", f"unknown figure kind {info.figure!r} in experiment {exp.name!r}",
                          value=info.figure, allowed=FIGURE_KINDS.names(), source=exp.grid_path or None)
    if out_dir is None:
        from cem_core.names import check_experiment_name

        check_experiment_name(experiment, "--out")  # a name recorded by an older cemctl must not escape reports/
    out = Path(out_dir) if out_dir is not None else Path("reports") / experiment
    from cemctl.report.figures import extra_parts

    report_palette(info, runs)  # the extra figures colour as the report's own
    extras = extra_parts(engine, runs)
    if stale_note:
        extras.notes.append(stale_note)
    return build_report(info, runs, curves, out, formats=formats, include_curves=include_curves, dpi=dpi,
                        extras=extras)
