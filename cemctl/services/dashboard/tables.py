"""The dashboard's tables as data: experiments, an experiment's runs (live) and arms, a run, a comparison.

Every run is a run record (`cemctl.records.load_records`); fields are named, formatted and
described by the catalogue (`cemctl.records.fields`, `cemctl.records.formats`); every
table selects with `--where` (`cemctl.records.where`) and sorts with `--sort`
(`cemctl.services.status.parse_sort` / `sort_records`), so `where=` and `sort=` in a URL
mean what they mean on the command line. Cells are plain text: the pages escape them.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from cem_core.errors import CemError, ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from cemctl.records.load import ExperimentMeta, RunRecords
    from cemctl.records.record import RunRecord
    from cemctl.services.dashboard.source import Source

ROW_LIMIT = 200  # runs shown in a table unless the URL asks for more (limit=0: all)
RUN_COLUMNS = ("state", "progress", "train_loss", "val_loss", "test_loss", "tokens_per_s", "elapsed_s", "eta_s",
               "reason")
LIVE_REFRESH_S = 3.0  # the live table's refresh while runs are queued or running
IDLE_REFRESH_S = 15.0  # ... and while nothing is in flight (a launch may start)
IN_FLIGHT = ("queued", "running")
ARM_METRICS = ("test_loss", "test_ppl", "val_loss", "val_ppl", "test_rmse", "train_loss", "wall_time_s",
               "avg_tokens_per_s")
LOG_LINES = 200


def refresh_s(states: Iterable[str]) -> float:
    """How often a live part of a page asks again: often while one of these runs is queued or running."""
    return LIVE_REFRESH_S if any(s in IN_FLIGHT for s in states) else IDLE_REFRESH_S


class NotFound(CemError):
    """What the URL names does not exist (an experiment, a run, a report file): a 404 page."""


# ----------------------------------------------------------------------------------------------- cells

def is_config(name: str) -> bool:
    return name == "task" or ("." in name and not name.startswith("tag."))


def header(name: str) -> str:
    from cemctl.records.fields import field

    if is_config(name):
        from cem_core.arms import short_names

        return short_names([name])[name]
    return field(name).header


def describe(name: str) -> str:
    """The field's meaning and unit (a column header's tooltip)."""
    from cemctl.records.fields import field

    f = field(name)
    return f"{f.name}: {f.help}" + (f" [{f.unit}]" if f.unit else "")


def cell(name: str, value: Any) -> str:
    """A value as text, by the catalogue's kind of the field (`cemctl.records.formats.by_kind`)."""
    from cemctl.records import formats
    from cemctl.records.fields import field

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if is_config(name):
        return formats.value(value)
    text = formats.by_kind(field(name).kind)(value)
    return formats.value(text) if not isinstance(text, str) else text


def numeric(name: str) -> bool:
    from cemctl.records.fields import field

    return not is_config(name) and field(name).numeric


# ----------------------------------------------------------------------------------------------- selection

@dataclass
class Selection:
    """What a URL selects: `where` items (as `--where` takes them), `sort` (`--sort`), a row limit, a scale."""

    where: list[str] = field(default_factory=list)
    sort: str = ""
    limit: int = ROW_LIMIT
    scale: str | None = None

    def conds(self, known: Sequence[str] = ()) -> list[Any]:
        from cemctl.records.where import parse_where

        return parse_where(self.where, known)

    def order(self) -> list[tuple[str, bool]] | None:
        from cemctl.services.status import parse_sort

        return parse_sort(self.sort) if self.sort else None


def experiment_records(src: "Source", name: str, scale: str | None = None) -> "RunRecords":
    """The run records of an experiment (cached per state of the database); CemError names the known ones."""
    from cemctl.records import load_records
    from cemctl.records.load import ExperimentMeta  # noqa: F401 - the records' meta

    def load() -> "RunRecords":
        try:
            return load_records(src.engine, name, scale=scale, runs_root=src.runs_root)
        except CemError as e:
            if "unknown experiment" in str(e):
                raise NotFound(str(e)) from None
            raise

    return src.cached(f"records:{name}:{scale}", load)


def live_copy(src: "Source", records: Sequence["RunRecord"], now: float | None = None) -> list["RunRecord"]:
    """The records with those not yet ended brought up to their run folders (`cemctl.records.live`), as copies."""
    from cem_core.runfiles import IN_FLIGHT_STATES
    from cemctl.records.live import live_records

    out = [r.copy() if r.state in IN_FLIGHT_STATES else r for r in records]
    live_records([r for r in out if r.state in IN_FLIGHT_STATES], now=now, timeout_s=src.timeout_s)
    return out


def live_experiment(src: "Source", name: str, scale: str | None = None, now: float | None = None, moment: str = ""
                    ) -> "tuple[RunRecords, list[RunRecord]]":
    """The experiment's records (as the database has them) and their copies brought up to the run folders: what
    every table and chart of its page shows, so that they agree with each other and with `cemctl status`; one read
    for the parts a page asks for at one `moment` (`Source.at_moment`)."""
    def read() -> "tuple[RunRecords, list[RunRecord]]":
        recs = experiment_records(src, name, scale)
        return recs, live_copy(src, recs.records, now)

    return src.at_moment(moment, f"live:{name}:{scale}", read)


def frame_of(records: Sequence["RunRecord"]) -> "Any":
    """Records as the report's runs frame (`cemctl.records.records_frame`)."""
    from cemctl.records import records_frame

    return records_frame(list(records))


def arm_names(src: "Source", name: str, scale: str | None = None) -> dict[str, str]:
    """{arm id: the name a reader reads} over the whole experiment (never the selection, so a name does not change
    with a filter): `cemctl.report.generic.arm_names`, as the report's arms table names them."""
    from cem_core.arms import config_of
    from cemctl.report.generic import arm_names as names_of

    recs = experiment_records(src, name, scale)
    meta = recs.experiments.get(name)

    def compute() -> dict[str, str]:
        firsts: dict[str, dict[str, Any]] = {}
        for r in recs.records:
            if r.get("arm"):
                firsts.setdefault(r["arm"], config_of(r))
        return names_of(firsts, nuisance=meta.nuisance if meta else ("train.seed",), order=meta.axes if meta else ())

    return src.cached(f"arm-names:{name}:{scale}", compute)


def known_keys(records: Sequence["RunRecord"]) -> list[str]:
    return list(dict.fromkeys(k for r in records[:50] for k in r if is_config(k)))


def select(records: Sequence["RunRecord"], sel: Selection) -> list["RunRecord"]:
    from cemctl.records.where import matches

    conds = sel.conds(known_keys(records))
    return [r for r in records if matches(conds, r)] if conds else list(records)


def experiment_axes(src: "Source", name: str, scale: str | None = None) -> list[str]:
    """`varying_axes` of the whole experiment (cached with its records): the keys its tables and charts offer."""
    recs = experiment_records(src, name, scale)
    return src.cached(f"axes:{name}:{scale}", lambda: varying_axes(recs.experiments.get(name), recs.records))


def varying_axes(meta: "ExperimentMeta | None", records: Sequence["RunRecord"]) -> list[str]:
    """The config keys that vary among the records (the grid's axes first, in its order), nuisance keys last out."""
    from cem_core.arms import varying_keys

    nuisance = meta.nuisance if meta is not None else ("train.seed",)
    order = meta.axes if meta is not None else []
    from cem_core.arms import config_of

    firsts = list({r.get("arm") or r["run_id"]: r for r in reversed(records)}.values())  # one run per arm: the
    keys = varying_keys([config_of(r) for r in firsts], nuisance, order)  # keys that vary among the arms
    ordered = [k for k in order if k in keys] + [k for k in keys if k not in order]
    seeds = {r.get("train.seed") for r in records}
    return ordered + (["train.seed"] if len(seeds) > 1 else [])


# ----------------------------------------------------------------------------------------------- experiments

@dataclass
class ExperimentRow:
    name: str
    description: str
    figure: str
    total: int
    counts: dict[str, int]
    last_activity: float | None
    outdated: int
    claims: str = ""


def experiments_overview(src: "Source", now: float | None = None) -> list[ExperimentRow]:
    """One row per experiment: counts by state (runs in flight as their folders show them now), last activity."""
    from cemctl.services.status import status_snapshot

    now = time.time() if now is None else now
    statuses = src.cached("overview", lambda: status_snapshot(src.engine, src.runs_root, None, sync=False, now=now))
    verdicts = claims_by_experiment(src, compute=False)  # the claims fragment computes them (seconds at 10k runs)
    rows = []
    for st in statuses:
        runs = live_copy(src, st.runs, now)
        counts = Counter(r["state"] for r in runs)
        times = [t for r in runs for t in (r.get("heartbeat_at"), r.get("finished_at"), r.get("started_at"))
                 if isinstance(t, (int, float))]
        meta = st.meta
        rows.append(ExperimentRow(st.name, meta.description if meta else "", meta.figure if meta else "",
                                  len(runs), _ordered_counts(counts), max(times) if times else None,
                                  len(st.outdated), verdicts.get(st.name, "")))
    return rows


def _ordered_counts(counts: Counter) -> dict[str, int]:
    from cem_core.runfiles import RUN_STATES

    return {s: counts[s] for s in RUN_STATES if counts.get(s)}


# ----------------------------------------------------------------------------------------------- runs table

@dataclass
class Column:
    name: str
    header: str
    help: str
    numeric: bool
    sort: str = ""  # the field its header sorts by (default: its name)

    def __post_init__(self) -> None:
        self.sort = self.sort or self.name


@dataclass
class Table:
    columns: list[Column]
    rows: list[dict[str, Any]]  # {"run_id", "state", "cells": [text per column], "title": the arm's full label}
    total: int  # runs of the experiment
    matching: int  # runs meeting the selection
    counts: dict[str, int]  # states of the matching runs
    eta_s: float | None  # the grid's ETA (`cemctl.records.progress.grid_eta_s`) over the matching runs
    refresh_s: float
    sort: str
    note: str = ""


ARM_COLUMN = "arm"  # the runs table's arm: its name (`arm_names`), sorted by its label


def runs_table(src: "Source", name: str, sel: Selection, now: float | None = None, moment: str = "") -> Table:
    """The live status table of an experiment: its runs meeting `sel.where`, as their folders show them now,
    sorted by `sel.sort` (grid order by default), at most `sel.limit` rows (runs in flight first). Each run is named
    by its arm's name (the fewest keys that tell the arms apart, its whole configuration in the cell's tooltip) and
    its seed; the results come next, so that the numbers are in view on a laptop's screen."""
    from cemctl.records.progress import grid_eta_s
    from cemctl.services.status import sort_by

    _, runs = live_experiment(src, name, sel.scale, now, moment)
    chosen = select(runs, sel)
    order = sel.order()
    if order:
        chosen = sort_by(chosen, order)
    shown = chosen
    note = ""
    if sel.limit and len(chosen) > sel.limit:
        if order:
            shown = chosen[:sel.limit]
        else:  # runs in flight and failures first, then grid order (as `cemctl status` does)
            from cemctl.services.status.collect import STATE_PRIORITY

            idx = sorted(range(len(chosen)), key=lambda i: (STATE_PRIORITY.get(chosen[i]["state"], 9), i))
            shown = [chosen[i] for i in sorted(idx[:sel.limit])]
        note = f"showing {len(shown):,} of {len(chosen):,} runs"
    axes = experiment_axes(src, name, sel.scale)
    names_of = arm_names(src, name, sel.scale)
    tags = sorted({k for r in chosen for k in r if k.startswith("tag.")})
    seed = ["train.seed"] if "train.seed" in axes else []
    names = ["run_id", ARM_COLUMN, *seed, *RUN_COLUMNS, *tags, "note"]
    always = {"run_id", ARM_COLUMN, "state", "progress", *seed}
    names = [n for n in names if n in always or any(cell(n, r.get(n)) != "" for r in chosen)]  # as `cemctl status`:
    # a column no matching run has a value in (tokens/s and ETA once nothing trains, a note nobody wrote) is left out
    columns = [Column(ARM_COLUMN, "arm", "the run's arm (every config value but the seed), named by the fewest keys "
                      "that tell the arms apart; its whole configuration in the tooltip", False, "arm_label")
               if n == ARM_COLUMN else Column(n, header(n), describe(n) if not is_config(n) else n, numeric(n))
               for n in names]
    rows = [{"run_id": r["run_id"], "state": r["state"], "arm": r.get("arm"), "progress": r.get("progress"),
             "title": r.get("arm_label") or "",
             "cells": [names_of.get(r.get("arm") or "", r.get("arm_label") or "") if n == ARM_COLUMN
                       else cell(n, r.get(n)) for n in names]} for r in shown]
    counts = _ordered_counts(Counter(r["state"] for r in chosen))
    return Table(columns, rows, len(runs), len(chosen), counts, grid_eta_s(chosen), refresh_s(counts), sel.sort, note)


# ----------------------------------------------------------------------------------------------- arms table

@dataclass
class ArmsTable:
    metric: str
    columns: list[tuple[str, str | None, str]]  # (header, the field it sorts by or None, its meaning)
    rows: list[dict[str, Any]]  # {"arm", "name", "label", "cells": [...]}
    sort: str
    keys: list[tuple[str, str]] = field(default_factory=list)  # (key, header): the arm's varying keys, to sort by
    refresh_s: float = IDLE_REFRESH_S
    note: str = ""


def arms_table(src: "Source", name: str, sel: Selection, metric: str, arm_sort: str = "",
               now: float | None = None, moment: str = "") -> ArmsTable:
    """One row per arm of the runs meeting `sel.where`, as their folders show them now (the seeds done are those
    `cemctl status` counts): the arm's name (`arm_names`; its whole configuration in the tooltip), then the numbers:
    seeds done / planned, the metric's mean, s.d. and 95% interval over the finished seeds (`cemctl.report.arms`),
    perplexity, parameters, tokens, speed and wall time. In the grid's axes' order (`arm_sort`: a catalogue field,
    `-` first for descending: the metric (by its mean), a config key, or arm_label)."""
    from cem_core.arms import config_of
    from cemctl.records import formats
    from cemctl.records.fields import resolve
    from cemctl.report.generic import arm_sort_key
    from cemctl.services.results import arms_table_of

    recs, live = live_experiment(src, name, sel.scale, now, moment)
    meta = recs.experiments.get(name)
    chosen = select(live, sel)
    refresh = refresh_s(r["state"] for r in chosen)
    if not chosen:
        return ArmsTable(metric, [], [], arm_sort, refresh_s=refresh)
    table = arms_table_of(frame_of(chosen), metric=metric)
    keys = [k for k in experiment_axes(src, name, sel.scale) if k in table.columns and k != "train.seed"]
    names_of = arm_names(src, name, sel.scale)
    configs = {r["arm"]: config_of(r) for r in chosen if r.get("arm")}
    fmt = formats.by_kind(_kind(metric))
    ppl = metric.replace("_loss", "_ppl") if metric.endswith("_loss") else None
    rows = []
    for r in table.to_dict("records"):
        mean, sd = r[f"{metric} mean"], r[f"{metric} s.d."]
        lo, hi = r[f"{metric} 95% low"], r[f"{metric} 95% high"]
        done = r["seeds done"]
        cells = [f"{done}/{r['seeds planned']}", fmt(mean), fmt(sd),
                 f"[{fmt(lo)}, {fmt(hi)}]" if not (math.isnan(lo) or math.isnan(hi)) else ""]
        if ppl:
            cells.append(formats.ppl(r.get(f"{ppl} mean")))
        cells += [formats.count(r.get("params")), formats.count(r.get("tokens")), formats.rate(r.get("tokens/s")),
                  formats.duration(r.get("wall time (s)"))]
        config = configs.get(r["arm id"], {})
        rows.append({"arm": r["arm id"], "name": names_of.get(r["arm id"], r["arm"]), "label": r["arm"],
                     "config": ", ".join(f"{k}={formats.value(v)}" for k, v in sorted(config.items())
                                         if k not in (meta.nuisance if meta else ("train.seed",))),
                     "cells": cells, "few": 0 < done < 3,
                     "_sort": {"arm_label": r["arm"], metric: mean, **{k: r.get(k) for k in keys}},
                     "_order": arm_sort_key(config, meta.axes if meta else keys)})
    rows.sort(key=lambda row: row["_order"])  # the grid's axes' order: a visible order by default
    fields = formats_help(metric)
    columns = [("seeds", None, "seeds finished / planned"), (f"{header(metric)} mean", metric, fields["mean"]),
               ("s.d.", None, "the sample standard deviation over the finished seeds (the charts' whiskers)"),
               ("95% interval", None, "the 95% t interval of the mean over the finished seeds (fragile with "
                                      "fewer than 3 seeds: marked *)")]
    if ppl:
        columns.append((f"{header(ppl)} mean", None, f"{ppl}: the mean over the finished seeds"))
    columns += [("params", None, "parameters"), ("tokens", None, "tokens trained on (mean)"),
                ("tok/s", None, "training tokens per second (mean)"),
                ("wall time", None, "the training's wall time (result.json wall_time_s, mean): what status, launch "
                                    "and the report show")]
    if arm_sort:
        desc = arm_sort.startswith("-")
        key = resolve(arm_sort.lstrip("-"), keys, what="arms sort")
        allowed = ["arm_label", metric, *keys]
        if key not in allowed:
            raise ConfigError("arms sort", f"the arms table cannot be sorted by {key!r}", allowed=allowed)
        rows = _sorted(rows, key, desc)
    for r in rows:
        r.pop("_sort")
        r.pop("_order")
    few = any(r["few"] for r in rows)
    note = ("*: fewer than 3 finished seeds: the s.d. and the interval rest on one or two values and may move "
            "a lot with the next seed" if few else "")
    return ArmsTable(metric, columns, rows, arm_sort, [(k, header(k)) for k in keys], refresh, note)


def formats_help(metric: str) -> dict[str, str]:
    return {"mean": f"{describe(metric)}: the mean over the finished seeds"}


def _kind(name: str) -> str:
    from cemctl.records.fields import field

    return field(name).kind


def _sorted(rows: list[dict[str, Any]], key: str, desc: bool) -> list[dict[str, Any]]:
    def num(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)

    have = [r for r in rows if r["_sort"].get(key) is not None and not (isinstance(r["_sort"][key], float)
                                                                       and math.isnan(r["_sort"][key]))]
    nums = sorted((r for r in have if num(r["_sort"][key])), key=lambda r: r["_sort"][key], reverse=desc)
    texts = sorted((r for r in have if not num(r["_sort"][key])), key=lambda r: str(r["_sort"][key]), reverse=desc)
    rest = [r for r in rows if r not in have]
    return nums + texts + rest


def metric_choices(records: Sequence["RunRecord"], meta: "ExperimentMeta | None" = None) -> list[str]:
    """The metrics the arms table and the metric figure can show: the grid's metric (even before any run has it: an
    experiment whose runs all failed shows its page, saying so) and those of ARM_METRICS some run has."""
    grid = [meta.metric] if meta is not None and meta.metric else ["test_loss"]
    return list(dict.fromkeys(grid + [m for m in ARM_METRICS if any(isinstance(r.get(m), (int, float))
                                                                    for r in records)]))


# ----------------------------------------------------------------------------------------------- claims

def _claims_key(src: "Source") -> str:
    """The claims' cache key: with the database's state (`Source.cached`), the state of the registrations and
    designs beside the runs, which the page reads too."""
    from cemctl.services.claim_plans import state_token

    return f"claims:{state_token(src.runs_root)}"


def claims_result(src: "Source") -> Any:
    """`cemctl.services.claims.claims_report` on the read-only database (no sync, nothing written), cached per
    state of the database and the claims files; None when no recorded grid declares a claim or no run is
    recorded."""
    def compute() -> Any:
        from cemctl.services.claims import claims_report

        try:
            return claims_report(src.url, runs_root=src.runs_root, sync=False)
        except CemError:
            return None

    return src.cached(_claims_key(src), compute)


def claims_by_experiment(src: "Source", compute: bool = True) -> dict[str, str]:
    """{experiment: '2 holds, 1 inconclusive'}: the adjusted verdicts (docs/claims.md) of the claim parts it declares (with
    `compute=False`: only if the claims of this state of the database were computed already, else {})."""
    result = claims_result(src) if compute else src.peek(_claims_key(src))
    if result is None or result.parts.empty or "experiment" not in result.parts.columns:
        return {}
    out: dict[str, str] = {}
    for name, group in result.parts.groupby("experiment", sort=False):
        counts = Counter(group["verdict_holm"])
        out[str(name)] = ", ".join(f"{n} {v}" for v, n in counts.most_common())
    return out


def claim_verdicts(src: "Source") -> list[dict[str, str]]:
    """One row per (claim, scale): its adjusted verdict and statement (`cemctl claims`' summary)."""
    from cemctl.services.claims import claim_evidence

    result = claims_result(src)
    if result is None or result.claims.empty:
        return []
    out = []
    for r in result.claims.to_dict("records"):
        row = {k: str(r.get(k, "")) for k in ("claim", "scale", "verdict", "statement")}
        row["evidence"] = claim_evidence(result.parts, row["claim"], r.get("scale", ""))
        if row["evidence"].startswith("exploratory"):  # the page's mark, where the table has no column for it yet
            row["statement"] += f" [{row['evidence']}]"
        out.append(row)
    return out


@dataclass
class ClaimPart:
    claim: str
    part: str
    scale: str
    expect: str
    effect: str
    interval: str
    holm: str
    method: str
    n: str
    verdict: str
    low: float
    high: float
    value: float
    margin: float
    unit: str


def claim_parts(src: "Source", experiment: str | None = None) -> list[ClaimPart]:
    """The claim parts (of the experiment that declares them, when named) with their intervals and verdicts."""
    result = claims_result(src)
    if result is None or result.parts.empty:
        return []
    parts = result.parts
    if experiment is not None and "experiment" in parts.columns:
        parts = parts[parts["experiment"] == experiment]

    def f(v: Any, digits: int = 4) -> str:
        return f"{v:+.{digits}f}" if isinstance(v, (int, float)) and math.isfinite(v) else ""

    from cemctl.report.claims import effect_text

    out = []
    for r in parts.to_dict("records"):
        lo, hi = r.get("ci95_low"), r.get("ci95_high")
        hlo, hhi = r.get("holm_low"), r.get("holm_high")
        df = r.get("df")
        # the page's text (`cemctl claims`): rounded to what the interval supports, open where open; a part not
        # evaluated says why; the evidence mark (confirmatory / exploratory) with the method
        why = r.get("why_not_run") if isinstance(r.get("why_not_run"), str) else ""
        text = effect_text(_finite(r.get("effect")), _finite(lo, True), _finite(hi, True), str(r.get("unit", "")))
        out.append(ClaimPart(
            str(r.get("claim", "")), str(r.get("part", "")), str(r.get("scale", "")), str(r.get("expect", "")),
            text.split(" ", 1)[0] if r.get("verdict") != "not run" else "",
            (text.split(" ", 1)[1] if " " in text else "") if r.get("verdict") != "not run" else f"not run: {why}",
            f"[{f(hlo)}, {f(hhi)}]" if f(hlo) or f(hhi) else "",
            "; ".join(x for x in (str(r.get("evidence", "")), str(r.get("method", "")) + (
                f", df {df:.0f}" if isinstance(df, float) and math.isfinite(df) else ""),
                next((y.strip() for y in str(r.get("robustness") or "").split(";") if "depends on" in y), "")) if x),
            str(r.get("n", "")), str(r.get("verdict_holm", "")),
            _finite(lo), _finite(hi), _finite(r.get("effect")), _finite(r.get("margin")), str(r.get("unit", ""))))
    return out


def _finite(v: Any, open_: bool = False) -> float:
    """v as a float, NaN when not finite (`open_`: an infinite end of an interval open on that side is kept)."""
    if open_ and isinstance(v, (int, float)) and math.isinf(v):
        return float(v)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else math.nan


# ----------------------------------------------------------------------------------------------- a run

@dataclass
class RunView:
    record: "RunRecord"
    fields: list[tuple[str, str, str]]  # (header, value text, meaning)
    config: list[tuple[str, str, bool]]  # (key, value text, varied in its grid)
    tags: list[tuple[str, str]]
    notes: str
    events: list[dict[str, str]]
    environment: list[tuple[str, str]]
    earlier_attempts: int
    log: list[str]
    experiments: list[str]


FIELD_GROUPS = ("state", "progress", "result", "code", "link")


def run_view(src: "Source", run_id: str, *, log_lines: int = LOG_LINES, now: float | None = None) -> RunView:
    """Everything the run page shows: the record (as its folder shows it now when unfinished), its config, state
    history, tags and notes, environment, and the tail of its logs (read only inside its folder)."""
    from cem_core.arms import config_of
    from cem_core.names import is_run_id
    from cemctl.db.environment import environment_of
    from cemctl.db.runs import run_events
    from cemctl.records import load_records
    from cemctl.records.fields import RUN_FIELDS

    if not is_run_id(run_id):
        raise NotFound(f"run: {run_id!r} is not a run id (12 hexadecimal digits)")
    recs = load_records(src.engine, None, run_ids=[run_id], runs_root=src.runs_root, arms=False)
    if not recs.records:
        raise NotFound(f"run: no run {run_id} in this results database")
    rec = live_copy(src, recs.records[:1], now)[0]
    shown_fields = []
    for f in RUN_FIELDS:
        if f.name in ("arm", "arm_label", "note", "run_dir") or f.source not in FIELD_GROUPS:
            continue
        text = cell(f.name, rec.get(f.name))
        if text != "":
            shown_fields.append((f.name, text + (f" {f.unit}" if f.unit and f.kind in ("int", "float") else ""),
                                 describe(f.name)))  # a list of names and values: room for the whole name ('att')
    axes = rec.axes
    config = [(k, cell(k, v), k in axes) for k, v in sorted(config_of(rec).items(), key=lambda kv: (kv[0] != "task", kv[0]))]
    tags = sorted((k[4:], str(v)) for k, v in rec.items() if k.startswith("tag."))
    events = [{"time": cell("started_at", e.time), "state": e.state, "reason": e.reason or "",
               "attempt": "" if e.attempt is None else str(e.attempt), "host": e.host or "", "source": e.source}
              for e in run_events(src.engine, run_id)]
    env = environment_of(src.engine, [run_id]).get(run_id) or {}
    earlier: Any = env.get("earlier_attempts") if isinstance(env.get("earlier_attempts"), list) else []
    env_rows = [(k, _env_text(k, v)) for k, v in env.items() if k != "earlier_attempts"]
    log = run_log(src, rec, log_lines)
    exps = [e.strip() for e in str(rec.get("experiment") or "").split(",") if e.strip()]
    return RunView(rec, shown_fields, config, tags, str(rec.get("note") or ""), events, env_rows, len(earlier), log,
                   exps)


def _env_text(key: str, value: Any) -> str:
    from cemctl.records import formats

    if value is None:
        return ""
    if key.endswith("_bytes") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value / 2**30:.2f} GiB"
    if key.endswith("_at") and isinstance(value, (int, float)):
        return formats.timestamp(value)
    return formats.value(value) if not isinstance(value, (dict, list)) else formats.value(str(value))


def run_log(src: "Source", rec: "RunRecord", lines: int) -> list[str]:
    """The last lines of the run's logs (`cemctl.services.logs`: files inside the run's folder only, control
    characters escaped), each log under a `==> file <==` header."""
    from cemctl.services.logs import tail_logs

    out: list[str] = []
    run_dir = rec.get("run_dir")
    if not run_dir or not Path(run_dir).is_dir():
        return [f"(no run folder at {run_dir})"] if run_dir else []
    try:
        found = tail_logs(Path(run_dir), lines, write=out.append, runs_root=src.runs_root)
    except OSError as e:
        return [f"(logs not readable: {e.strerror or e})"]
    if found or out:
        return out
    from cemctl.records.live import LIVE_STATES

    if rec.get("state") in LIVE_STATES:
        return ["(no logs yet)"]
    return ["(no log in the run's folder: neither train.log nor executor.log; an archive carries no logs, so an "
            "imported run has none)"]


# ----------------------------------------------------------------------------------------------- compare

@dataclass
class CompareView:
    items: list[dict[str, Any]]  # {"text", "kind", "name", "runs": [ids]}
    differing: list[tuple[str, list[str]]]
    metrics: list[dict[str, Any]]  # {"name", "header", "cells": [text], "diffs": [text]}
    identical: bool


COMPARE_METRICS = ("test_loss", "test_ppl", "val_loss", "val_ppl", "train_loss", "params_total", "tokens",
                   "train_flops", "wall_time_s")


def compare_view(src: "Source", items: Sequence[str], *, experiment: str | None = None,
                 where: Sequence[str] = ()) -> CompareView:
    """Runs or arms side by side (`cemctl.services.compare`: only the config keys that differ), each metric with
    the difference to the first item and its 95% interval, computed as `cemctl compare` computes it
    (`cemctl.services.compare.difference`: paired by seed when both arms share seeds and parameters, else Welch)."""
    from cemctl.services.compare import compare, difference

    if experiment is not None:
        experiment_records(src, experiment)  # an unknown experiment is a 404 with the known ones
    cmp = compare(src.url, src.runs_root, list(items), experiment=experiment, where=list(where) or None)
    rows = []
    for col in COMPARE_METRICS:
        per = [_item_values(i, col) for i in cmp.items]
        if not any(per):
            continue
        fmt = _fmt_of(col)
        cells, diffs = [], []
        for j, vals in enumerate(per):
            cells.append(_mean_text(vals, fmt, cmp.items[j].kind == "arm"))
            if j == 0 or not vals or not per[0]:
                diffs.append("")
                continue
            d = difference(cmp.items[0], cmp.items[j], col)
            if d is None:
                diffs.append("")
                continue
            text = _signed(fmt, d["effect"])  # the effect and its interval in the metric's own format
            if d["low"] is not None and d["high"] is not None:
                text += (f" [{_signed(fmt, d['low'])}, {_signed(fmt, d['high'])}] "
                         f"{'paired' if d['method'] == 'paired t' else 'Welch'}")
            diffs.append(text)
        rows.append({"name": col, "header": header(col), "help": describe(col), "cells": cells, "diffs": diffs})
    state = [{"text": i.text, "kind": i.kind, "name": i.name, "runs": i.run_ids, "letter": _letter(j),
              "states": ", ".join(f"{n} {s}" for s, n in Counter(r.get("state") for r in i.runs).most_common())}
             for j, i in enumerate(cmp.items)]
    return CompareView(state, [(k, list(v)) for k, v in cmp.differing], rows, cmp.identical)


def _letter(j: int) -> str:
    """The column name of the j-th compared item, as `cemctl compare` names it: A, B, C, ..."""
    return "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[j % 26] + (str(j // 26) if j >= 26 else "")


def _signed(fmt: Any, x: float) -> str:
    return ("-" if x < 0 else "+") + fmt(abs(x))


def _item_values(item: Any, col: str) -> list[float]:
    """The finite values of `col` over the item's runs (an arm: its finished seeds)."""
    rows = [r for r in item.runs if r.get("state") == "done"] if item.kind == "arm" else list(item.runs)
    vals = [r.get(col) for r in rows]
    return [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]


def _fmt_of(col: str) -> Any:
    from cemctl.records import formats

    return formats.by_kind(_kind(col))


def _mean_text(vals: list[float], fmt: Any, arm: bool) -> str:
    if not vals:
        return ""
    mean = sum(vals) / len(vals)
    text = fmt(mean)
    if len(vals) > 1:
        sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
        text += f" \u00b1 {fmt(sd)}" if sd > 0 else ""  # as `cemctl compare`: no spread for a value every seed shares
    return text + (f" (n={len(vals)})" if arm else "")


# ----------------------------------------------------------------------------------------------- static report

REPORT_TYPES = {".html": "text/html; charset=utf-8", ".png": "image/png", ".svg": "image/svg+xml",
                ".pdf": "application/pdf", ".csv": "text/csv; charset=utf-8", ".md": "text/plain; charset=utf-8",
                ".tex": "text/plain; charset=utf-8", ".txt": "text/plain; charset=utf-8", ".json": "application/json"}
MAX_REPORT_FILE_BYTES = 64 * 2**20


def report_files(src: "Source", name: str) -> list[tuple[str, int]]:
    """(relative path, size) of the files `cemctl report` wrote for the experiment into the reports folder (those
    its manifest lists that are still the regular files it wrote); [] when there is no such report."""
    import os
    import stat

    from cem_core.runfiles.manifest import ManifestError, read_manifest
    from cemctl.report.outdir import MARKER

    folder = src.reports_dir / name
    try:
        manifest = read_manifest(folder, MARKER, what="report")
    except (ManifestError, OSError):
        return []
    out = []
    for rel, entry in sorted(manifest.files.items()):
        if Path(rel).suffix.lower() not in REPORT_TYPES or rel.startswith("/") or ".." in Path(rel).parts:
            continue
        try:
            st = os.lstat(folder / rel)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_size == entry.size:
            out.append((rel, st.st_size))
    return sorted(out, key=lambda f: (f[0] != "index.html", f[0]))  # the report's page first


def report_file(src: "Source", name: str, rel: str) -> tuple[bytes, str]:
    """A file of the experiment's static report: only one its manifest lists (never a path the URL makes up),
    read as a run file is (regular, inside the folder, size-capped)."""
    from cem_core.runfiles.files import confined_path, read_bytes

    listed = dict(report_files(src, name))
    if rel not in listed:
        raise NotFound(f"report: no file {rel!r} in the report of {name}")
    folder = src.reports_dir / name
    try:
        data = read_bytes(confined_path(folder, rel), max_bytes=MAX_REPORT_FILE_BYTES)
    except Exception as e:  # noqa: BLE001 - refused or gone: not found
        raise NotFound(f"report: {rel!r} cannot be read ({str(e).split(': ', 1)[-1]})") from None
    return data, REPORT_TYPES[Path(rel).suffix.lower()]
