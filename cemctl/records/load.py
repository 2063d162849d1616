"""Reading run records from the database: the one query of a run's facts (`load_records`).

    recs = load_records(engine, "fig2c", scale="cpu")              # one record per run of the experiment
    recs = load_records(engine, None, per_experiment=True)          # one per (experiment, run): `cemctl status`
    recs.records[0].test_loss, recs.records[0]["model.attn_steps"], recs.records[0]["tag.phase"]
    recs.frame()                                                    # the same as a pandas DataFrame

Every command, figure, export, the API and the dashboard read runs through `load_records`;
`cemctl.records.where` filters the same records with the same field names everywhere.

A record is a `cemctl.records.record.RunRecord`: every run field of the catalogue (None where
the run has no value yet), the run's resolved config (dotted keys), its tags (`tag.NAME`) and
the grid's varied keys (`axes`). The query is SQL text run by the standard library's `sqlite3`
for a SQLite file and by SQLAlchemy for anything else (`cemctl.db.read`): one definition, no ORM.

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
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from cem_core.errors import CemError
from cem_core.runfiles import ENDED_STATES, RUN_STATES, RunState, number
from cemctl.db.read import IN_GRID, LATEST_PLANS
from cemctl.records.progress import elapsed_s, run_eta_s
from cemctl.records.record import EXTRA_VALUES, RUN_FIELDS, RunRecord

FIELDS = {f.name: f for f in RUN_FIELDS}

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from sqlalchemy.engine import Engine

    from cemctl.db.read import Reader

NO_EXPERIMENT = "(no experiment)"
NOT_IN_GRID = "no longer in the grid (planned by an earlier version of the grid file)"


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
        x: str | None = self._opts().x
        return x

    @property
    def hue(self) -> tuple[str, ...]:
        return tuple(self._opts().hue)

    @property
    def metric(self) -> str:
        return str(self._opts().metric)


@dataclass
class RunRecords:
    records: list[RunRecord]
    experiments: dict[str, ExperimentMeta] = field(default_factory=dict)
    config_loaded: bool = True

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[RunRecord]:
        return iter(self.records)

    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.records]

    def frame(self) -> "pd.DataFrame":
        return records_frame(self.records)

    def where(self, conds: Sequence[Any]) -> "RunRecords":
        from cemctl.records.where import matches

        if not conds:
            return self
        return RunRecords([r for r in self.records if matches(conds, r)], self.experiments, self.config_loaded)


# The record's query: the one definition of how a run's facts are read from the database, SQL that SQLite and
# PostgreSQL both run (`cemctl.db.read`). Each column is labelled with the name the record reads it by.
RUN_COLUMNS = """r.id AS run_id, r.state, r.state_reason, r.last_step, r.total_steps, r.tokens AS run_tokens,
    r.last_train_loss, r.last_val_loss, r.tokens_per_s AS run_tokens_per_s, r.started_at, r.finished_at,
    r.heartbeat_at, r.executor, r.job_id, r.attempts, r.error AS run_error, r.host, r.created_at,
    r.params_total AS run_params_total, r.params_non_embedding AS run_params_non_embedding,
    r.flops_per_token AS run_flops_per_token, r.config_json,
    CASE WHEN r.state = 'running' THEN (SELECT m.time_s FROM metrics m WHERE m.run_id = r.id AND m.kind = 'train'
        AND m.step = r.last_step LIMIT 1) END AS pace_time_s,
    CASE WHEN r.state NOT IN ('running', 'done', 'diverged', 'failed') THEN (SELECT MAX(ev.time) FROM run_events ev
        WHERE ev.run_id = r.id AND ev.source = 'file') END AS last_event_at,
    res.state AS result_state, res.test_loss, res.test_ppl, res.val_loss, res.val_ppl, res.params_total,
    res.params_non_embedding, res.flops_per_token, res.train_flops, res.tokens, res.steps, res.wall_time_s,
    res.error, res.diverged_step, res.code_fingerprint, res.result_json, t.tags_json, t.notes_json,
    env.cpu_model, env.gpu_model, env.device, env.torch_version, env.python_version, env.cemctl_version,
    env.cuda_version, env.code_snapshot, env.peak_host_rss_bytes, env.peak_gpu_allocated_bytes"""
RUN_JOINS = """LEFT JOIN results res ON res.run_id = r.id LEFT JOIN run_tags t ON t.run_id = r.id
    LEFT JOIN run_environment env ON env.run_id = r.id"""
LINKED_SQL = f"""SELECT er.experiment_id AS experiment_id, er.scale AS link_scale, er.position AS link_position,
    er.axes_json, er.marks_json, er.planned_at, {IN_GRID} AS link_in_grid, {RUN_COLUMNS}
    FROM experiment_runs er JOIN {LATEST_PLANS} JOIN runs r ON r.id = er.run_id {RUN_JOINS}
    WHERE 1 = 1"""  # the selection is added: AND ...
LONE_SQL = f"""SELECT {RUN_COLUMNS} FROM runs r {RUN_JOINS}
    WHERE r.id NOT IN (SELECT run_id FROM experiment_runs)"""
EXPERIMENTS_SQL = "SELECT id, name, figure, grid_path, description, grid_text FROM experiments ORDER BY name"
ENV_COLUMNS = tuple(f.name for f in RUN_FIELDS if f.source == "environment")


def load_records(source: "Engine | Reader | str", experiment: str | None = None, *, scale: str | None = None,
                 per_experiment: bool = False, per_scale: bool = False, arms: bool = True,
                 runs_root: Path | str | None = None, now: float | None = None,
                 run_ids: Sequence[str] | None = None, where: Sequence[Any] = ()) -> RunRecords:
    """The records of the runs (see the module docstring): every field of the catalogue, the config, the tags.
    `source`: an engine, a reader (`cemctl.db.read`) or a database URL. `runs_root`: the folder `run_dir` is made
    from (default: the one the database recorded). Raises CemError for an unknown experiment (listing the known
    ones). `per_scale` (with `experiment=None`): one record per run and scale it was planned at (`cemctl claims`
    across scales). `run_ids`: only these runs (a run page, the rows `cemctl status` shows); their arms are
    labelled among their experiments' runs all the same. `where`: the runs meeting these conditions
    (`cemctl.records.where`); those the database can test are pushed into the query (`pushdown`), so a selective
    filter reads only what it selects. `arms=False`: leave `arm` and `arm_label` empty."""
    from cemctl.db.read import open_reader
    from cemctl.db.roots import recorded_runs_root

    reader = open_reader(source)
    now = time.time() if now is None else now
    wanted = list(dict.fromkeys(run_ids)) if run_ids is not None else None
    with reader.snapshot():
        exps = {row[0]: row for row in reader.rows(EXPERIMENTS_SQL)}
        if experiment is not None and experiment not in {e[1] for e in exps.values()}:
            raise _unknown(exps, experiment)
        pushed = pushdown(where, reader.dialect)
        linked = _query(reader, LINKED_SQL, experiment, exps, scale, wanted, pushed)
        lone = _query(reader, LONE_SQL, None, exps, None, wanted, [p for p in pushed if "er." not in p[0]]) \
            if experiment is None and scale is None else []
        lone.sort(key=lambda r: r["created_at"] or 0.0)
        root = Path(runs_root) if runs_root is not None else recorded_runs_root(reader)
        root_text = str(Path(os.path.abspath(root))) if root is not None else None
        # One link per (experiment, run) (per_experiment or one experiment) or per run: the latest plan's, in-grid
        # first.
        linked.sort(key=lambda r: (-(r["link_in_grid"] or 0), -(r["planned_at"] or 0.0), r["link_scale"] or "",
                                   r["link_position"] or 0))
        chosen: dict[Any, dict[str, Any]] = {}
        names: dict[Any, list[str]] = {}
        one_exp = per_experiment or experiment is not None
        for row in linked:
            eid, rid = row["experiment_id"], row["run_id"]
            shared = (rid, row["link_scale"]) if per_scale else rid  # one record when experiments are joined
            listed = names.setdefault(shared, [])
            if exps[eid][1] not in listed:
                listed.append(exps[eid][1])
            chosen.setdefault((eid, rid) if one_exp else shared, row)
        out: list[RunRecord] = []
        for row in sorted(chosen.values(), key=lambda r: (exps[r["experiment_id"]][1], r["link_position"] or 0)):
            rec = _record(row, now, root_text)
            if not row["link_in_grid"] and not RunState(rec.state).ended:
                continue  # left the grid before it ran: it never will
            name = exps[row["experiment_id"]][1]
            shared = (rec.run_id, row["link_scale"]) if per_scale else rec.run_id
            rec.experiment = name if one_exp else ", ".join(sorted(names.get(shared, [name])))
            rec.group = name
            _link(rec, row)
            out.append(rec)
        for row in lone:
            rec = _record(row, now, root_text)
            rec.group = NO_EXPERIMENT if per_experiment else ""
            out.append(rec)
        metas = {e[1]: ExperimentMeta(e[1], list(dict.fromkeys(k for r in out if r.group == e[1] for k in r.axes)),
                                      e[2] or "", e[3] or "", e[4] or "", e[5] or "")
                 for e in exps.values() if experiment is None or e[1] == experiment}
        _add_outdated(reader, out)
        _add_history(reader, out)
        if arms and out:
            _add_arms(reader, out, metas, experiment, per_experiment, scale,
                      labelled_alone=wanted is None and not pushed)
    if where:
        from cemctl.records.where import matches

        out = [r for r in out if matches(where, r)]  # what the query could not test (or tested loosely)
    return RunRecords(out, metas, True)


def _query(reader: "Reader", sql: str, experiment: str | None, exps: dict[Any, Any], scale: str | None,
           wanted: list[str] | None, pushed: Sequence[tuple[str, dict[str, Any]]] = ()) -> list[dict[str, Any]]:
    """The rows of `sql` (LINKED_SQL or LONE_SQL: each ends in a WHERE clause) for one experiment, one scale, these
    run ids (500 at a time), meeting the `pushed` conditions."""
    where, params = [p[0] for p in pushed], {k: v for p in pushed for k, v in p[1].items()}
    if experiment is not None:
        where.append("er.experiment_id = :eid")
        params["eid"] = next(i for i, e in exps.items() if e[1] == experiment)
    if scale is not None:
        where.append("er.scale = :scale")
        params["scale"] = scale
    if wanted is None:
        return reader.named(sql + "".join(f" AND {w}" for w in where), **params)
    rows: list[dict[str, Any]] = []
    for i in range(0, len(wanted), 500):
        rows += reader.named(sql + "".join(f" AND {w}" for w in [*where, "r.id IN (:ids)"]), **params,
                             ids=wanted[i:i + 500])
    return rows


def _unknown(exps: dict[Any, Any], name: str) -> CemError:
    known = ", ".join(e[1] for e in exps.values()) or "none yet; run cemctl plan FILE"
    return CemError(f"experiment: unknown experiment {name!r} (known: {known})")


def _record(row: dict[str, Any], now: float, root: str | None) -> RunRecord:
    """One run's record from its row of the record's query: every derived field by one rule."""
    from cem_core.identity import flatten
    state = row["state"]
    run_state = RunState(state) if state in RUN_STATES else RunState.PLANNED
    rec = RunRecord(
        run_id=row["run_id"], state=state, attempts=row["attempts"] or 0, executor=row["executor"],
        job_id=row["job_id"], host=row["host"], total_steps=row["total_steps"], train_loss=row["last_train_loss"],
        started_at=row["started_at"], finished_at=row["finished_at"], heartbeat_at=row["heartbeat_at"],
        last_event_at=row["last_event_at"], step=row["last_step"], tokens=row["run_tokens"],
        val_loss=row["last_val_loss"], error=row["run_error"], params_total=row["run_params_total"],
        params_non_embedding=row["run_params_non_embedding"], flops_per_token=row["run_flops_per_token"],
        **{k: row[k] for k in ENV_COLUMNS})
    rec.job = f"{rec.executor}:{rec.job_id}" if rec.executor and rec.job_id else rec.executor
    rec.run_dir = f"{root}{os.sep}{rec.run_id}" if root is not None else None
    if row["result_state"] is not None:
        rec.apply_result(_db_result(row))
        if not run_state.has_result:  # an earlier attempt's result: its steps and error are not this attempt's
            rec.step, rec.error = row["last_step"] or rec.step, row["run_error"]
    rec.tokens_per_s = row["run_tokens_per_s"] if state == "running" else None
    rec.progress = 1.0 if state == "done" else (min(1.0, rec.step / rec.total_steps)
                                                if rec.step is not None and rec.total_steps else None)
    rec.elapsed_s = elapsed_s(state, started=rec.started_at, finished=rec.finished_at, heartbeat=rec.heartbeat_at,
                              last_event=rec.last_event_at, now=now, wall=rec.wall_time_s)
    rec.eta_s = run_eta_s(state, row["last_step"], rec.total_steps, time_s=row["pace_time_s"], tokens=row["run_tokens"],
                          tokens_per_s=row["run_tokens_per_s"])
    rec.avg_tokens_per_s = _avg_rate(rec, run_state)
    text = rec.error or (row["state_reason"] if run_state.troubled else "")
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    rec.reason = lines[-1] if lines else ""
    try:
        cfg = json.loads(row["config_json"] or "{}")
    except ValueError:
        cfg = {}
    rec.config = flatten(cfg) if isinstance(cfg, dict) else {}
    if row["tags_json"] not in (None, "", "{}") or row["notes_json"] not in (None, "", "[]"):
        try:
            tags, notes = json.loads(row["tags_json"] or "{}"), json.loads(row["notes_json"] or "[]")
        except ValueError:
            tags, notes = {}, []
        if isinstance(tags, dict):
            rec.tags = {str(k): str(v) for k, v in tags.items()}
        if isinstance(notes, list):
            rec.note = " | ".join(str(x.get("text", "")) for x in notes if isinstance(x, dict))
    return rec


def _avg_rate(rec: RunRecord, state: RunState) -> float | None:
    """Average training speed: tokens over the wall time, once finished."""
    took = rec.wall_time_s if state.has_result else None
    return rec.tokens / took if rec.tokens and took else None


def _db_result(row: dict[str, Any]) -> Any:
    """The result the database recorded (ingest kept what `RunResult` read: usable numbers), with the task's extras
    from the JSON it keeps, as `RunRecord.apply_result` reads a `RunResult`."""
    from types import SimpleNamespace

    text = row["result_json"] or ""
    extras: dict[str, Any] = {}
    if any(name in text for name in EXTRA_VALUES):  # only a task that adds them (the GP study) pays for the parse
        try:
            found = json.loads(text)
            extras = {k: found.get(k) for k in EXTRA_VALUES} if isinstance(found, dict) else {}
        except ValueError:
            pass
    return SimpleNamespace(extras=extras, **{k: row[k] for k in RESULT_COLUMNS})


RESULT_COLUMNS = ("test_loss", "test_ppl", "val_loss", "val_ppl", "params_total", "params_non_embedding",
                  "flops_per_token", "train_flops", "tokens", "steps", "wall_time_s", "error", "diverged_step",
                  "code_fingerprint")


def _link(rec: RunRecord, row: dict[str, Any]) -> None:
    rec.scale = row["link_scale"] or ""
    rec.position = row["link_position"] or 0
    try:
        axes = json.loads(row["axes_json"] or "{}")
    except ValueError:
        axes = {}
    rec.axes = axes if isinstance(axes, dict) else {}
    try:
        marks = json.loads(row["marks_json"]) if row["marks_json"] and row["marks_json"] != "[]" else []
    except ValueError:
        marks = []
    rec.marks = "; ".join(str(m) for m in marks) if isinstance(marks, list) else ""
    rec.in_grid = bool(row["link_in_grid"])
    if not rec.in_grid:
        rec.reason = NOT_IN_GRID + (f"; {rec.reason}" if rec.reason else "")


def _add_outdated(reader: "Reader", out: list[RunRecord]) -> None:
    from cemctl.db.outdated import outdated_runs

    stale = outdated_runs(reader, [r.run_id for r in out if RunState(r.state).final]) if out else {}
    for r in out:
        r.outdated = r.run_id in stale


def history_of(source: "Engine | Reader", run_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """{run id: its earlier results (oldest first): folder, state, test_loss, val_loss, code_fingerprint,
    set_aside_at}} from `result_history` (the results kept in the run's set-aside folders)."""
    from cemctl.db.read import open_reader

    reader = open_reader(source)
    out: dict[str, list[dict[str, Any]]] = {}
    ids = list(dict.fromkeys(run_ids))
    for i in range(0, len(ids), 500):
        for row in reader.named("SELECT run_id, folder, state, test_loss, val_loss, code_fingerprint, set_aside_at "
                                "FROM result_history WHERE run_id IN (:ids)", ids=ids[i:i + 500]):
            out.setdefault(row["run_id"], []).append(row)
    for rows in out.values():
        rows.sort(key=lambda h: (h["set_aside_at"] or 0, h["folder"]))
    return out


def _add_history(reader: "Reader", out: list[RunRecord]) -> None:
    from cemctl.records import formats as F

    if not reader.rows("SELECT 1 FROM result_history LIMIT 1"):
        return
    hist = history_of(reader, [r.run_id for r in out])
    for r in out:
        rows = hist.get(r.run_id)
        if not rows:
            continue
        r.history = "; ".join(f"{F.timestamp(h['set_aside_at'])}: {h['state']}, test {F.loss(h['test_loss'])}"
                              f" (code {h['code_fingerprint'] or 'unknown'})" for h in rows)
        r.previous_test_loss = rows[-1]["test_loss"]
        r.previous_code_fingerprint = rows[-1]["code_fingerprint"]


@dataclass
class Summary:
    """What a table of an experiment's runs needs besides the rows it shows (`summarize`)."""

    counts: dict[str, int] = field(default_factory=dict)  # state -> runs (every run of it)
    total: int = 0
    picked: list[str] = field(default_factory=list)  # the run ids shown, in priority order (at most the limit)
    done_wall_s: list[float] = field(default_factory=list)  # every done run's wall time (the ETA of runs left)


SUMMARY_SQL = f"""SELECT er.experiment_id, er.run_id, er.position, r.state, {IN_GRID} AS in_grid
    FROM experiment_runs er JOIN {LATEST_PLANS} JOIN runs r ON r.id = er.run_id"""
DONE_WALL_SQL = """SELECT er.experiment_id, res.wall_time_s FROM experiment_runs er JOIN runs r ON r.id = er.run_id
    JOIN results res ON res.run_id = r.id WHERE r.state = 'done' AND er.experiment_id IN (:eids)"""


def summarize(source: "Engine | Reader", experiment: str | None = None, *, scale: str | None = None,
              limit: int = 50, priority: dict[str, int] | None = None) -> dict[str, Summary]:
    """{experiment name (NO_EXPERIMENT for runs no experiment links): Summary} in one pass over the links, without
    reading every run: the runs counted by state (the same runs `load_records` returns: a run an edited grid left
    before it ran is not counted), the `limit` runs shown first (by `priority` of their state, then grid order) and,
    for an experiment with runs queued or running, every done run's wall time (its ETA). `cemctl status` reads only
    the runs shown through `load_records(run_ids=...)`, so a 10,000-run project costs little more than a small one."""
    from cemctl.db.read import open_reader

    reader = open_reader(source)
    rank = priority or {}
    last = len(rank) + 1
    out: dict[str, Summary] = {}
    with reader.snapshot():
        names = dict(reader.rows("SELECT id, name FROM experiments"))
        if experiment is not None and experiment not in names.values():
            raise _unknown({i: (i, n) for i, n in names.items()}, experiment)
        where, params = [], {}
        if scale is not None:
            where.append("er.scale = :scale")
            params["scale"] = scale
        if experiment is not None:
            where.append("er.experiment_id = :eid")
            params["eid"] = next(i for i, n in names.items() if n == experiment)
        rows = reader.rows(SUMMARY_SQL + (" WHERE " + " AND ".join(where) if where else ""), **params)
        links: dict[tuple[Any, str], tuple[bool, int, str]] = {}  # (experiment, run) -> (in grid, position, state)
        for eid, rid, position, state, in_grid in rows:
            have = links.get((eid, rid))
            if have is not None:  # linked by two plans of the experiment (scales, --set): in the grid if either is
                in_grid, position = in_grid or have[0], min(have[1], position or 0)
            links[(eid, rid)] = (in_grid, position or 0, state)
        shown: dict[int, list[tuple[int, int, str]]] = {}
        for (eid, rid), (in_grid, position, state) in links.items():
            if not in_grid and state not in ENDED_STATES:
                continue  # left the grid before it ran
            sm = out.get(names[eid]) or out.setdefault(names[eid], Summary())
            sm.counts[state] = sm.counts.get(state, 0) + 1
            sm.total += 1
            if limit > 0:
                shown.setdefault(eid, []).append((rank.get(state, last), position, rid))
        for eid, picks in shown.items():
            out[names[eid]].picked = [rid for _, _, rid in sorted(picks)[:limit]]
        busy = [i for i, n in names.items() if n in out and (out[n].counts.get("running") or out[n].counts.get("queued"))]
        if busy:
            for eid, wall_s in reader.rows(DONE_WALL_SQL, eids=busy):
                if number(wall_s) is not None and wall_s > 0:
                    out[names[eid]].done_wall_s.append(float(wall_s))
        linked = len({rid for _, rid in links})
        if experiment is None and scale is None and reader.rows("SELECT COUNT(*) FROM runs")[0][0] > linked:
            lone = [(rid, state) for rid, state in reader.rows(
                "SELECT id, state FROM runs WHERE id NOT IN (SELECT run_id FROM experiment_runs) ORDER BY created_at")]
            if lone:
                sm = out.setdefault(NO_EXPERIMENT, Summary())
                for _, state in lone:
                    sm.counts[state] = sm.counts.get(state, 0) + 1
                sm.total += len(lone)
                if limit > 0:
                    order = sorted(range(len(lone)), key=lambda i: (rank.get(lone[i][1], last), i))
                    sm.picked = [lone[i][0] for i in order[:limit]]
    return out


def _add_arms(reader: "Reader", out: list[RunRecord], metas: dict[str, ExperimentMeta], experiment: str | None,
              per_experiment: bool, scale: str | None, *, labelled_alone: bool) -> None:
    """`arm` and `arm_label` of each record: per experiment (its nuisance keys, its axes order) when records are per
    experiment, else over everything loaded with the default nuisance (the seed). Labels are made among every run of
    the group, loaded or not (`labelled_alone=False`: the arms of the others are read, once per state of the
    database), so a label never depends on which runs were asked for."""
    from cemctl.records.labels import arm_key, arm_table, arms_of

    by_group = per_experiment or experiment is not None
    groups: dict[str, list[RunRecord]] = {}
    for r in out:
        groups.setdefault(r.group if by_group else "", []).append(r)
    for name, recs in groups.items():
        meta = metas.get(name)
        nuisance = meta.nuisance if meta is not None else ("train.seed",)
        order = meta.axes if meta is not None else []
        keys = [arm_key(r.config, nuisance) if r.config else None for r in recs]
        table = None
        if not labelled_alone:
            key = (reader.state(), name, scale, nuisance, tuple(order))
            table = _ARM_TABLES.get(key) if key[0] is not None else None
            if table is None:
                loaded = {r.run_id: (r.config, k) for r, k in zip(recs, keys) if k is not None}
                configs, known = _group_configs(reader, name, scale, loaded)
                table = arm_table(configs, nuisance=nuisance, order=order, keys=known)
                if key[0] is not None:
                    _ARM_TABLES.clear()  # one state of the database at a time
                    _ARM_TABLES[key] = table
        ids, labels = arms_of([r.config for r in recs], nuisance=nuisance, order=order, table=table, keys=keys)
        for r, aid, label in zip(recs, ids, labels):
            r.arm, r.arm_label = aid, label


_ARM_TABLES: dict[Any, Any] = {}  # the arms of a group, per state of the database (`Reader.state`)


def _group_configs(reader: "Reader", group: str, scale: str | None, loaded: Mapping[str, tuple[dict[str, Any], Any]]
                   ) -> tuple[list[dict[str, Any]], list[Any]]:
    """The configs of every run of a group as `load_records` keeps them: an experiment's (of `scale`), the runs
    no experiment links (NO_EXPERIMENT), or every run (""); with their arm keys where `loaded` knows them (run id:
    (config, arm key), not read again), else None."""
    from cem_core.identity import flatten

    texts: dict[str, Any] = {}
    if group != NO_EXPERIMENT:
        sql = ("SELECT r.id, r.config_json, r.state, " + IN_GRID + " AS in_grid FROM experiment_runs er JOIN "
               + LATEST_PLANS + " JOIN runs r ON r.id = er.run_id JOIN experiments e ON e.id = er.experiment_id "
               "WHERE 1 = 1" + (" AND e.name = :name" if group else "") + (" AND er.scale = :scale" if scale else ""))
        params = {**({"name": group} if group else {}), **({"scale": scale} if scale else {})}
        for rid, text, state, in_grid in reader.rows(sql, **params):
            if in_grid or state in ENDED_STATES:  # else it left the grid before it ran
                texts.setdefault(rid, text)
    if group in ("", NO_EXPERIMENT) and scale is None:
        texts.update(reader.rows("SELECT r.id, r.config_json FROM runs r WHERE r.id NOT IN "
                                 "(SELECT run_id FROM experiment_runs)"))
    configs, keys = [], []
    for rid, text in texts.items():
        if rid in loaded:  # (a config that could not be read is not loaded: read again, skipped)
            configs.append(loaded[rid][0])
            keys.append(loaded[rid][1])
            continue
        try:
            cfg = json.loads(text or "{}")
        except ValueError:
            continue
        if isinstance(cfg, dict):
            configs.append(flatten(cfg))
            keys.append(None)
    return configs, keys


# What the record's query can test itself: a field's SQL (the record holds the column's value), for `pushdown`.
FIELD_SQL = {"run_id": "r.id", "state": "r.state", "executor": "r.executor", "host": "r.host",
             "attempts": "r.attempts", "total_steps": "r.total_steps", "scale": "er.scale",
             "test_loss": "res.test_loss", "test_ppl": "res.test_ppl", "val_ppl": "res.val_ppl",
             "wall_time_s": "res.wall_time_s", "train_flops": "res.train_flops", "diverged_step": "res.diverged_step",
             "code_fingerprint": "res.code_fingerprint"}
_COMPARE = {"=": "=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def pushdown(conds: Sequence[Any], dialect: str) -> list[tuple[str, dict[str, Any]]]:
    """The SQL (with its parameters) of the conditions the database can test: a field of `FIELD_SQL` or (SQLite) a
    numeric config key, compared with `=`, `<`, `<=`, `>`, `>=` or `in`. Each selects at least every run the
    condition does (equal numbers within `where`'s relative 1e-12), never fewer: the records are filtered again by
    `cemctl.records.where.matches`, which decides."""
    from cemctl.records.fields import field

    out: list[tuple[str, dict[str, Any]]] = []
    for i, c in enumerate(conds):
        if c.op not in (*_COMPARE, "in"):
            continue
        if c.key in FIELD_SQL:
            expr, kind = FIELD_SQL[c.key], FIELDS[c.key].kind
        elif dialect == "sqlite" and field(c.key).source == "config" and field(c.key).kind in ("int", "float"):
            expr, kind = f"json_extract(r.config_json, '$.{c.key}')", "float"
        else:
            continue
        values = c.value if c.op == "in" else (c.value,)
        numeric = FIELDS[c.key].numeric if c.key in FIELDS else True
        if any(isinstance(v, bool) or (numeric != isinstance(v, (int, float))) for v in values) \
                or (not numeric and c.op not in ("=", "in")):
            continue  # a value the column cannot hold as written, text compared by order: `matches` alone decides
        parts, params = [], {}
        for j, v in enumerate(values):
            name = f"w{i}_{j}"
            if not numeric or (c.op == "=" or c.op == "in") and isinstance(v, int) and kind in ("int", "count"):
                parts.append(f"{expr} {'=' if c.op == 'in' else _COMPARE[c.op]} :{name}")
                params[name] = v
            elif c.op in ("=", "in"):  # a number equal within 1e-12 relative, as `where` compares
                parts.append(f"{expr} BETWEEN :{name}_lo AND :{name}_hi")
                params[f"{name}_lo"], params[f"{name}_hi"] = v - abs(v) * 2e-12, v + abs(v) * 2e-12
            else:
                parts.append(f"{expr} {_COMPARE[c.op]} :{name}")
                params[name] = v
        out.append(("(" + " OR ".join(parts) + ")", params))
    return out


def frame_columns(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """A runs table's columns: the run fields in catalogue order, the config keys (task first, then dotted,
    alphabetical), the tag columns, then any other key a plain record has."""
    typed = all(isinstance(r, RunRecord) for r in records)
    seen: dict[str, None] = {}
    for r in records:
        if isinstance(r, RunRecord):
            seen.update(dict.fromkeys(r.config))
            seen.update(dict.fromkeys(f"tag.{k}" for k in r.tags))
        else:
            seen.update(dict.fromkeys(k for k in r if not k.startswith("_")))
    config = sorted((k for k in seen if ("." in k and not k.startswith("tag.")) or k == "task"),
                    key=lambda k: (k != "task", k))
    columns = [f.name for f in RUN_FIELDS if typed or f.name in seen or not records] + config + \
        sorted(k for k in seen if k.startswith("tag."))
    return columns + [k for k in seen if k not in set(columns)]


def _columns(records: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> list[Sequence[Any]]:
    """Each column's values, by attribute and by key in one C call per record when every record is a RunRecord."""
    from operator import attrgetter, itemgetter

    if not records or not all(isinstance(r, RunRecord) for r in records):
        return [[r.get(c) for r in records] for c in columns]
    fields = [c for c in columns if c in FIELDS]
    config = [c for c in columns if c not in FIELDS and not c.startswith("tag.")]
    tags = [c for c in columns if c.startswith("tag.")]
    by_field, by_key = attrgetter(*fields), itemgetter(*config) if config else None
    rows = []
    for r in records:
        row = list(by_field(r)) if len(fields) > 1 else [by_field(r)]
        try:
            values = by_key(r.config) if by_key is not None else ()  # type: ignore[attr-defined]
            row += list(values) if len(config) > 1 else [values]
        except KeyError:  # a key another run's config has (a plugin's)
            row += [r.config.get(c) for c in config]  # type: ignore[attr-defined]
        row += [r.tags.get(c[4:]) for c in tags]  # type: ignore[attr-defined]
        rows.append(row)
    at = {c: i for i, c in enumerate([*fields, *config, *tags])}
    transposed = list(zip(*rows))
    return [transposed[at[c]] for c in columns]


def _kind(c: str, vals: Sequence[Any]) -> str:
    """How a column is typed in a frame and written in a CSV: Int64, float, bool, text; a config key or a tag as
    pandas infers it from its values (ints with a gap are floats)."""
    f = FIELDS.get(c)
    if f is not None:
        return ("Int64" if f.kind in ("int", "count") and c != "train_flops" else "float" if f.numeric
                else "bool" if f.kind == "bool" else "text")
    types = set(map(type, vals))
    missing = type(None) in types
    types.discard(type(None))
    if float in types and any(v != v for v in vals if type(v) is float):  # a NaN is a missing value
        missing = True
        if not any(v == v for v in vals if type(v) is float):
            types.discard(float)
    if types == {bool}:
        return "text" if missing else "bool"
    if types and types <= {int, float}:
        return "int" if types == {int} and not missing else "float"
    return "text"


def records_frame(records: Sequence[Mapping[str, Any]]) -> "pd.DataFrame":
    """Records as a DataFrame (`frame_columns`); numbers typed (nullable Int64 for integer fields, float for the
    rest); config keys and tags as pandas infers them."""
    import pandas as pd

    data: dict[str, Any] = {}
    columns = frame_columns(records)
    for c, vals in zip(columns, _columns(records, columns)):  # typed column by column (an op per field is slower)
        f = FIELDS.get(c)
        kind = _kind(c, vals) if f is not None else None
        if kind == "Int64":
            data[c] = pd.array([v if v is None or type(v) is int else number(v, int) for v in vals], dtype="Int64")
        elif kind == "float":
            data[c] = pd.array([v if v is None or type(v) is float else number(v) for v in vals], dtype="float64")
        elif kind == "bool":
            data[c] = [bool(v) for v in vals]
        elif kind == "text":
            data[c] = pd.Series(list(vals), dtype=object)  # text as it is (None stays None)
        else:
            data[c] = list(vals)  # config keys and tags: pandas infers (float for numbers, NaN where missing)
    return pd.DataFrame(data, columns=columns)


def write_records_csv(records: Sequence[Mapping[str, Any]], out: Any) -> None:
    """Records as CSV into the text file `out`, cell for cell what `records_frame(records).to_csv(out, index=False)`
    writes (tests/test_golden_outputs.py), without building the frame or importing pandas (`cemctl export`). The
    csv module writes a float by repr, None as an empty cell, as pandas does: a column is only retyped where the
    frame's type differs from its values' (whole numbers in a float column, a NaN)."""
    import csv

    from functools import partial
    from math import fsum, isfinite
    from operator import is_not

    columns = frame_columns(records)
    cells: list[Sequence[Any]] = []
    for c, vals in zip(columns, _columns(records, columns)):
        kind, types = _kind(c, vals), set(map(type, vals))  # (a column that needs no retyping is written as it is)
        if kind in ("Int64", "int") and not types <= {int, type(None)}:
            vals = [v if v is None or type(v) is int else number(v, int) for v in vals]
        elif kind == "float" and not (types <= {float, type(None)}
                                      and isfinite(fsum(filter(partial(is_not, None), vals)))):
            vals = [v if v is None or (type(v) is float and v - v == 0.0) else number(v) for v in vals]
        elif kind == "bool" and c in FIELDS and types != {bool}:
            vals = [bool(v) for v in vals]
        elif kind == "text" and float in types:
            vals = [None if isinstance(v, float) and v != v else v for v in vals]
        cells.append(vals)
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(zip(*cells))
