"""Rows of the status table from the results database (`cemctl status`).

`refresh` first brings the run directories into the database (the ingest
library, incremental and cheap), then reconciles runs the database still
calls `queued` with their executor: a SLURM job that left `squeue` without
ever starting, or a local orchestrator that is gone, makes the run `stale`
with the reason. `collect_status` reads the run records (`cemctl.records`: one
query; without a selection only the rows shown; no torch, no pandas, no ORM), then
selects, sorts and limits them, so the command only renders.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from cem_core import runfiles
from cem_core.runfiles import FINAL_STATES, RUN_STATES
from cemctl.records.load import NO_EXPERIMENT, ExperimentMeta
from cemctl.records.record import RunRecord

if TYPE_CHECKING:  # pragma: no cover
    from sqlalchemy.engine import Engine

    from cemctl.db.read import Reader

MAX_SYNC_IDS = 20000  # above this, sync everything (one IN list must stay below SQLite's limit)


STATE_PRIORITY = {"running": 0, "stale": 1, "damaged": 2, "failed": 3, "diverged": 4, "queued": 5, "planned": 6,
                  "cancelled": 7, "done": 8}  # with a limit, these states are shown first (then grid order)


@dataclass
class ExperimentStatus:
    """One experiment's runs as `cemctl status` shows them: run records (`cemctl.records`) in grid order."""

    name: str
    runs: list[RunRecord] = field(default_factory=list)
    state_counts: dict[str, int] | None = None  # every run's state (`runs` may be a selection)
    total_runs: int | None = None
    matching: int | None = None  # runs meeting a --state/--where selection (None: no selection)
    selection: str = ""  # that selection, as the user wrote it
    outdated: list[str] = field(default_factory=list)  # every run of it trained by older model code
    meta: ExperimentMeta | None = None  # nuisance keys, axes order (`cemctl.records.ExperimentMeta`)
    done_wall_s: list[float] | None = None  # every done run's wall time (`runs` may be a selection): the grid's ETA

    @property
    def counts(self) -> dict[str, int]:
        if self.state_counts is not None:
            return {s: self.state_counts[s] for s in RUN_STATES if self.state_counts.get(s)}
        c = Counter(r.state for r in self.runs)
        return {s: c[s] for s in RUN_STATES if c[s]}

    @property
    def total(self) -> int:
        return self.total_runs if self.total_runs is not None else len(self.runs)


def collect_status(source: "Engine | Reader", experiment: str | None = None, *, limit: int = 0,
                   scale: str | None = None, runs_root: Path | str | None = None, states: Sequence[str] | None = None,
                   where: Sequence[Any] = (), sort: Sequence[tuple[str, bool]] | None = None, fields: Sequence[str] = (),
                   arms: bool = False, now: float | None = None) -> list[ExperimentStatus]:
    """One ExperimentStatus per experiment (or just `experiment`), runs in grid order.

    The runs are the run records of `cemctl.records.load_records` (one per experiment and run; the runs no
    experiment links under "(no experiment)" when no experiment is named), of `scale` only when given. `states` and
    `where` (parsed conditions) select runs; `counts` and `total` still cover every run. `sort`: [(field,
    descending), ...] (ties by the next), missing values last. `limit` > 0: at most `limit` runs each (without a sort: running, stale,
    failed, ... first, then grid order). `fields`: the fields a view shows (canonical names): without a selection
    only the rows shown are read, and arms are labelled only when a field shown needs them. Raises CemError for an
    unknown experiment (listing the known ones).
    """
    from cemctl.db.read import open_reader
    from cemctl.records import load_records
    from cemctl.records.fields import sources
    from cemctl.records.where import describe

    reader = open_reader(source)
    fast = limit > 0 and not where and not sort and not arms and states is None
    picked = summary = None
    with reader.snapshot():
        if fast:  # the counts by SQL, and only the runs shown read: a 10,000-run project costs what a small one does
            from cemctl.records.load import summarize

            summary = summarize(reader, experiment, scale=scale, limit=limit, priority=STATE_PRIORITY)
            picked = {(name, rid) for name, sm in summary.items() for rid in sm.picked}
        recs = load_records(reader, experiment, scale=scale, per_experiment=True, runs_root=runs_root, now=now,
                            arms=not fast or "arm" in sources(fields),
                            run_ids=sorted({rid for _, rid in picked}) if picked is not None else None)
    if picked is not None:
        recs.records = [r for r in recs.records if (r.group, r.run_id) in picked]
    by_name: dict[str, ExperimentStatus] = {}
    for name, meta in recs.experiments.items():
        by_name[name] = ExperimentStatus(name, meta=meta)
    for r in recs.records:
        by_name.setdefault(r.group, ExperimentStatus(r.group)).runs.append(r)
    if experiment is None and NO_EXPERIMENT in by_name:  # runs no experiment links: listed last
        by_name[NO_EXPERIMENT] = by_name.pop(NO_EXPERIMENT)
    if summary is not None:
        from cemctl.db.outdated import outdated_by_experiment, outdated_runs

        stale_code = outdated_runs(reader)  # finished runs with another fingerprint than this code's: usually none
        by_exp = outdated_by_experiment(reader, stale_code, scale=scale) if stale_code else {}
        for name, sm in summary.items():
            exp = by_name.setdefault(name, ExperimentStatus(name))
            exp.state_counts, exp.total_runs = dict(sm.counts), sm.total
            exp.done_wall_s = list(sm.done_wall_s)
            exp.outdated = by_exp.get(name, []) if name != NO_EXPERIMENT else sorted(
                rid for rid in sm.picked if rid in stale_code)
        if experiment is None and NO_EXPERIMENT in by_name:
            by_name[NO_EXPERIMENT] = by_name.pop(NO_EXPERIMENT)
        return [e for e in by_name.values() if e.runs or e.name != NO_EXPERIMENT or e.total_runs]
    out = [e for e in by_name.values() if e.runs or e.name != NO_EXPERIMENT]
    for exp in out:
        exp.outdated = sorted(r.run_id for r in exp.runs if r.outdated)
        exp.state_counts = dict(Counter(r.state for r in exp.runs))
        exp.total_runs = len(exp.runs)
        exp.done_wall_s = [r.wall_time_s for r in exp.runs if r.state == "done" and r.wall_time_s]
        selection = []
        if states is not None:
            exp.runs = [r for r in exp.runs if r.state in states]
            selection.append("--state " + ",".join(states))
        if where:
            from cemctl.records.where import matches

            exp.runs = [r for r in exp.runs if matches(where, r)]
            selection.append(f"--where {describe(where)}")
        if selection:
            exp.matching, exp.selection = len(exp.runs), " ".join(selection)
        if sort:
            exp.runs = sort_by(exp.runs, sort)
        if limit and len(exp.runs) > limit:
            if sort:
                exp.runs = exp.runs[:limit]
            else:
                order = sorted(range(len(exp.runs)), key=lambda i: (STATE_PRIORITY.get(exp.runs[i].state, 9), i))
                exp.runs = [exp.runs[i] for i in sorted(order[:limit])]
    return out


def sort_records(rows: list[RunRecord], key: str, *, descending: bool = False) -> list[RunRecord]:
    """Records ordered by a field's value (numbers as numbers, then text); missing values last either way; ties
    keep their order."""
    pairs = [(r.get(key) if key in r else r.axes.get(key), r) for r in rows]
    numbers = [(float(v), r) for v, r in pairs if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v]
    texts = [(str(v), r) for v, r in pairs if v is not None and not isinstance(v, (int, float))]
    numbers.sort(key=lambda p: p[0], reverse=descending)
    texts.sort(key=lambda p: p[0], reverse=descending)
    kept = {id(r) for _, r in numbers} | {id(r) for _, r in texts}
    return [r for _, r in numbers] + [r for _, r in texts] + [r for _, r in pairs if id(r) not in kept]


def sort_by(rows: list[RunRecord], order: Sequence[tuple[str, bool]]) -> list[RunRecord]:
    """Records ordered by several fields (`parse_sort`): by the first, ties by the next, ..."""
    for key, descending in reversed(list(order)):  # stable sorts, the last key first
        rows = sort_records(rows, key, descending=descending)
    return rows


SYNC_CHECK_SQL = "SELECT r.id, r.state, r.result_mtime, r.config_mtime FROM runs r"


def refresh(
    source: "Engine | Reader",
    runs_root: Path | str,
    experiment: str | None = None,
    *,
    heartbeat_timeout_s: float | None = None,
    reconcile: bool = True,
) -> None:
    """Sync the run dirs into the database, then mark vanished queued jobs stale. Only what changed is read (and
    only then is the writing machinery loaded: a status with nothing to sync costs a query and two stats a run)."""
    from cemctl.db.read import open_reader

    reader = open_reader(source)
    timeout_s = runfiles.heartbeat_timeout_s(heartbeat_timeout_s)
    # done / diverged runs never change again (a launch never restarts them): they are re-read
    # only when their result.json or config.json is not the one recorded (deleted, replaced,
    # edited: damaged), two stats each. A planned run with no events.jsonl has never been touched by an executor or the
    # trainer (both append an event first), so it is skipped too. `cemctl sync` reads all.
    sql, params = SYNC_CHECK_SQL, {}
    if experiment is not None:
        sql += (" WHERE r.id IN (SELECT er.run_id FROM experiment_runs er JOIN experiments e"
                " ON e.id = er.experiment_id WHERE e.name = :name)")
        params["name"] = experiment
    root = os.path.join(str(runs_root), "")  # with its trailing separator: a run's files are root + id + "/" + name
    result_name, config_name = os.sep + runfiles.RESULT_FILE, os.sep + runfiles.CONFIG_FILE
    events_name = os.sep + runfiles.EVENTS_FILE
    rows = reader.rows(sql, **params)
    run_ids: list[str] | None = [
        rid for rid, state, result_mtime, config_mtime in rows
        for rdir in (root + rid,)
        if (_changed(rdir + result_name, result_mtime) or _changed(rdir + config_name, config_mtime)
            if state in FINAL_STATES else
            state != "planned" or os.path.exists(rdir + events_name) or _changed(rdir + config_name, config_mtime))
    ]
    if experiment is None and not rows:
        run_ids = None  # an empty database: take every run dir found (rebuild from files)
    if run_ids is not None and len(run_ids) > MAX_SYNC_IDS:
        run_ids = None
    if run_ids == []:
        return  # nothing queued or running (those are always looked at): nothing to reconcile either
    from cemctl.db.ingest import sync_runs  # only when something changed: a status with nothing to sync never loads it

    engine = reader.write_engine()
    sync_runs(engine, runs_root, heartbeat_timeout_s=timeout_s, run_ids=run_ids)
    if reconcile:
        reconcile_queued(engine, run_ids, runs_root=runs_root)


def _changed(path: str, recorded_mtime: float | None) -> bool:
    """A run file is gone, or is not the one the database recorded (one lstat: a file replaced by a symlink
    counts as changed, whatever the mtime of what it points to). `path`: the file's path as one string (10,000
    runs are checked on every `status`: no join per call)."""
    try:
        st = os.lstat(path)
    except OSError:
        return True
    return stat.S_ISLNK(st.st_mode) or st.st_mtime != recorded_mtime


def reconcile_queued(engine: "Engine", run_ids: list[str] | None = None, *,
                     runs_root: Path | str | None = None) -> list[str]:
    """Queued runs whose job is gone (left squeue, orchestrator dead), and running runs whose local trainer on
    this host is gone or is not the recorded process any more (a reused PID), become stale; returns their ids.

    Each executor answers for its own jobs in one batch (`cemctl.executors.jobs_alive`); the local one checks
    the recorded process's start time and token (`cem_core.runfiles.process`), the same check `cemctl launch`
    makes before it trusts a run to be alive. "Cannot tell" (squeue failed) leaves the run as it is:
    heartbeats decide later. Running jobs elsewhere (SLURM, other hosts) are judged by their heartbeat.
    """
    from cemctl.db.read import open_reader
    from cemctl.db.roots import recorded_runs_root

    reader = open_reader(engine)
    root = Path(runs_root) if runs_root is not None else recorded_runs_root(reader)
    if root is None:
        return []
    queued = [(rid, root / rid, state) for rid, state in reader.rows(
        "SELECT id, state FROM runs WHERE state IN ('queued', 'running')") if run_ids is None or rid in run_ids]
    here = runfiles.hostname()
    records = [(rid, rdir, job) for rid, rdir, state in queued for job in (runfiles.read_job(rdir),)
               if job is not None and job.live
               and (state == "queued" or (job.state == "running" and job.executor == "local" and job.host == here))]
    if not records:
        return []
    from cemctl.db.ingest import set_state
    from cemctl.executors import jobs_alive

    alive = jobs_alive([(rdir, job) for _, rdir, job in records])
    gone: list[str] = []
    for (rid, rdir, job), answer in zip(records, alive):
        if answer is not False:
            continue
        now = runfiles.read_job(rdir)  # the job may have started and ended since it was read
        if runfiles.read_result(rdir) or now is None or now.state != job.state:
            continue
        if job.executor == "local":
            from cemctl.executors import get_executor

            reason = get_executor("local").gone_reason(rdir, job)
        else:
            reason = f"{job.executor} job {job.job_id} is no longer queued and never reported"
        set_state(engine, rid, "stale", reason, executor=job.executor, job_id=job.job_id, runs_root=root)
        runfiles.update_job(rdir, state="lost", reason=reason)
        gone.append(rid)
    return gone

