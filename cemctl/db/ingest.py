"""Bring run directories into the database, idempotently (`cemctl sync`, `cemctl status`).

    ingest_run(engine, run_dir)                  # one run: new metrics/events lines, heartbeat, result
    sync_runs(engine, runs_root)                 # every run dir under runs_root (+ known run dirs)

Both can run any number of times, from any number of processes: metrics are
upserted on (run_id, kind, step, series), events on (run_id, line), results on run_id,
test-time recursion evaluations (evals.json, `cemctl eval`) on (run_id, attn_steps,
mlp_steps); evals.json is re-read whenever its mtime changes and is mirrored
exactly (rows gone from the file are deleted).
metrics.jsonl and events.jsonl are read incrementally from a stored byte
offset; a truncated last line is left for the next call; a file that was
rewritten (shorter, or different bytes before the offset, e.g. after a resume
dropped lines) is re-read from the start. A run dir the database does not know
gets a row from its config.json, so the database can be rebuilt from the run
dirs at any time.

One function per run file (`_ingest_metrics`, `_ingest_events`,
`_ingest_heartbeat`, `_ingest_result`, `_ingest_evals`, `_ingest_environment`,
`_ingest_tags`, `_ingest_history` (the results of the run's set-aside folders))
gathers its rows and its `Evidence`; a command that changes a run's files calls
`cemctl.db.projection.rebuild_run` (every derived row forgotten, the folder read again,
one transaction). The folder's evidence and its state are the one reading of a run folder
(`cem_core.runfolder.read_folder`: result.json, the last event, the heartbeat, their times and
the judgement `damaged`), which the live view and import use too. The files and the database
check each other (`_damage`): a config.json whose hash is not the run's id (edited, or a copied
run directory), a result.json that is not a result, a run whose recorded result or directory is
gone, is `damaged` with the reason; it is never retrained silently.

Every file is read through `cem_core.runfiles` (regular files inside the run
directory only, never blocking); a run directory that is a symlink out of the
runs root, or any entry that cannot be read, is reported in `IngestStats.errors`
and skipped: one bad entry never stops the others. This module never imports torch.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from cem_core.config import canonical_json
from cem_core.errors import CemError, ConfigError
from cem_core.names import is_run_id
from cem_core.runfiles import RunState
from cem_core.runfolder import RunFolder, checked_config, read_folder, resolved_config
from cem_core.runfiles.files import ENVIRONMENT_FILE
from cem_core.runfiles.tags import TAGS_FILE
from cem_core.runfiles import (
    CONFIG_FILE,
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    EVALS_FILE,
    EVENTS_FILE,
    HEARTBEAT_FILE,
    METRICS_FILE,
    RESULT_FILE,
)
from cemctl.db.engine import read_session, retry_locked, write_session
from cemctl.db.ingest_files import (
    _ingest_environment,
    _ingest_evals,
    _ingest_events,
    _ingest_heartbeat,
    _ingest_history,
    _ingest_metrics,
    _ingest_result,
    _ingest_tags,
    Outcome,
)
from cemctl.db.models import Result, Run, RunEvent, RunTags
from cem_core.runfolder import mtime as _mtime


@dataclass
class IngestStats:
    """What one `sync_runs` call did (printed by `cemctl sync`)."""

    runs_seen: int = 0
    ingested: int = 0  # run dirs read without an error
    runs_created: int = 0
    runs_changed: int = 0
    metric_rows: int = 0
    event_rows: int = 0
    results: int = 0
    eval_rows: int = 0
    bad_lines: int = 0
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # run files left out of a run that was synced (one line each)
    states: Counter[str] = field(default_factory=Counter)

    def summary(self) -> str:
        states = ", ".join(f"{n} {s}" for s, n in sorted(self.states.items())) or "none"
        text = (
            f"synced {self.runs_seen} run dirs ({self.runs_created} new, {self.runs_changed} changed): "
            f"{self.metric_rows} metric rows, {self.event_rows} events, {self.results} results; states: {states}"
        )
        if self.eval_rows:
            text += f"; {self.eval_rows} eval rows"
        if self.bad_lines:
            text += f"; {self.bad_lines} unreadable lines skipped"
        if self.errors:
            text += f"; {len(self.errors)} run dirs skipped (first: {self.errors[0]})"
        if self.warnings:
            text += f"; {len(self.warnings)} run files left out (first: {self.warnings[0]})"
        return text


# ---------------------------------------------------------------------------
# Reading files


@dataclass
class _Snapshot:
    """The parts of a run row the change check needs (detached from any session)."""

    state: str
    state_at: float | None
    heartbeat_at: float | None
    result_mtime: float | None
    metrics_offset: int
    metrics_fingerprint: str
    events_offset: int
    events_fingerprint: str
    evals_mtime: float | None = None
    config_mtime: float | None = None
    environment_mtime: float | None = None
    tags_mtime: float | None = None

    @classmethod
    def of(cls, run: Run, tags_mtime: float | None = None) -> "_Snapshot":
        return cls(
            run.state, run.state_at, run.heartbeat_at, run.result_mtime,
            run.metrics_offset or 0, run.metrics_fingerprint or "", run.events_offset or 0, run.events_fingerprint or "",
            run.evals_mtime, run.config_mtime, run.environment_mtime, tags_mtime,
        )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _needs_update(snap: _Snapshot | None, run_dir: Path, now: float, timeout_s: float) -> bool:
    if snap is None or snap.state == "damaged":  # damage is judged again every time (it may have been repaired)
        return True
    for name, offset in ((METRICS_FILE, snap.metrics_offset), (EVENTS_FILE, snap.events_offset)):
        if _size(run_dir / name) != offset:  # new bytes (maybe a partial line: cheap to look again) or rewritten
            return True
    for name, seen in ((RESULT_FILE, snap.result_mtime), (EVALS_FILE, snap.evals_mtime),
                       (HEARTBEAT_FILE, snap.heartbeat_at), (CONFIG_FILE, snap.config_mtime),
                       (ENVIRONMENT_FILE, snap.environment_mtime), (TAGS_FILE, snap.tags_mtime)):
        if _mtime(run_dir / name) != seen:
            return True
    if snap.state in ("running", "stale"):  # has it just crossed the heartbeat timeout, either way?
        alive = [t for t in (snap.heartbeat_at, _mtime(run_dir / EVENTS_FILE)) if t]
        last_alive = max(alive) if alive else (snap.state_at or now)
        return (now - last_alive > timeout_s) != (snap.state == "stale")
    return False


def _engine_of(session: Session) -> Engine:
    bind = session.get_bind()
    return bind if isinstance(bind, Engine) else bind.engine


def _create_row(session: Session, run_dir: Path, now: float) -> Run:
    """A row for a run directory the database does not know (rebuilding it from the files)."""
    from cemctl.db.runs import new_run_row

    from cemctl.db.runs import stored_run_dir

    d, cfg = resolved_config(run_dir)  # a config that is another run's makes it damaged, never hidden (`_damage`)
    run = new_run_row(run_dir.name, cfg, stored_run_dir(_engine_of(session), run_dir), now)
    run.config_json = canonical_json(d)
    run.state_reason = "found by sync"
    session.add(run)
    session.flush()
    session.add(RunEvent(run_id=run.id, time=now, state="planned", reason="found by sync", source="derived"))
    return run


def _same_run(recorded: dict[str, Any], run_id: str) -> bool:
    """The database's config is this run's, written by another release (a key added since, at its default: a plan
    of today over runs an archive brought): it hashes to the run's id (`cem_core.identity`)."""
    from cem_core.config import RunConfig, saved_run_id

    try:
        return saved_run_id(RunConfig.from_dict(recorded)) == run_id
    except ConfigError:
        return False


def _config_damage(run: Run, run_dir: Path) -> str:
    """Why config.json cannot be trusted for this run ("" when it can): the folder's own judgement
    (`cem_core.runfolder.checked_config`: unreadable, another run's), or not the config the database recorded."""
    mtime = _mtime(run_dir / CONFIG_FILE)
    if mtime is None:  # the planner writes it again from the recorded config (`cemctl plan` / `launch`)
        return "" if run.config_json else f"config.json is missing from {run_dir}"
    if mtime == run.config_mtime and run.state != "damaged":
        return ""
    try:
        d, _ = checked_config(run_dir)
    except ConfigError as e:
        return str(e)
    recorded = json.loads(run.config_json or "{}")
    if recorded and canonical_json(recorded) != canonical_json(d) and not _same_run(recorded, run.id):
        return "config.json differs from the config recorded in the database"
    run.config_mtime = mtime
    return ""


def _damage(session: Session, run: Run, run_dir: Path, folder: RunFolder) -> str:
    """Cross-checks of the run folder and the database; "" when they agree."""
    if folder.result.problem:
        return folder.result.problem
    config = _config_damage(run, run_dir)
    if config:
        return config
    if folder.result.mtime is None:  # present but unreadable for now: judged again, never called gone
        recorded = session.get(Result, run.id)
        if recorded is not None and RunState(recorded.state).final:
            return (f"result.json is gone; the database recorded {recorded.state} (test loss "
                    f"{recorded.test_loss if recorded.test_loss is not None else 'n/a'}); "
                    "`cemctl launch --redo-damaged` trains it again")
    return ""


def damage_found(engine: Engine, runs: Iterable[tuple[str, Path]], *, now: float | None = None) -> dict[str, str]:
    """{run id: why} of the recorded runs whose folders the one rule (`_damage`, as sync applies it) finds damaged
    now, judged without writing anything (a dry run reads the database without syncing it first)."""
    now = time.time() if now is None else now
    out: dict[str, str] = {}
    with read_session(engine) as s:
        for rid, run_dir in runs:
            run = s.get(Run, rid)
            if run is None:
                continue
            s.expunge(run)  # judged, never written (the rule notes what it checked on the run's row)
            why = _damage(s, run, Path(run_dir), read_folder(run_dir, now=now, check_config=False))
            if why:
                out[rid] = why
    return out


def _ingest_locked(session: Session, run: Run, run_dir: Path, now: float, timeout_s: float, out: Outcome) -> None:
    """Apply the run dir's files to `run` inside the caller's write transaction."""
    folder = read_folder(run_dir, now=now, check_config=False)  # the one reading of the folder's evidence
    metrics_rewritten = _ingest_metrics(session, run, run_dir, out)
    last_event = _ingest_events(session, run, run_dir, out)
    _ingest_heartbeat(run, folder, metrics_rewritten)
    _ingest_result(session, run, folder, now, out)
    _ingest_evals(session, run, run_dir, now, out)
    _ingest_environment(session, run, run_dir, now, out)
    _ingest_tags(session, run, run_dir, now, out)
    _ingest_history(session, run, run_dir, out)
    derived = folder.state(now=now, timeout_s=timeout_s, db_state=run.state if run.state != "damaged" else "planned",
                           db_reason=run.state_reason or "", db_state_at=run.state_at,
                           extra_damage=_damage(session, run, run_dir, folder))
    _apply_state(session, run, derived, last_event, now, out)
    if run.run_dir is None:
        from cemctl.db.runs import stored_run_dir

        run.run_dir = stored_run_dir(_engine_of(session), run_dir)
    if out.metric_rows or out.event_rows or out.result or out.eval_rows:
        out.changed = True
    run.updated_at = now
    out.state = run.state


def _apply_state(session: Session, run: Run, derived: tuple[str, str], last_event: RunEvent | None, now: float,
                 out: Outcome) -> None:
    state, reason = derived
    if state == run.state and (state != "damaged" or reason == run.state_reason):
        return
    if last_event is None or last_event.state != state:  # else events.jsonl records it already
        session.add(RunEvent(run_id=run.id, time=now, state=state, reason=reason[:2000], attempt=run.attempts,
                             source="derived"))
        out.event_rows += 1
    run.state, run.state_reason, run.state_at = state, reason, now
    out.changed = True


def _gone(engine: Engine, run_id_: str, run_dir: Path, now: float) -> Outcome:
    """A known run whose directory is gone: damaged if it had a result or a job, else left as planned."""
    out = Outcome()

    def write() -> Outcome:
        with write_session(engine) as s:
            run = s.get(Run, run_id_)
            if run is None:
                return out
            had = s.get(Result, run_id_) is not None or run.state not in ("planned", "damaged")
            if had or run.state == "damaged":
                _apply_state(s, run, ("damaged", f"run directory {run_dir} is gone"), None, now, out)
            out.state = run.state
        return out

    return retry_locked(write)


def _ingest_one(engine: Engine, run_dir: Path, snap: _Snapshot | None, known: bool, now: float, timeout_s: float) -> Outcome:
    out = Outcome()
    if known and not os.path.isdir(run_dir):
        return _gone(engine, run_dir.name, run_dir, now)
    if known and not _needs_update(snap, run_dir, now, timeout_s):
        out.state = snap.state if snap else ""
        return out

    def write() -> Outcome:
        o = Outcome()
        with write_session(engine) as s:
            run = s.get(Run, run_dir.name)
            if run is None:
                run = _create_row(s, run_dir, now)
                o.created = True
            _ingest_locked(s, run, run_dir, now, timeout_s, o)
        return o

    return retry_locked(write)


def ingest_run(
    engine: Engine, run_dir: Path | str, *, heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S, now: float | None = None
) -> str:
    """Ingest one run directory (named by its run id); returns the run's state.

    Raises ConfigError if the database does not know the run and its config.json is missing or bad,
    RunFileError if a file may not be read (a symlink out of the run, a FIFO).
    """
    run_dir = Path(run_dir)
    now = time.time() if now is None else now
    with read_session(engine) as s:
        run = s.get(Run, run_dir.name)
        tags = s.get(RunTags, run_dir.name)
        snap = _Snapshot.of(run, tags.file_mtime if tags is not None else None) if run is not None else None
    return _ingest_one(engine, run_dir, snap, run is not None, now, heartbeat_timeout_s).state


def _run_dirs(root: Path, wanted: set[str] | None, known: set[str], stats: "IngestStats") -> dict[str, Path]:
    """The run directories under `root` (plain folders inside it); anything else is reported, not followed."""
    dirs: dict[str, Path] = {}
    if not root.is_dir():
        return dirs
    real_root = os.path.realpath(root)
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as e:
        stats.errors.append(f"{root}: cannot list: {e.strerror or e}")
        return dirs
    for entry in entries:
        if entry.name.startswith(".") or (wanted is not None and entry.name not in wanted):
            continue
        path = Path(entry.path)
        try:
            if entry.is_symlink():
                target = os.path.realpath(entry.path)
                if os.path.dirname(target) != real_root and not target.startswith(real_root + os.sep):
                    stats.errors.append(f"{path}: refused: a symlink out of the runs folder (to {target})")
                    continue
                if not os.path.isdir(target):
                    stats.errors.append(f"{path}: skipped: a symlink that leads to no folder (a loop, or missing)")
                    continue
            elif not entry.is_dir(follow_symlinks=False):
                if is_run_id(entry.name) or entry.name in known:  # where a run directory should be
                    stats.errors.append(f"{path}: skipped: not a folder")
                continue
        except OSError as e:
            stats.errors.append(f"{path}: skipped: {e.strerror or e}")
            continue
        if entry.name in known or os.path.lexists(os.path.join(entry.path, CONFIG_FILE)):
            dirs[entry.name] = path
    return dirs


def sync_runs(
    engine: Engine,
    runs_root: Path | str,
    *,
    heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S,
    now: float | None = None,
    run_ids: Iterable[str] | None = None,
) -> IngestStats:
    """Ingest every run dir under `runs_root`: `<runs_root>/<run id>` for every known run (never a folder the
    database recorded elsewhere: a copied project syncs its own runs) and every run folder found there.

    `run_ids` limits it to those runs. A bad run dir is reported in
    `stats.errors` and skipped; it never stops the others.
    """
    root = Path(runs_root)
    now = time.time() if now is None else now
    wanted = set(run_ids) if run_ids is not None else None
    with read_session(engine) as s:
        q = select(Run, RunTags.file_mtime).outerjoin(RunTags, RunTags.run_id == Run.id)
        if wanted is not None:
            q = q.where(Run.id.in_(wanted))
        snaps = {r.id: (_Snapshot.of(r, tags_mtime), r.run_dir) for r, tags_mtime in s.execute(q)}
    stats = IngestStats()
    dirs = _run_dirs(root, wanted, set(snaps), stats)
    _check_is_this_projects(engine, root, snaps, dirs)
    if not root.is_dir():  # the project's own folder not made yet (nothing ran): nothing to read
        stats.errors.append(f"{root}: no runs folder there (nothing synced)")
        return stats
    for rid, (recorded, _) in snaps.items():
        if rid in dirs:
            continue
        path = root / rid
        if os.path.isdir(path) or recorded.result_mtime is not None or recorded.state not in ("planned", "damaged"):
            dirs[rid] = path  # a known run whose folder is gone is judged by _gone; a planned one waits for its plan
    for rid, run_dir in dirs.items():
        stats.runs_seen += 1
        known = snaps.get(rid)
        snap = known[0] if known is not None else None
        try:
            out = _ingest_one(engine, run_dir, snap, rid in snaps, now, heartbeat_timeout_s)
        except (CemError, OSError, ValueError, ArithmeticError) as e:  # one bad run dir never stops a sync
            stats.errors.append(" ".join(f"{run_dir}: {e}".split()) if not isinstance(e, CemError) else str(e))
            continue
        stats.ingested += 1
        stats.runs_created += out.created
        stats.runs_changed += out.changed and not out.created
        stats.metric_rows += out.metric_rows
        stats.event_rows += out.event_rows
        stats.results += out.result
        stats.eval_rows += out.eval_rows
        stats.bad_lines += out.bad_lines
        stats.warnings += out.warnings or []
        if out.state:
            stats.states[out.state] += 1
    return stats


class NotThisProjectsRuns(CemError):
    """A runs folder that holds none of the runs the database recorded elsewhere: read, it would make them all gone."""


def _check_is_this_projects(engine: Engine, root: Path, snaps: dict[str, Any], dirs: dict[str, Path]) -> None:
    """Refuse (one line, nothing synced) a runs folder other than the one the database recorded that lacks any of
    the runs that have had a folder (a typo'd --runs-dir, a stale $CEMCTL_RUNS, a folder that is not there, a part
    of a copy): read, those runs would be marked gone. The recorded folder itself may lose runs (deleted on
    purpose): those are gone, as they are."""
    from cemctl.db.roots import recorded_runs_root

    started = [rid for rid, (snap, _) in snaps.items() if snap.result_mtime is not None or snap.state != "planned"]
    held = sum(rid in dirs for rid in started)
    if held == len(started):
        return
    recorded = recorded_runs_root(engine)
    if recorded is None or os.path.realpath(recorded) == os.path.realpath(root):
        return
    with read_session(engine) as s:  # said of every run that has had a folder, not only the ones read now
        started = list(s.scalars(select(Run.id).where(Run.state != "planned")))
    held = sum(os.path.isdir(root / rid) for rid in started)
    if root.is_dir():
        what = f"{root} holds {held or 'none'} of the {len(started)} runs the results database recorded in {recorded}"
    else:
        what = (f"{root} is {'not a folder' if os.path.lexists(root) else 'not there'}; the results database "
                f"recorded its {len(started)} runs in {recorded}")
    raise NotThisProjectsRuns(f"{what}; nothing was read: give --runs-dir {recorded} (or unset CEMCTL_RUNS) to use "
                              "the project's runs folder")


def set_state(
    engine: Engine,
    run_id: str,
    state: str,
    reason: str = "",
    *,
    executor: str | None = None,
    job_id: str | None = None,
    attempt: int | None = None,
    time_s: float | None = None,
    runs_root: Path | str | None = None,
    **fields: Any,
) -> Run:
    """Record a state transition: append it to `<runs root>/<run id>/events.jsonl`, then ingest the run.

    `runs_root`: the project's runs folder (default: the one the database recorded). Extra `fields`
    (host, pid, ...) go into the event line. Returns the updated row. Raises CemError for an unknown
    run or state.
    """
    from cem_core.runfiles import RUN_STATES, append_event
    from cemctl.db.roots import recorded_runs_root
    from cemctl.db.runs import get_run, run_folder

    if state not in RUN_STATES:
        raise CemError(f"state: unknown state {state!r} (allowed: {', '.join(RUN_STATES)})")
    run = get_run(engine, run_id)
    if run is None:
        raise CemError(f"run: unknown run id {run_id!r}")
    root = runs_root if runs_root is not None else recorded_runs_root(engine)
    if root is None:
        raise CemError(f"run {run_id}: no runs folder given or recorded")
    run_dir = run_folder(root, run_id)
    append_event(run_dir, state, reason, time_s=time_s, executor=executor, job_id=job_id, attempt=attempt, **fields)
    ingest_run(engine, run_dir)
    updated = get_run(engine, run_id)
    assert updated is not None
    return updated
