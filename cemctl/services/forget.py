"""Undo a plan (`cemctl forget EXPERIMENT [--dry-run]`): an experiment planned by mistake leaves the database.

    result = forget_experiment(db_url, "fig2a_copy", runs_root, dry_run=False)
    result.summary()   # 'forgot experiment fig2a_copy: its plan (8 runs), its claims (3); removed 8 planned runs ...'

What goes: the experiment's row, its plan (its links to runs, every scale and override set) and with
them its `[[claim]]` tables (they live in the recorded grid text, so `cemctl claims` no longer counts
them). What may go: a run that no other experiment links any more, and only with proof that it holds
nothing: no result, no checkpoint, no metrics, no tags or notes, no job ever recorded, in the
database and in its folder, whose only file is the config.json plan wrote. Such a run's folder is
removed (its config.json, then the empty folder: a file that appears meanwhile keeps it) and its
row too. Anything else stays and is named with what it holds: a run folder with results or linked
from another experiment is never touched, only unlinked from this one. Torch-free; one write
transaction for the database.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cem_core.errors import CemError
from cem_core.runfiles.lock import CLAIM_FILE, claim_run

PLANNED_FILES = {"config.json", CLAIM_FILE}  # what plan writes into a run's folder, and a launch's claim of it


@dataclass
class KeptRun:
    run_id: str
    why: str  # what it holds ("result.json, metrics.jsonl"), or "linked from fig2b"


@dataclass
class ForgetResult:
    experiment: str
    dry_run: bool
    links: int = 0  # run links of its plan
    claims: list[str] = field(default_factory=list)  # the claim ids its grid declared
    removed: list[str] = field(default_factory=list)  # runs removed (folder and row): they held nothing
    kept: list[KeptRun] = field(default_factory=list)  # runs nobody links any more that hold something
    shared: list[str] = field(default_factory=list)  # runs other experiments link: only unlinked from this one

    def lines(self) -> list[str]:
        from cem_core.names import plural

        verb = "would forget" if self.dry_run else "forgot"
        claims = f", its claims ({', '.join(self.claims)})" if self.claims else ""
        out = [f"{verb} experiment {self.experiment}: its plan ({plural(self.links, 'run link')}){claims}"]
        gone = "would remove" if self.dry_run else "removed"
        if self.removed:
            out.append(f"{gone} {plural(len(self.removed), 'planned run')} that held nothing (folder and row): "
                       + ", ".join(r[:8] for r in self.removed))
        if self.shared:
            out.append(f"kept {plural(len(self.shared), 'run')} other experiments link: "
                       + ", ".join(r[:8] for r in self.shared))
        if self.kept:
            out.append(f"kept {plural(len(self.kept), 'run')} that nobody links any more but hold files: "
                       + "; ".join(f"{k.run_id[:8]} ({k.why})" for k in self.kept))
        return out


def _folder_holds(run_dir: Path, run_id: str) -> str:
    """What a run folder holds beyond the config.json plan wrote ('' when nothing; the folder may be absent)."""
    from cem_core.runfiles import CONFIG_FILE, read_run_config

    if os.path.islink(run_dir):
        return "a symbolic link"
    if not run_dir.exists():
        return ""
    if not run_dir.is_dir():
        return "not a folder"
    try:
        names = sorted(os.listdir(run_dir))
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    extra = [n for n in names if n not in PLANNED_FILES]
    if extra:
        return ", ".join(extra[:6]) + (f" and {len(extra) - 6} more" if len(extra) > 6 else "")
    if CONFIG_FILE in names:
        from cem_core.config import run_id as config_run_id
        from cem_core.errors import ConfigError

        try:  # the one reader of config.json (strict: any bad shape is a ConfigError)
            if config_run_id(read_run_config(run_dir).config) != run_id:
                return "a config.json that is not this run's"
        except (ConfigError, OSError, ValueError):
            return "a config.json that is not this run's"
    return ""


def _database_holds(session: Any, run: Any) -> str:
    """What the database holds of a run beyond its plan ('' when nothing)."""
    from sqlalchemy import func, select

    from cemctl.db.models import Eval, Metric, Result, RunEvent, RunTags
    from cemctl.db.projection import holds_rows

    held = []
    if run.state != "planned":
        held.append(f"state {run.state}")
    if session.get(Result, run.id) is not None:
        held.append("a result")
    if session.scalar(select(func.count()).select_from(Metric).where(Metric.run_id == run.id)):
        held.append("metrics")
    if session.scalar(select(func.count()).select_from(Eval).where(Eval.run_id == run.id)):
        held.append("evaluations")
    tags = session.get(RunTags, run.id)
    if tags is not None and (tags.tags_json not in ("", "{}") or tags.notes_json not in ("", "[]")):
        held.append("tags or notes")
    events = session.scalars(select(RunEvent.state).where(RunEvent.run_id == run.id)).all()
    if any(state != "planned" for state in events):
        held.append("events beyond its plan")
    if run.job_id or run.attempts:
        held.append("a job")
    named = {Metric.__tablename__, Result.__tablename__, Eval.__tablename__, RunTags.__tablename__,
             RunEvent.__tablename__}
    held += [f"rows in {name}" for name in holds_rows(session, run.id) if name not in named]  # any table added later
    return ", ".join(held)


def forget_experiment(db_url: str, experiment: str, runs_root: Path | str, *, dry_run: bool = False) -> ForgetResult:
    """Remove `experiment`'s plan and claims from the database, and the planned runs only it linked that provably
    hold nothing (folder and row). Raises CemError for an unknown experiment (naming the known ones)."""
    from sqlalchemy import delete, select

    from cemctl.db import open_db, sync_runs
    from cemctl.db.engine import open_existing_db, read_session, retry_locked, write_session
    from cemctl.db.models import Experiment, ExperimentRun, Run
    from cemctl.db.projection import remove_runs
    from cemctl.db.runs import resolve_runs_root
    from cemctl.grid.claims import recorded_claims

    engine = open_existing_db(db_url) if dry_run else open_db(db_url, create=False)
    root = resolve_runs_root(engine, runs_root)
    session = read_session if dry_run else write_session  # a dry run writes nothing
    with read_session(engine) as s:
        exp = s.scalars(select(Experiment).where(Experiment.name == experiment)).one_or_none()
        if exp is None:
            known = ", ".join(s.scalars(select(Experiment.name).order_by(Experiment.name))) or "none"
            raise CemError(f"forget: unknown experiment {experiment!r} (known: {known})")
        run_ids = sorted(set(s.scalars(select(ExperimentRun.run_id).where(ExperimentRun.experiment_id == exp.id))))
    if not dry_run and run_ids:  # the folders' latest evidence first: a run that started since is not "planned"
        sync_runs(engine, root, run_ids=run_ids)

    def write() -> ForgetResult:
        result = ForgetResult(experiment, dry_run)
        with session(engine) as s:
            exp = s.scalars(select(Experiment).where(Experiment.name == experiment)).one_or_none()
            if exp is None:
                raise CemError(f"forget: experiment {experiment!r} is gone (forgotten meanwhile)")
            links = s.scalars(select(ExperimentRun).where(ExperimentRun.experiment_id == exp.id)).all()
            result.links = len(links)
            result.claims = [c.id for c in recorded_claims(exp.grid_text, exp.grid_path or exp.name)]
            ids = sorted({link.run_id for link in links})
            others = set(s.scalars(select(ExperimentRun.run_id).where(ExperimentRun.experiment_id != exp.id,
                                                                       ExperimentRun.run_id.in_(ids))))
            removable = []
            for rid in ids:
                if rid in others:
                    result.shared.append(rid)
                    continue
                run = s.get(Run, rid)
                held = [h for h in ((_database_holds(s, run) if run is not None else ""),
                                    _folder_holds(root / rid, rid)) if h]
                if held:
                    result.kept.append(KeptRun(rid, "; ".join(held)))
                else:
                    removable.append(rid)
            if dry_run:
                result.removed = removable
                return result
            for rid in removable:  # the folder first: one that proves it holds nothing goes, else the run stays
                with claim_run(root / rid) as mine:  # never while a launch is starting it
                    if not mine and (root / rid).is_dir():
                        result.kept.append(KeptRun(rid, "a launch is starting it now"))
                    elif _remove_planned_folder(root / rid, rid):
                        result.removed.append(rid)
                    else:
                        result.kept.append(KeptRun(rid, _folder_holds(root / rid, rid) or "its folder could not be removed"))
            s.execute(delete(ExperimentRun).where(ExperimentRun.experiment_id == exp.id))
            remove_runs(s, result.removed)  # every row keyed by them (the schema's run-keyed tables), then theirs
            s.delete(exp)
        return result

    return write() if dry_run else retry_locked(write)


def _remove_planned_folder(run_dir: Path, run_id: str) -> bool:
    """Remove a run folder that holds only the config.json plan wrote: that file, then the (empty) folder; a file
    that appeared meanwhile makes rmdir fail and the folder stays. True when the folder is gone."""
    if not run_dir.exists():
        return True
    if _folder_holds(run_dir, run_id):
        return False
    try:
        for name in os.listdir(run_dir):
            if name in PLANNED_FILES:
                os.unlink(run_dir / name)
        os.rmdir(run_dir)
    except OSError:
        return False
    return True
