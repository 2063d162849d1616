"""Reading and writing experiments and runs (`cemctl plan`, `launch`, `status`, `cancel`).

    record_plan(engine, plan, runs_root) -> RecordedPlan(experiment_id, states, created)
    set_state(engine, run_id, "queued", "submitted", executor="slurm", job_id="123")
    list_runs(engine, experiment="fig2a", states=("planned", "failed"))
    get_run(engine, run_id); get_experiment(engine, name); list_experiments(engine)
    run_config(run) -> RunConfig

Run identity is the config hash (`cem_core.config.run_id`): recording the same
grid twice adds nothing; changing one value adds exactly the new runs. Known
runs keep their state. `set_state` appends the transition to the run
directory's events.jsonl (the ground truth) and ingests it, so the database
and the files never disagree.

Run folders are `<runs root>/<run id>`, always (`run_folder`); which runs root a
command uses is `cemctl.db.roots.resolve_runs_root` (re-exported here).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Protocol, Sequence

from sqlalchemy import case, column, delete, func, select, text
from sqlalchemy.engine import Engine

from cem_core.config import RunConfig, canonical_json
from cem_core.plugins import PLUGINS_DIR, PluginCopyError, sync_plugin_copy
from cem_core.runfiles import CONFIG_FILE, RunFileError, config_of_record
from cem_core.errors import CemError, ConfigError
from cemctl.db.engine import read_session, retry_locked, write_session
from cemctl.db.read import IN_GRID, LATEST_PLANS
from cemctl.db.models import RUN_STATES, Experiment, ExperimentRun, Run, RunEvent
from cemctl.db.roots import DefaultRunsRoot as DefaultRunsRoot  # re-exported
from cemctl.db.roots import recorded_runs_root as recorded_runs_root
from cemctl.db.roots import resolve_runs_root as resolve_runs_root
from cemctl.db.roots import notice_once


class PlannedRunLike(Protocol):
    run_id: str
    config: RunConfig  # resolved
    axes: dict[str, Any]
    marks: list[str]


class PlanLike(Protocol):
    name: str
    description: str
    figure: str
    path: str
    text: str
    sha256: str
    scale: str
    overrides: dict[str, Any]
    runs: Sequence[PlannedRunLike]


def run_folder(runs_root: Path | str, run_id: str) -> Path:
    """The folder of a run: `<runs root>/<run id>`, whatever the database recorded earlier."""
    return Path(runs_root) / run_id


def stored_run_dir(engine: Engine, run_dir: Path | str) -> str:
    """What the database records as a run's folder: relative to the SQLite database's own folder when it lies
    below it (so a copied project keeps working), else absolute. Informational: folders are always
    `<runs root>/<run id>`; the record only tells which runs root the project used."""
    from cemctl.db.read import open_reader

    path = Path(os.path.abspath(run_dir))
    base = open_reader(engine).folder
    if base is not None:
        try:
            return path.relative_to(base).as_posix()
        except ValueError:
            pass
    return str(path)


def refresh_plugin_copy(root: Path) -> None:
    """Refresh the runs root's `.plugins/` copy the jobs import from the plugin sources (`cem_core.plugins`), so a
    job runs the code a command just read. Only commands that write call it. An edit made inside the copy is refused
    (one line); a copy that cannot be written now (a read-only or full disk) is left as it is, with a notice."""
    copy = root / PLUGINS_DIR
    if not os.path.lexists(copy):
        return
    try:
        sync_plugin_copy(root)
    except PluginCopyError:
        raise
    except (OSError, RunFileError) as e:
        notice_once((str(copy), "refresh"), f"note: the copy of the plugin sources in {copy} could not be refreshed "
                    f"({getattr(e, 'strerror', None) or e}); commands read the sources, jobs the copy")


def run_config(run: Run) -> RunConfig:
    """The resolved RunConfig stored with a run."""
    return config_of_record(run.config_json, run.id)


def new_run_row(run_id: str, cfg: RunConfig, run_dir: Path | str | None, now: float) -> Run:
    from cem_core.config import total_steps

    return Run(
        id=run_id,
        config_json=canonical_json(cfg.to_dict()),
        state="planned",
        state_reason="planned",
        state_at=now,
        attempts=0,
        run_dir=str(run_dir) if run_dir is not None else None,
        created_at=now,
        updated_at=now,
        total_steps=total_steps(cfg),
        metrics_offset=0,
        metrics_fingerprint="",
        events_offset=0,
        events_fingerprint="",
        events_lines=0,
        **_counts(cfg),
    )


def _counts(cfg: RunConfig) -> dict[str, int | None]:
    """The run's parameter and FLOP counts; unknown (None) for a config whose plugin is not loaded here (an archive's,
    not trusted: its counts come with its result.json)."""
    from cem_core.counts import run_counts

    try:
        return dict(run_counts(cfg))
    except ConfigError:
        if not cfg.plugins:
            raise
        return {"params_total": None, "params_non_embedding": None, "flops_per_token": None}


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def overrides_key(overrides: dict[str, Any]) -> str:
    """The canonical text of a `--set` override set: one of the two parts of a plan key (with the scale)."""
    return json.dumps(overrides or {}, sort_keys=True, default=str)


class ExperimentClash(CemError):
    """A second grid file claims an experiment name that another grid file already recorded."""


def archived_grid_path(archive: str, grid_file: str) -> str:
    """The grid path an experiment imported from `archive` records: `ARCHIVE:FILE`, never a file here."""
    return f"{archive}:{grid_file}" if archive else grid_file


def archived_grid_member(grid_path: str | None) -> str:
    """The grid file named by an imported experiment's `ARCHIVE:FILE` grid path; '' for any other path."""
    head, sep, member = Path(str(grid_path or "")).name.rpartition(":")
    return member if sep and head.endswith(".tar.gz") else ""


def _same_grid(exp: Experiment, path: str, sha256: str) -> bool:
    """The same file (by path) or the same text (a copy, e.g. the packaged grid beside a checkout's)."""
    if not exp.grid_path or not path:
        return True
    if sha256 and exp.grid_sha256 == sha256:
        return True
    try:
        return Path(exp.grid_path).resolve() == Path(path).resolve()
    except OSError:
        return exp.grid_path == path


def _clash(exp: Experiment | None, plan: PlanLike) -> None:
    """`ExperimentClash` when `exp` (the experiment of the plan's name here) is another grid file's."""
    if exp is not None and not _same_grid(exp, str(plan.path), plan.sha256):
        imported = bool(archived_grid_member(exp.grid_path))  # an import's copy of a grid
        raise ExperimentClash(
            f"{plan.path}: experiment.name: {plan.name!r} is already the experiment of {exp.grid_path} "
            "(another grid file); give this grid its own [experiment] name"
            + (f", or, to go on with the imported experiment from this file, `cemctl forget {plan.name}` first "
               "(runs that hold results are kept)" if imported else ""))


def check_plan(engine: Engine, plan: PlanLike) -> None:
    """What `record_plan` would refuse, checked without writing anything (`cemctl import` asks before a run folder
    moves): a name that cannot name a folder (ConfigError), another grid's experiment of that name
    (`ExperimentClash`). The one rule; `record_plan` applies it again inside its transaction."""
    from cem_core.names import check_experiment_name

    check_experiment_name(plan.name, plan.path or None)
    with read_session(engine) as s:
        _clash(s.scalars(select(Experiment).where(Experiment.name == plan.name)).one_or_none(), plan)


@dataclass
class RecordedPlan:
    experiment_id: int
    states: dict[str, str]  # run_id -> state, in grid order (known runs keep theirs)
    created: set[str]  # run ids this call added


def record_plan(engine: Engine, plan: PlanLike, runs_root: Path | str) -> RecordedPlan:
    """Record the experiment and its runs (idempotent).

    Links are kept per plan key (scale, `--set` overrides): this plan refreshes the
    links of its own runs (`planned_at` = now), so the runs of other scales and
    override sets stay linked (and shown). Runs that left the grid (an edited axis
    value, a dropped seed, a new [[exclude]]) keep their older link: they are
    "no longer in the grid" (`cemctl.db.read.IN_GRID`), still listed by status and report,
    never launched by name again. A grid file other than the experiment's own
    (another path with other content) raises `ExperimentClash`.
    """
    from cem_core.names import check_experiment_name

    check_experiment_name(plan.name, plan.path or None)  # it names folders (reports/<name>): never a path
    root = Path(str(runs_root)).resolve()
    key = overrides_key(getattr(plan, "plan_overrides", plan.overrides))

    def write() -> RecordedPlan:
        now = time.time()
        with write_session(engine) as s:
            exp = s.scalars(select(Experiment).where(Experiment.name == plan.name)).one_or_none()
            _clash(exp, plan)
            if exp is None:
                exp = Experiment(name=plan.name, created_at=now)
                s.add(exp)
            exp.description = plan.description
            exp.figure = plan.figure
            exp.grid_path = str(plan.path)
            exp.grid_text = plan.text
            exp.grid_sha256 = plan.sha256
            exp.scale = plan.scale
            exp.overrides_json = key
            exp.updated_at = now
            s.flush()
            ids = [r.run_id for r in plan.runs]
            known: dict[str, Run] = {}
            created: set[str] = set()
            for chunk in range(0, len(ids), 500):
                for run in s.scalars(select(Run).where(Run.id.in_(ids[chunk : chunk + 500]))):
                    known[run.id] = run
            for pr in plan.runs:
                if pr.run_id not in known:
                    run = new_run_row(pr.run_id, pr.config, stored_run_dir(engine, root / pr.run_id), now)
                    run.config_mtime = _mtime(root / pr.run_id / CONFIG_FILE)  # the config.json just planned
                    s.add(run)
                    s.add(RunEvent(run_id=pr.run_id, time=now, state="planned", reason=f"planned by {plan.name}", source="derived"))
                    known[pr.run_id] = run
                    created.add(pr.run_id)
                else:  # the runs root this project uses now
                    known[pr.run_id].run_dir = stored_run_dir(engine, root / pr.run_id)
            s.flush()
            for chunk in range(0, len(ids), 500):  # this plan's runs are re-linked; the others keep their old link
                s.execute(delete(ExperimentRun).where(ExperimentRun.experiment_id == exp.id,
                                                      ExperimentRun.scale == plan.scale,
                                                      ExperimentRun.overrides_json == key,
                                                      ExperimentRun.run_id.in_(ids[chunk : chunk + 500])))
            s.add_all(
                ExperimentRun(
                    experiment_id=exp.id,
                    scale=plan.scale,
                    overrides_json=key,
                    run_id=pr.run_id,
                    axes_json=json.dumps(pr.axes, default=str),  # in the grid file's axis order (plan's, status's)
                    # the run's place in the grid's whole expansion: a plan that keeps only some runs (a round of
                    # --until-decided) links them where the grid has them, not at 0, 1, ... again
                    position=pos if (pos := getattr(pr, "position", -1)) >= 0 else i,
                    marks_json=json.dumps(list(getattr(pr, "marks", []) or [])),
                    planned_at=now,
                )
                for i, pr in enumerate(plan.runs)
            )
            return RecordedPlan(exp.id, {rid: known[rid].state for rid in ids}, created)

    return retry_locked(write)


def get_run(engine: Engine, run_id: str) -> Run | None:
    with read_session(engine) as s:
        return s.get(Run, run_id)


def get_experiment(engine: Engine, name: str) -> Experiment | None:
    with read_session(engine) as s:
        return s.scalars(select(Experiment).where(Experiment.name == name)).one_or_none()


def list_experiments(engine: Engine) -> list[Experiment]:
    with read_session(engine) as s:
        return list(s.scalars(select(Experiment).order_by(Experiment.name)))


def list_runs(
    engine: Engine,
    experiment: str | None = None,
    states: Iterable[str] | None = None,
    run_ids: Iterable[str] | None = None,
    *,
    scale: str | None = None,
    in_grid_only: bool = False,
) -> list[Run]:
    """Runs (in grid order for an experiment, else by creation), optionally filtered by state/ids.

    An experiment's runs are those of every plan key (each run once), or of one `scale`; with
    `in_grid_only`, not the runs that left the grid (`cemctl launch EXPERIMENT` starts only those in it).
    Raises CemError for an unknown experiment or state (naming the known ones).
    """
    with read_session(engine) as s:
        q = select(Run)
        if experiment is not None:
            exp = s.scalars(select(Experiment).where(Experiment.name == experiment)).one_or_none()
            if exp is None:
                known = ", ".join(s.scalars(select(Experiment.name).order_by(Experiment.name))) or "none yet; run cemctl plan"
                raise CemError(f"experiment: unknown experiment {experiment!r} (known: {known})")
            links = text(f"""SELECT er.run_id AS run_id, MIN(er.position) AS pos, MAX({IN_GRID}) AS in_grid
                FROM experiment_runs er JOIN {LATEST_PLANS} WHERE er.experiment_id = :eid
                {"AND er.scale = :scale" if scale is not None else ""} GROUP BY er.run_id""").columns(
                column("run_id"), column("pos"), column("in_grid")).bindparams(
                eid=exp.id, **({"scale": scale} if scale is not None else {})).subquery()
            q = q.join(links, links.c.run_id == Run.id).order_by(links.c.in_grid.desc(), links.c.pos, Run.id)
            if in_grid_only:
                q = q.where(links.c.in_grid == 1)
        else:
            q = q.order_by(Run.created_at, Run.id)
        if states is not None:
            states = list(states)
            bad = [st for st in states if st not in RUN_STATES]
            if bad:
                raise CemError(f"state: unknown state {bad[0]!r} (allowed: {', '.join(RUN_STATES)})")
            q = q.where(Run.state.in_(states))
        if run_ids is not None:
            q = q.where(Run.id.in_(list(run_ids)))
        return list(s.scalars(q))


@dataclass
class ScaleSummary:
    """The runs an experiment has at one scale (every override set together)."""

    scale: str
    planned_at: float  # the latest plan at this scale
    runs: int
    done: int


def scale_summaries(engine: Engine, experiment: str) -> list[ScaleSummary]:
    """One summary per scale the experiment was planned at, most recently planned first."""
    with read_session(engine) as s:
        exp_id = s.scalars(select(Experiment.id).where(Experiment.name == experiment)).one_or_none()
        if exp_id is None:
            return []
        links = (select(ExperimentRun.scale, ExperimentRun.run_id, func.max(ExperimentRun.planned_at).label("t"))
                 .where(ExperimentRun.experiment_id == exp_id)
                 .group_by(ExperimentRun.scale, ExperimentRun.run_id).subquery())
        rows = s.execute(
            select(links.c.scale, func.max(links.c.t), func.count(), func.sum(case((Run.state == "done", 1), else_=0)))
            .join(Run, Run.id == links.c.run_id)
            .group_by(links.c.scale)
        ).all()
    out = [ScaleSummary(sc, t or 0.0, int(n), int(d or 0)) for sc, t, n, d in rows]
    return sorted(out, key=lambda x: -x.planned_at)


def pick_scale(engine: Engine, experiment: str, scale: str | None, *, need_done: bool = True) -> str | None:
    """The scale a command about one experiment uses: `scale` if planned, else the most recently planned
    scale with finished runs (or any, when `need_done` is false). None when the experiment has no links."""
    summaries = scale_summaries(engine, experiment)
    if not summaries:
        return None
    known = ", ".join(f"{x.scale or '(none)'} ({x.done}/{x.runs} done)" for x in summaries)
    if scale is not None:
        if scale not in {x.scale for x in summaries}:
            raise CemError(f"--scale: experiment {experiment!r} has no runs at scale {scale!r} (planned: {known})")
        return scale
    usable = [x for x in summaries if x.done] if need_done else summaries
    return (usable or summaries)[0].scale


def run_axes(engine: Engine, experiment: str) -> dict[str, dict[str, Any]]:
    """{run_id: varied axes} of an experiment."""
    with read_session(engine) as s:
        rows = s.execute(
            select(ExperimentRun.run_id, ExperimentRun.axes_json)
            .join(Experiment, Experiment.id == ExperimentRun.experiment_id)
            .where(Experiment.name == experiment)
        )
        return {rid: json.loads(axes or "{}") for rid, axes in rows}


def run_events(engine: Engine, run_id: str) -> list[RunEvent]:
    with read_session(engine) as s:
        return list(s.scalars(select(RunEvent).where(RunEvent.run_id == run_id).order_by(RunEvent.time, RunEvent.id)))
