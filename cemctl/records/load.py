"""The run record: the one place a run's facts are read from the database and named (`cemctl.records.fields`).

    recs = load_records(engine, "fig2c", scale="cpu")              # one record per run of the experiment
    recs = load_records(engine, None, per_experiment=True)          # one per (experiment, run): `cemctl status`
    recs.records[0]["test_loss"], recs.records[0]["model.attn_steps"], recs.records[0]["tag.phase"]
    recs.frame()                                                    # the same as a pandas DataFrame

Every command, figure, export, the API and the dashboard read runs through `load_records`;
`cemctl.records.where` filters the same records with the same field names everywhere.

What a record holds: every run field of the catalogue (None where the run has no value
yet), every config key of the run's resolved config (dotted, when `config` is asked for
or needed by the arms), `tag.NAME` for each of its tags, and `_axes` (the varied axes of
its grid, for tables that show them; keys starting with "_" never reach a frame).

Which runs: with an `experiment`, its runs (of `scale` when given), each once, from its
latest plan (a run an edited grid no longer holds is kept only when it has an outcome:
`in_grid` false); with `experiment=None`, every run once (`experiment`: the names
linking it, comma-separated; a run no experiment links has ""), or with
`per_experiment=True` one record per experiment and run (runs no experiment links
under NO_EXPERIMENT). Arms (`arm`, `arm_label`) follow `cem_core.arms` with the
experiment's nuisance keys; labels are made of the keys that vary among the arms of
the experiment (or of everything loaded, with `experiment=None`), before any `--where`:
a label names an arm the same way whatever is selected. Read-only, torch-free,
pandas only for `frame()`.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from cem_core.errors import CemError
from cem_core.runfiles import RESULT_STATES
from cemctl.records.progress import elapsed_s, run_eta_s

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from sqlalchemy.engine import Engine

NO_EXPERIMENT = "(no experiment)"
NOT_IN_GRID = "no longer in the grid (planned by an earlier version of the grid file)"
FAILED_STATES = ("failed", "stale", "diverged", "cancelled", "damaged")
ENDED_STATES = ("done", "diverged", "failed", "damaged")  # an outcome: kept when the grid no longer holds the run


@dataclass
class ExperimentMeta:
    """What the experiment's grid says about its runs: its axes (in file order) and its `[experiment]` options
    (nuisance keys, x, hue, metric), the latter read from the grid's recorded text on first use."""

    name: str
    axes: list[str] = field(default_factory=list)  # the grid's varied keys, in file order
    figure: str = ""
    grid_path: str = ""
    description: str = ""  # the grid's [experiment] description, as written (shown escaped)
    grid_text: str = field(default="", repr=False)
    _options: Any = field(default=None, repr=False)

    def _opts(self) -> Any:
        if self._options is None:
            from cemctl.grid.spec import options_from_text

            self._options = options_from_text(self.grid_text, self.grid_path)
        return self._options

    @property
    def nuisance(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(["train.seed", *self._opts().nuisance]))

    @property
    def x(self) -> str | None:
        return self._opts().x

    @property
    def hue(self) -> tuple[str, ...]:
        return tuple(self._opts().hue)

    @property
    def metric(self) -> str:
        return self._opts().metric


@dataclass
class RunRecords:
    records: list[dict[str, Any]]
    experiments: dict[str, ExperimentMeta] = field(default_factory=dict)
    config_loaded: bool = False

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):  # noqa: ANN204
        return iter(self.records)

    def run_ids(self) -> list[str]:
        return [r["run_id"] for r in self.records]

    def frame(self) -> "pd.DataFrame":
        return records_frame(self.records)

    def where(self, conds: Sequence[Any]) -> "RunRecords":
        from cemctl.records.where import matches

        if not conds:
            return self
        return RunRecords([r for r in self.records if matches(conds, r)], self.experiments, self.config_loaded)


def _meta(exp: Any, axes: list[str]) -> ExperimentMeta:
    return ExperimentMeta(exp.name, axes, exp.figure, exp.grid_path, exp.description or "", exp.grid_text or "")


def _unknown(engine: "Engine", name: str) -> CemError:
    from cemctl.db.runs import list_experiments

    known = ", ".join(e.name for e in list_experiments(engine)) or "none yet; run cemctl plan FILE"
    return CemError(f"experiment: unknown experiment {name!r} (known: {known})")


def load_records(engine: "Engine", experiment: str | None = None, *, scale: str | None = None,
                 per_experiment: bool = False, per_scale: bool = False, config: bool = True, arms: bool = True, tags: bool = True,
                 results: bool = True, extras: bool = True, outdated: bool = True, environment: bool = True,
                 history: bool = True,
                 runs_root: Path | str | None = None, now: float | None = None,
                 run_ids: Sequence[str] | None = None) -> RunRecords:
    """The records of the runs (see the module docstring). `config`/`arms`/`tags`/`results`/`outdated`: what to
    read beyond the run's state and progress (all by default; `cemctl status` asks only for what it shows).
    `environment`: what the run trained on (its environment.json, `cemctl.db.environment`).
    `runs_root`: the folder `run_dir` is made from (default: the one the database recorded). Raises CemError for an
    unknown experiment (listing the known ones). `per_scale` (with `experiment=None`): one record per run and scale
    it was planned at (`cemctl claims` across scales). `run_ids`: only these runs (a run page); their arms are then
    labelled among them alone, so ask for the experiment instead where the label matters."""
    from sqlalchemy import case, func, literal, null, select

    from cemctl.db.engine import read_session
    from cemctl.db.models import Experiment, ExperimentRun, Metric, Result, Run, RunEnvironment, RunEvent, RunTags
    from cemctl.db.runs import in_grid_case, join_latest, latest_plans, recorded_runs_root

    now = time.time() if now is None else now
    need_config = config or arms
    run_cols = [Run.id, Run.state, Run.state_reason, Run.last_step, Run.total_steps, Run.tokens, Run.last_train_loss,
                Run.last_val_loss, Run.tokens_per_s, Run.started_at, Run.finished_at, Run.heartbeat_at, Run.executor,
                Run.job_id, Run.attempts, Run.error, Run.host, Run.created_at, Run.params_total,
                Run.params_non_embedding, Run.flops_per_token,
                # a running run's elapsed time at its last step (its pace: `progress.run_eta_s`); the lookup runs
                # for running runs only (one row of the metrics' primary key each)
                case((Run.state == "running", select(Metric.time_s).where(
                    Metric.run_id == Run.id, Metric.kind == "train", Metric.step == Run.last_step)
                    .limit(1).scalar_subquery()), else_=null()),
                # when a run that is neither running nor finished was last seen: the last event of its own
                # events.jsonl (`elapsed_s`; not one the database derived, such as an import's "planned")
                case((Run.state.not_in(("running", *RESULT_STATES)), select(func.max(RunEvent.time)).where(
                    RunEvent.run_id == Run.id, RunEvent.source == "file").scalar_subquery()), else_=null())]
    res_cols = [Result.state, Result.test_loss, Result.test_ppl, Result.val_loss, Result.val_ppl, Result.params_total,
                Result.params_non_embedding, Result.flops_per_token, Result.train_flops, Result.tokens, Result.steps,
                Result.wall_time_s, Result.error, Result.diverged_step, Result.code_fingerprint]
    cols = [*run_cols, *(res_cols if results else []),
            *([Result.result_json] if results and extras else []),
            *([Run.config_json] if need_config else []),
            *([RunTags.tags_json, RunTags.notes_json] if tags else []),
            *([getattr(RunEnvironment, c) for c in ENV_COLUMNS] if environment else [])]

    def joined(q: Any) -> Any:
        if results:
            q = q.outerjoin(Result, Result.run_id == Run.id)
        if tags:
            q = q.outerjoin(RunTags, RunTags.run_id == Run.id)
        if environment:
            q = q.outerjoin(RunEnvironment, RunEnvironment.run_id == Run.id)
        return q

    with read_session(engine) as s:
        exps = {e.id: e for e in s.scalars(select(Experiment).order_by(Experiment.name))}
        if experiment is not None and experiment not in {e.name for e in exps.values()}:
            raise _unknown(engine, experiment)
        latest = latest_plans()
        q = join_latest(select(
            ExperimentRun.experiment_id, ExperimentRun.scale, ExperimentRun.position, ExperimentRun.axes_json,
            ExperimentRun.marks_json, ExperimentRun.planned_at, in_grid_case(latest).label("in_grid"), *cols)
            .select_from(ExperimentRun).join(Run, Run.id == ExperimentRun.run_id), latest)
        q = joined(q)
        if experiment is not None:
            q = q.join(Experiment, Experiment.id == ExperimentRun.experiment_id).where(Experiment.name == experiment)
        if scale is not None:
            q = q.where(ExperimentRun.scale == scale)
        wanted = list(dict.fromkeys(run_ids)) if run_ids is not None else None
        if wanted is not None:
            q = q.where(ExperimentRun.run_id.in_(wanted))
        linked = list(s.execute(q))
        lone: list[Any] = []
        if experiment is None and scale is None:
            oq = joined(select(literal(None), literal(""), literal(0), literal("{}"), literal("[]"), null(),
                               literal(1), *cols).select_from(Run)).where(Run.id.not_in(select(ExperimentRun.run_id)))
            if wanted is not None:
                oq = oq.where(Run.id.in_(wanted))
            lone = list(s.execute(oq.order_by(Run.created_at)))
    root = Path(runs_root) if runs_root is not None else recorded_runs_root(engine)
    root_text = str(Path(os.path.abspath(root))) if root is not None else None

    # One link per (experiment, run) (per_experiment or one experiment) or per run: the latest plan's, in-grid first.
    linked.sort(key=lambda r: (-(r[6] or 0), -(r[5] or 0.0), r[1] or "", r[2] or 0))
    chosen: dict[Any, Any] = {}
    names: dict[str, list[str]] = {}
    one_exp = per_experiment or experiment is not None
    for row in linked:
        eid, rid = row[0], row[7]
        exp_name = exps[eid].name if eid in exps else ""
        shared = (rid, row[1]) if per_scale else rid  # the runs that are one record when experiments are joined
        names.setdefault(shared, [])
        if exp_name not in names[shared]:
            names[shared].append(exp_name)
        chosen.setdefault((eid, rid) if one_exp else shared, row)
    picked = sorted(chosen.items(), key=lambda kv: (exps[kv[1][0]].name if kv[1][0] in exps else "", kv[1][2] or 0))
    n_link = 7
    out: list[dict[str, Any]] = []
    for key, row in picked:
        in_grid = bool(row[6])
        rec = _record(row[n_link:], cols, results=results, need_config=need_config, tags=tags, now=now,
                      environment=environment, extras=extras)
        if not in_grid and rec["state"] not in ENDED_STATES:
            continue  # left the grid before it ran: it never will
        exp_name = exps[row[0]].name if row[0] in exps else ""
        shared = (rec["run_id"], row[1]) if per_scale else rec["run_id"]
        rec["experiment"] = exp_name if one_exp else ", ".join(sorted(names.get(shared, [exp_name])))
        rec["_experiment"] = exp_name
        _link_fields(rec, row, in_grid, root_text)
        out.append(rec)
    for row in lone:
        rec = _record(row[n_link:], cols, results=results, need_config=need_config, tags=tags, now=now,
                      environment=environment, extras=extras)
        rec["experiment"] = ""
        rec["_experiment"] = NO_EXPERIMENT if per_experiment else ""
        _link_fields(rec, row, True, root_text)
        out.append(rec)

    metas: dict[str, ExperimentMeta] = {}
    for e in exps.values():
        if experiment is None or e.name == experiment:
            axes = list(dict.fromkeys(k for r in out if r["_experiment"] == e.name for k in r["_axes"]))
            metas[e.name] = _meta(e, axes)
    if outdated and results:
        from cemctl.db.outdated import outdated_runs

        stale = outdated_runs(engine, [r["run_id"] for r in out if r["state"] in ("done", "diverged")])
        for r in out:
            r["outdated"] = r["run_id"] in stale
    if arms:
        _add_arms(out, metas, experiment, per_experiment)
    for r in out:
        r["history"], r["previous_test_loss"], r["previous_code_fingerprint"] = "", None, None
    if history and out:
        _add_history(engine, out)
    return RunRecords(out, metas, need_config)


def history_of(engine: "Engine", run_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """{run id: its earlier results (oldest first): folder, state, test_loss, val_loss, code_fingerprint,
    set_aside_at}} from `result_history` (the results kept in the run's set-aside folders)."""
    from sqlalchemy import select

    from cemctl.db.engine import read_session
    from cemctl.db.models import ResultHistory

    out: dict[str, list[dict[str, Any]]] = {}
    ids = list(dict.fromkeys(run_ids))
    cols = (ResultHistory.run_id, ResultHistory.folder, ResultHistory.state, ResultHistory.test_loss,
            ResultHistory.val_loss, ResultHistory.code_fingerprint, ResultHistory.set_aside_at)
    with read_session(engine) as s:
        for i in range(0, len(ids), 500):
            for row in s.execute(select(*cols).where(ResultHistory.run_id.in_(ids[i:i + 500]))):
                out.setdefault(row[0], []).append(dict(zip(("run_id", "folder", "state", "test_loss", "val_loss",
                                                            "code_fingerprint", "set_aside_at"), row)))
    for rows in out.values():
        rows.sort(key=lambda h: (h["set_aside_at"] or 0, h["folder"]))
    return out


def _add_history(engine: "Engine", out: list[dict[str, Any]]) -> None:
    from cemctl.records import formats as F

    hist = history_of(engine, [r["run_id"] for r in out])
    for r in out:
        rows = hist.get(r["run_id"])
        if not rows:
            continue
        r["history"] = "; ".join(f"{F.timestamp(h['set_aside_at'])}: {h['state']}, test {F.loss(h['test_loss'])}"
                                 f" (code {h['code_fingerprint'] or 'unknown'})" for h in rows)
        r["previous_test_loss"] = rows[-1]["test_loss"]
        r["previous_code_fingerprint"] = rows[-1]["code_fingerprint"]


@dataclass
class Summary:
    """What a table of an experiment's runs needs besides the rows it shows (`summarize`)."""

    counts: dict[str, int] = field(default_factory=dict)  # state -> runs (every run of it)
    total: int = 0
    picked: list[str] = field(default_factory=list)  # the run ids shown, in priority order (at most the limit)
    done_wall_s: list[float] = field(default_factory=list)  # the wall time of every done run (a grid's ETA)


def summarize(engine: "Engine", experiment: str | None = None, *, scale: str | None = None, limit: int = 50,
              priority: dict[str, int] | None = None) -> dict[str, Summary]:
    """{experiment name (NO_EXPERIMENT for runs no experiment links): Summary} in two queries, without reading
    every run: the runs counted by state (the same runs `load_records` returns: a run an edited grid left before
    it ran is not counted) and the `limit` runs shown first (by `priority` of their state, then grid order).
    `cemctl status` reads only those through `load_records(run_ids=...)`, so a 10,000-run project costs no more
    than a small one."""
    from sqlalchemy import case, func, or_, select

    from cemctl.db.engine import read_session
    from cemctl.db.models import Experiment, ExperimentRun, Result, Run
    from cemctl.db.runs import in_grid_case, join_latest, latest_plans

    order = case(priority or {}, value=Run.state, else_=len(priority or {}) + 1)
    latest = latest_plans()
    links = join_latest(select(
        ExperimentRun.experiment_id.label("eid"), ExperimentRun.run_id.label("rid"),
        func.max(in_grid_case(latest)).label("in_grid"), func.min(ExperimentRun.position).label("position")), latest)
    if scale is not None:
        links = links.where(ExperimentRun.scale == scale)
    links = links.group_by(ExperimentRun.experiment_id, ExperimentRun.run_id).subquery()
    kept = or_(links.c.in_grid == 1, Run.state.in_(ENDED_STATES))
    out: dict[str, Summary] = {}
    with read_session(engine) as s:
        names = dict(s.execute(select(Experiment.id, Experiment.name)).all())
        if experiment is not None and experiment not in names.values():
            raise _unknown(engine, experiment)
        eids = [i for i, n in names.items() if experiment is None or n == experiment]
        # One pass over the kept links (eid, run, state, grid position): the counts and the runs shown come from
        # the same rows (two queries, a GROUP BY and a window, read the links subquery twice: 2x the time at 10k).
        rank = priority or {}
        last = len(rank) + 1
        shown: dict[int, list[tuple[int, int, str]]] = {}
        for eid, rid, state, position, wall_s in s.execute(
                select(links.c.eid, links.c.rid, Run.state, links.c.position, Result.wall_time_s)
                .join(Run, Run.id == links.c.rid).outerjoin(Result, Result.run_id == links.c.rid)
                .where(kept, links.c.eid.in_(eids))):
            sm = out.setdefault(names[eid], Summary())
            sm.counts[state] = sm.counts.get(state, 0) + 1
            sm.total += 1
            if state == "done" and isinstance(wall_s, (int, float)) and math.isfinite(wall_s) and wall_s > 0:
                sm.done_wall_s.append(float(wall_s))
            if limit > 0:
                shown.setdefault(eid, []).append((rank.get(state, last), position or 0, rid))
        for eid, rows in shown.items():
            out[names[eid]].picked = [rid for _, _, rid in sorted(rows)[:limit]]
        if experiment is None and scale is None:
            lone = Run.id.not_in(select(ExperimentRun.run_id))
            for state, n in s.execute(select(Run.state, func.count()).where(lone).group_by(Run.state)):
                sm = out.setdefault(NO_EXPERIMENT, Summary())
                sm.counts[state] = n
                sm.total += n
            if NO_EXPERIMENT in out and limit > 0:
                out[NO_EXPERIMENT].picked = list(s.scalars(select(Run.id).where(lone)
                                                           .order_by(order, Run.created_at).limit(limit)))
    return out


def _axes_of(text: Any) -> dict[str, Any]:
    try:
        axes = json.loads(text or "{}")
    except ValueError:
        return {}
    return axes if isinstance(axes, dict) else {}


def _link_fields(rec: dict[str, Any], row: Any, in_grid: bool, root: str | None) -> None:
    rec["scale"] = row[1] or ""
    rec["position"] = row[2] or 0
    rec["_axes"] = _axes_of(row[3])
    try:
        marks = json.loads(row[4]) if row[4] and row[4] != "[]" else []
    except ValueError:
        marks = []
    rec["marks"] = "; ".join(str(m) for m in marks) if isinstance(marks, list) else ""
    rec["in_grid"] = in_grid
    rec["run_dir"] = f"{root}{os.sep}{rec['run_id']}" if root is not None else None
    if not in_grid:
        rec["reason"] = NOT_IN_GRID + (f"; {rec['reason']}" if rec["reason"] else "")


ENV_COLUMNS = ("cpu_model", "gpu_model", "device", "torch_version", "python_version", "cemctl_version", "cuda_version",
               "code_snapshot", "peak_host_rss_bytes", "peak_gpu_allocated_bytes")  # catalogue source "environment"


def _record(row: Sequence[Any], cols: Sequence[Any], *, results: bool, need_config: bool, tags: bool,
            now: float, environment: bool = False, extras: bool = True) -> dict[str, Any]:
    (rid, state, reason, last_step, total_steps, tokens, train_loss, val_loss, rate, started, finished, heartbeat,
     executor, job_id, attempts, error, host, _created, params, params_ne, fpt, pace_time_s, last_event) = row[:23]
    i = 23
    res: dict[str, Any] = {}
    result_json = None
    if results:
        names = ("r_state", "test_loss", "test_ppl", "val_loss", "val_ppl", "params_total", "params_non_embedding",
                 "flops_per_token", "train_flops", "tokens", "steps", "wall_time_s", "error", "diverged_step",
                 "code_fingerprint")
        res = dict(zip(names, row[i:i + len(names)]))
        i += len(names)
        if extras:
            result_json = row[i]
            i += 1
    config_json = None
    if need_config:
        config_json = row[i]
        i += 1
    tags_json = notes_json = None
    if tags:
        tags_json, notes_json = row[i], row[i + 1]
        i += 2
    env = dict(zip(ENV_COLUMNS, row[i:i + len(ENV_COLUMNS)])) if environment else {}
    has_result = results and res.get("r_state") is not None
    finished_run = state in RESULT_STATES
    rec: dict[str, Any] = {
        "run_id": rid, "experiment": "", "scale": "", "position": 0, "in_grid": True, "marks": "",
        "arm": None, "arm_label": None, "state": state,
        "error": res.get("error") if has_result else error,  # a finished run's own (an earlier attempt's: not)
        "attempts": attempts or 0, "executor": executor, "job_id": job_id,
        "job": f"{executor}:{job_id}" if executor and job_id else executor, "host": host, "run_dir": None,
        "total_steps": total_steps,
        "train_loss": train_loss,
        "started_at": started, "finished_at": finished, "heartbeat_at": heartbeat, "last_event_at": last_event,
    }
    step = (res.get("steps") if has_result and finished_run else None) or last_step
    rec["step"] = step
    rec["progress"] = 1.0 if state == "done" else (min(1.0, step / total_steps) if step is not None and total_steps
                                                   else None)
    all_tokens = (res.get("tokens") if has_result else None)
    rec["tokens"] = all_tokens if all_tokens is not None else tokens
    rec["val_loss"] = res.get("val_loss") if has_result and res.get("val_loss") is not None else val_loss
    rec["tokens_per_s"] = rate if state == "running" else None
    wall = res.get("wall_time_s") if has_result else None
    rec["avg_tokens_per_s"] = (all_tokens / wall if finished_run and has_result and all_tokens and wall else None)
    rec["elapsed_s"] = elapsed_s(state, started=started, finished=finished, heartbeat=heartbeat,
                                 last_event=last_event, now=now, wall=wall)
    rec["eta_s"] = run_eta_s(state, last_step, total_steps, time_s=pace_time_s, tokens=tokens, tokens_per_s=rate)
    text = rec["error"] or (reason if state in FAILED_STATES else "")
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    rec["reason"] = lines[-1] if lines else ""
    for k in ("test_loss", "test_ppl", "val_ppl", "train_flops", "wall_time_s", "diverged_step", "code_fingerprint"):
        rec[k] = res.get(k) if has_result else None
    rec["params_total"] = (res.get("params_total") if has_result else None) or params
    rec["params_non_embedding"] = (res.get("params_non_embedding") if has_result else None) or params_ne
    rec["flops_per_token"] = (res.get("flops_per_token") if has_result else None) or fpt
    extras = {}
    if has_result and result_json:
        try:
            extras = json.loads(result_json)
        except ValueError:
            extras = {}
    for k in ("test_rmse", "val_rmse", "bayes_rmse"):
        v = extras.get(k) if isinstance(extras, dict) else None
        rec[k] = v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    rec["outdated"] = False
    if need_config:
        from cem_core.config import flatten

        try:
            cfg = json.loads(config_json or "{}")
        except ValueError:
            cfg = {}
        rec.update(flatten(cfg) if isinstance(cfg, dict) else {})
    for k in ENV_COLUMNS:
        rec[k] = env.get(k)
    rec["note"] = ""
    if tags:
        try:
            t = json.loads(tags_json or "{}")
            n = json.loads(notes_json or "[]")
        except ValueError:
            t, n = {}, []
        if isinstance(t, dict):
            rec.update({f"tag.{k}": str(v) for k, v in t.items()})
        if isinstance(n, list):
            rec["note"] = " | ".join(str(x.get("text", "")) for x in n if isinstance(x, dict))
    return rec


def _add_arms(out: list[dict[str, Any]], metas: dict[str, ExperimentMeta], experiment: str | None,
              per_experiment: bool) -> None:
    """`arm` and `arm_label` of each record: per experiment (its nuisance keys, its axes order) when records are per
    experiment, else over everything loaded with the default nuisance (the seed)."""
    from cemctl.records.labels import arm_labels

    groups: dict[str, list[dict[str, Any]]] = {}
    for r in out:
        groups.setdefault(r["_experiment"] if (per_experiment or experiment is not None) else "", []).append(r)
    for name, recs in groups.items():
        meta = metas.get(name)
        nuisance = meta.nuisance if meta is not None else ("train.seed",)
        order = meta.axes if meta is not None else []
        ids, labels = arm_labels(recs, nuisance=nuisance, order=order)
        for r, aid, label in zip(recs, ids, labels):
            r["arm"], r["arm_label"] = aid, label


def public_keys(rec: dict[str, Any]) -> Iterable[str]:
    return (k for k in rec if not k.startswith("_"))


def records_frame(records: Sequence[dict[str, Any]]) -> "pd.DataFrame":
    """Records as a DataFrame: the run fields in catalogue order, the config keys (task first, then dotted,
    alphabetical), tag columns; numbers typed (nullable Int64 for integer fields, float for the rest)."""
    import pandas as pd

    from cemctl.records.fields import RUN_FIELDS

    run_names = [f.name for f in RUN_FIELDS]
    seen: dict[str, None] = {}
    for r in records:
        for k in public_keys(r):
            seen.setdefault(k, None)
    config = sorted((k for k in seen if ("." in k and not k.startswith("tag.")) or k == "task"),
                    key=lambda k: (k != "task", k))
    tag_cols = sorted(k for k in seen if k.startswith("tag."))
    columns = [c for c in run_names if c in seen or not records] + config + tag_cols
    columns += [k for k in seen if k not in set(columns)]
    def num(v: Any) -> Any:
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    kinds = {f.name: f for f in RUN_FIELDS}
    data: dict[str, Any] = {}
    for c in columns:  # typed column by column, in one pass (a DataFrame op per field costs more than the data)
        f = kinds.get(c)
        vals = [r.get(c) for r in records]
        if f is not None and f.kind in ("int", "count") and c != "train_flops":
            data[c] = pd.array([num(v) for v in vals], dtype="Int64")
        elif f is not None and f.numeric:
            data[c] = pd.array([num(v) for v in vals], dtype="float64")
        elif f is not None and f.kind == "bool":
            data[c] = [bool(v) for v in vals]
        elif f is not None:
            data[c] = pd.Series(vals, dtype=object)  # text as it is (None stays None)
        else:
            data[c] = vals  # config keys and tags: pandas infers (float for numbers, NaN where missing)
    frame = pd.DataFrame(data, columns=columns)
    return frame
