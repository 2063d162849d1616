"""Rows of the status table from the results database (`cemctl status`).

`refresh` first brings the run directories into the database (the ingest
library, incremental and cheap), then reconciles runs the database still
calls `queued` with their executor: a SLURM job that left `squeue` without
ever starting, or a local orchestrator that is gone, makes the run `stale`
with the reason. `collect_status` reads everything with two column queries
(no ORM objects, no torch), so it stays fast on 10,000 runs.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from cem_core import runfiles
from cem_core.runfiles import FINAL_STATES, RESULT_STATES, RUN_STATES
from cemctl.db import read_session, set_state, sync_runs
from cemctl.db.models import Experiment, ExperimentRun, Result, Run
from cemctl.executors import jobs_alive

NO_EXPERIMENT = "(no experiment)"
NOT_IN_GRID = "no longer in the grid (planned by an earlier version of the grid file)"
MAX_SYNC_IDS = 20000  # above this, sync everything (one IN list must stay below SQLite's limit)


@dataclass
class RunRow:
    run_id: str
    axes_raw: dict[str, Any] | str  # the varied axes, or their JSON (parsed on first use: cheap on 10,000 runs)
    state: str
    reason: str = ""
    step: int | None = None
    total_steps: int | None = None
    tokens: int | None = None
    train_loss: float | None = None
    val_loss: float | None = None
    test_loss: float | None = None
    tokens_per_s: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    heartbeat_at: float | None = None
    executor: str | None = None
    job_id: str | None = None
    attempts: int = 0
    error: str | None = None
    run_dir: str | None = None
    scale: str = ""  # the scale it was planned at (the first, if several)
    in_grid: bool = True  # False: an edited grid no longer holds it (kept, with its result, and said so)
    test_ppl: float | None = None
    result_tokens: int | None = None  # result.json's tokens and wall time: a finished run's average speed
    wall_time_s: float | None = None
    config: dict[str, Any] | None = None  # the flattened resolved config (only when asked for: `with_config`)
    tags: dict[str, str] | None = None  # `cemctl tag` tags (only when asked for)
    outdated: bool = False  # finished, trained by older model code (cemctl.db.outdated)

    @property
    def axes(self) -> dict[str, Any]:
        if isinstance(self.axes_raw, str):
            self.axes_raw = json.loads(self.axes_raw or "{}")
        return self.axes_raw

    @property
    def progress(self) -> float | None:
        """Fraction of the steps done (0..1)."""
        if self.state == "done":
            return 1.0
        if self.step is None or not self.total_steps:
            return None
        return min(1.0, self.step / self.total_steps)

    def elapsed_s(self, now: float) -> float | None:
        if self.started_at is None:
            return None
        end = self.finished_at if self.state in RESULT_STATES and self.finished_at else None
        if end is None:
            end = now if self.state == "running" else (self.heartbeat_at or now)
        return max(0.0, end - self.started_at)

    def eta_s(self) -> float | None:
        """Seconds left at the current speed (running runs only)."""
        if self.state != "running" or not self.tokens_per_s or not self.step or not self.total_steps or not self.tokens:
            return None
        tokens_per_step = self.tokens / self.step
        return max(0.0, (self.total_steps - self.step) * tokens_per_step / self.tokens_per_s)

    @property
    def error_line(self) -> str:
        """Last line of the error for failed runs, else the state's reason for stale/failed ones; runs an edited
        grid left behind say so first."""
        text = self.error or (self.reason if self.state in ("failed", "stale", "diverged", "cancelled", "damaged") else "")
        lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
        line = lines[-1] if lines else ""
        if not self.in_grid:
            return NOT_IN_GRID + (f"; {line}" if line else "")
        return line

    def to_dict(self, now: float) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "axes": self.axes, "state": self.state, "reason": self.reason,
            "step": self.step, "total_steps": self.total_steps, "progress": self.progress, "tokens": self.tokens,
            "train_loss": self.train_loss, "val_loss": self.val_loss, "test_loss": self.test_loss,
            "tokens_per_s": self.tokens_per_s, "elapsed_s": self.elapsed_s(now), "eta_s": self.eta_s(),
            "executor": self.executor, "job_id": self.job_id, "attempts": self.attempts,
            "error": self.error_line or None, "run_dir": self.run_dir, "scale": self.scale, "in_grid": self.in_grid,
            "test_ppl": self.test_ppl, "wall_time_s": self.wall_time_s, "outdated": self.outdated,
            "avg_tokens_per_s": (self.result_tokens / self.wall_time_s
                                 if self.state == "done" and self.result_tokens and self.wall_time_s else None),
        }


@dataclass
class ExperimentStatus:
    name: str
    runs: list[RunRow] = field(default_factory=list)
    state_counts: dict[str, int] | None = None  # set when `runs` is a limited selection
    total_runs: int | None = None
    matching: int | None = None  # runs meeting a --state/--where selection (None: no selection)
    selection: str = ""  # that selection, as the user wrote it
    outdated: list[str] = field(default_factory=list)  # every run of it trained by older model code

    @property
    def counts(self) -> dict[str, int]:
        if self.state_counts is not None:
            return {s: self.state_counts[s] for s in RUN_STATES if self.state_counts.get(s)}
        c = Counter(r.state for r in self.runs)
        return {s: c[s] for s in RUN_STATES if c[s]}

    @property
    def total(self) -> int:
        return self.total_runs if self.total_runs is not None else len(self.runs)


_RUN_COLUMNS = (
    Run.id, Run.state, Run.state_reason, Run.last_step, Run.total_steps, Run.tokens, Run.last_train_loss,
    Run.last_val_loss, Run.tokens_per_s, Run.started_at, Run.finished_at, Run.heartbeat_at, Run.executor,
    Run.job_id, Run.attempts, Run.error, Run.run_dir, Result.test_loss, Result.test_ppl, Result.tokens,
    Result.wall_time_s,
)
# With a limit, these states are shown first (then grid order).
STATE_PRIORITY = {"running": 0, "stale": 1, "damaged": 2, "failed": 3, "diverged": 4, "queued": 5, "planned": 6,
                  "cancelled": 7, "done": 8}


def _row(r: Any, axes: dict[str, Any] | str, scale: str = "", in_grid: Any = 1) -> RunRow:
    config = None
    if len(r) > len(_RUN_COLUMNS):
        from cem_core.config import flatten

        config = flatten(json.loads(r[len(_RUN_COLUMNS)] or "{}"))
    return RunRow(
        in_grid=bool(in_grid),
        run_id=r[0], axes_raw=axes, state=r[1], reason=r[2] or "", step=r[3], total_steps=r[4], tokens=r[5],
        train_loss=r[6], val_loss=r[7], tokens_per_s=r[8], started_at=r[9], finished_at=r[10], heartbeat_at=r[11],
        executor=r[12], job_id=r[13], attempts=r[14] or 0, error=r[15], run_dir=r[16], test_loss=r[17], scale=scale or "",
        test_ppl=r[18], result_tokens=r[19], wall_time_s=r[20], config=config,
    )


def collect_status(engine: Engine, experiment: str | None = None, *, limit: int = 0,
                   scale: str | None = None, runs_root: Path | str | None = None, with_config: bool = False,
                   states: Sequence[str] | None = None) -> list[ExperimentStatus]:
    """One ExperimentStatus per experiment (or just `experiment`), runs in grid order.

    An experiment's runs are those of every scale and override set it was planned
    with (each run once, with the scale it was first planned at), or of `scale` only.
    With `limit` > 0 each experiment holds at most `limit` runs (running, stale,
    failed, ... first; `counts` and `total` still cover every run), read with
    SQL LIMIT so a 10,000-run experiment costs no more than a small one.
    Runs linked to no experiment are listed under "(no experiment)" when no experiment is named.
    A row's `run_dir` is `<runs_root>/<run id>` (default: the runs root the database recorded).
    `states`: only runs in these states (counts and totals still cover every run).
    `with_config` also reads each run's resolved config (RunRow.config, flattened): for columns and
    sorting by config keys that are not axes.
    Raises CemError for an unknown experiment name (listing the known ones).
    """
    from cemctl.db.runs import recorded_runs_root

    root = Path(runs_root) if runs_root is not None else recorded_runs_root(engine)
    out = _collect(engine, experiment, limit=limit, scale=scale, with_config=with_config, states=states)
    for exp in out:
        for r in exp.runs:
            r.run_dir = str(Path(os.path.abspath(root)) / r.run_id) if root is not None else None
    return out


def _collect(engine: Engine, experiment: str | None, *, limit: int, scale: str | None, with_config: bool,
             states: Sequence[str] | None) -> list[ExperimentStatus]:
    from sqlalchemy import case

    from cem_core.errors import CemError

    priority = case(STATE_PRIORITY, value=Run.state, else_=9)
    columns = (*_RUN_COLUMNS, Run.config_json) if with_config else _RUN_COLUMNS
    with read_session(engine) as s:
        exps = list(s.execute(select(Experiment.id, Experiment.name).order_by(Experiment.name)))
        if experiment is not None:
            exps = [e for e in exps if e[1] == experiment]
            if not exps:
                known = ", ".join(n for _, n in s.execute(select(Experiment.id, Experiment.name).order_by(Experiment.name)))
                raise CemError(f"experiment: unknown experiment {experiment!r} (known: {known or 'none yet; run cemctl plan'})")
        by_id = {eid: ExperimentStatus(name) for eid, name in exps}
        from cemctl.db.runs import in_grid_case, join_latest, latest_plans

        latest = latest_plans()
        links = join_latest(select(
            ExperimentRun.experiment_id.label("experiment_id"), ExperimentRun.run_id.label("run_id"),
            func.min(ExperimentRun.scale).label("scale"), func.min(ExperimentRun.position).label("position"),
            func.min(ExperimentRun.axes_json).label("axes_json"), func.max(in_grid_case(latest)).label("in_grid")),
            latest)
        if scale is not None:
            links = links.where(ExperimentRun.scale == scale)
        link = links.group_by(ExperimentRun.experiment_id, ExperimentRun.run_id).subquery()
        base = (
            select(link.c.experiment_id, link.c.axes_json, link.c.position, link.c.scale, link.c.in_grid, *columns)
            .join(Run, Run.id == link.c.run_id)
            .outerjoin(Result, Result.run_id == Run.id)
        )
        if states is not None:
            base = base.where(Run.state.in_(list(states)))
        if limit > 0 or states is not None:  # the rows are a selection: count every run apart
            counts = (
                select(link.c.experiment_id, Run.state, func.count())
                .join(Run, Run.id == link.c.run_id)
                .group_by(link.c.experiment_id, Run.state)
            )
            for exp in by_id.values():
                exp.state_counts, exp.total_runs = {}, 0
            for eid, state, n in s.execute(counts):
                if eid in by_id:
                    exp = by_id[eid]
                    exp.state_counts[state] = n  # type: ignore[index]
                    exp.total_runs = (exp.total_runs or 0) + n
        if states is not None:
            for exp in by_id.values():
                exp.matching = sum((exp.state_counts or {}).get(st, 0) for st in states)
                exp.selection = "--state " + ",".join(states)
        if limit > 0:
            for eid, exp in by_id.items():
                picked = list(s.execute(base.where(link.c.experiment_id == eid).order_by(priority, link.c.position).limit(limit)))
                picked.sort(key=lambda rec: (-rec[4], rec[2]))  # back to grid order (runs left behind last)
                exp.runs = [_row(rec[5:], rec[1] or "{}", rec[3], rec[4]) for rec in picked]
        else:
            q = base.order_by(link.c.experiment_id, link.c.in_grid.desc(), link.c.position)
            if experiment is not None:
                q = q.where(link.c.experiment_id.in_(list(by_id)))
            for rec in s.execute(q):
                by_id[rec[0]].runs.append(_row(rec[5:], rec[1] or "{}", rec[3], rec[4]))
        out = list(by_id.values())
        if experiment is None and scale is None:
            linked = select(ExperimentRun.run_id)
            oq = select(*columns).outerjoin(Result, Result.run_id == Run.id).where(Run.id.not_in(linked))
            if limit > 0:
                n_orphans = s.execute(select(func.count()).select_from(Run).where(Run.id.not_in(linked))).scalar_one()
                if n_orphans:
                    o_counts = dict(s.execute(select(Run.state, func.count()).where(Run.id.not_in(linked)).group_by(Run.state)).all())
                    oq_sel = oq.where(Run.state.in_(list(states))) if states is not None else oq
                    rows = [_row(rec, {}) for rec in s.execute(oq_sel.order_by(priority, Run.created_at).limit(limit))]
                    out.append(ExperimentStatus(NO_EXPERIMENT, rows, state_counts=o_counts, total_runs=n_orphans,
                                                matching=sum(o_counts.get(st, 0) for st in states)
                                                if states is not None else None))
            else:
                orphans = [_row(rec, {}) for rec in s.execute(oq.order_by(Run.created_at))]
                if orphans:
                    everything = Counter(r.state for r in orphans)
                    if states is not None:
                        orphans = [r for r in orphans if r.state in states]
                    out.append(ExperimentStatus(NO_EXPERIMENT, orphans, state_counts=dict(everything),
                                                total_runs=sum(everything.values()),
                                                matching=len(orphans) if states is not None else None))
    return out


def refresh(
    engine: Engine,
    runs_root: Path | str,
    experiment: str | None = None,
    *,
    heartbeat_timeout_s: float | None = None,
    reconcile: bool = True,
) -> None:
    """Sync the run dirs into the database, then mark vanished queued jobs stale."""
    timeout_s = runfiles.heartbeat_timeout_s(heartbeat_timeout_s)
    # done / diverged runs never change again (a launch never restarts them): they are re-read
    # only when their result.json or config.json is not the one recorded (deleted, replaced,
    # edited: damaged), two stats each. A planned run with no events.jsonl has never been touched by an executor or the
    # trainer (both append an event first), so it is skipped too. `cemctl sync` reads all.
    with read_session(engine) as s:
        q = select(Run.id, Run.state, Run.result_mtime, Run.config_mtime).distinct()
        if experiment is not None:
            q = q.join(ExperimentRun, ExperimentRun.run_id == Run.id).join(
                Experiment, Experiment.id == ExperimentRun.experiment_id
            ).where(Experiment.name == experiment)
        root = str(runs_root)
        run_ids: list[str] | None = [
            rid for rid, state, result_mtime, config_mtime in s.execute(q)
            for rdir in (os.path.join(root, rid),)
            if (_changed(rdir, runfiles.RESULT_FILE, result_mtime) or _changed(rdir, runfiles.CONFIG_FILE, config_mtime)
                if state in FINAL_STATES else
                state != "planned" or os.path.exists(os.path.join(rdir, runfiles.EVENTS_FILE))
                or _changed(rdir, runfiles.CONFIG_FILE, config_mtime))
        ]
        if experiment is None:
            n_all = s.execute(select(func.count()).select_from(Run)).scalar_one()
            if n_all == 0:
                run_ids = None  # an empty database: take every run dir found (rebuild from files)
    if run_ids is not None and len(run_ids) > MAX_SYNC_IDS:
        run_ids = None
    if run_ids == []:
        if reconcile:
            reconcile_queued(engine, [], runs_root=runs_root)
        return
    sync_runs(engine, runs_root, heartbeat_timeout_s=timeout_s, run_ids=run_ids)
    if reconcile:
        reconcile_queued(engine, run_ids, runs_root=runs_root)


def _changed(run_dir: str, name: str, recorded_mtime: float | None) -> bool:
    """A run file is gone, or is not the one the database recorded (one lstat: a file replaced by a symlink
    counts as changed, whatever the mtime of what it points to)."""
    try:
        st = os.lstat(os.path.join(run_dir, name))
    except OSError:
        return True
    return stat.S_ISLNK(st.st_mode) or st.st_mtime != recorded_mtime


def reconcile_queued(engine: Engine, run_ids: list[str] | None = None, *,
                     runs_root: Path | str | None = None) -> list[str]:
    """Queued runs whose job is gone (left squeue, orchestrator dead), and running runs whose local trainer on
    this host is gone or is not the recorded process any more (a reused PID), become stale; returns their ids.

    Each executor answers for its own jobs in one batch (`cemctl.executors.jobs_alive`); the local one checks
    the recorded process's start time and token (`cem_core.runfiles.process`), the same check `cemctl launch`
    makes before it trusts a run to be alive. "Cannot tell" (squeue failed) leaves the run as it is:
    heartbeats decide later. Running jobs elsewhere (SLURM, other hosts) are judged by their heartbeat.
    """
    from cemctl.db.runs import recorded_runs_root

    root = Path(runs_root) if runs_root is not None else recorded_runs_root(engine)
    if root is None:
        return []
    with read_session(engine) as s:
        q = select(Run.id, Run.state).where(Run.state.in_(("queued", "running")))
        if run_ids is not None:
            q = q.where(Run.id.in_(run_ids))
        queued = [(rid, root / rid, state) for rid, state in s.execute(q)]
    records = [(rid, rdir, state, runfiles.read_job(rdir)) for rid, rdir, state in queued]
    here = runfiles.hostname()
    records = [(rid, rdir, job) for rid, rdir, state, job in records if job is not None and job.live
               and (state == "queued" or (job.state == "running" and job.executor == "local" and job.host == here))]
    if not records:
        return []
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


def now_s() -> float:
    return time.time()
