"""Launch an experiment's runs (`cemctl launch FILE|EXPERIMENT`): the one library call behind the command.

    report = launch(LaunchRequest(target="experiments/demo.toml", executor="local"), db_url, runs_root)

Steps: plan (a grid file is validated, its run dirs' config.json written and
the runs recorded, `cemctl.grid.plan_experiment`; an experiment name reuses
the recorded runs), sync the run dirs, select what to (re)start
(`select.py`: done runs never run twice), snapshot the code
(`snapshot.py`), then hand the jobs to the executor: the local executor runs
them in the foreground (with a live progress view) and returns when they
end; the SLURM executor submits arrays and returns at once. `dry_run` stops
after the selection. SLURM options: the grid file's `[slurm]` table, then
the command line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from cem_core import runfiles
from cem_core.errors import CemError, ConfigError
from cemctl.executors import get_executor
from cemctl.executors.base import Job, Submitted, code_env
from cemctl.services.launch.select import SKIP, Selection, select_runs


@dataclass
class LaunchRequest:
    target: str  # grid file or experiment name
    executor: str = "local"
    scale: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)  # --set key=value
    retry_failed: bool = False
    redo_damaged: bool = False  # repair damaged runs (files moved aside, recorded config restored) and rerun them
    rerun_outdated: bool = False  # train again the finished runs trained by older model code (files moved aside)
    dry_run: bool = False
    run_ids: list[str] | None = None  # only these runs of the experiment
    # local executor
    gpus: list[int] | None = None
    jobs_per_gpu: int = 1
    gpus_per_run: int = 1
    workers: int | None = None
    # slurm executor: SlurmOptions fields given on the command line (None = from the grid file)
    slurm: dict[str, Any] = field(default_factory=dict)
    heartbeat_timeout_s: float | None = None
    prepare: bool = False  # slurm: prepare missing data on this node first (local always does)
    data_workers: int | None = None  # tokenizer processes when data is prepared here (default: the CPU count)
    seeds: list[int] | None = None  # --seeds: replace the grid's seed list (finished runs are kept)
    add_seeds: int = 0  # --add-seeds N: N more seeds after the grid's
    axes: dict[str, list[Any]] = field(default_factory=dict)  # --axis key=v1,v2: axes added to the grid file's
    snapshot: bool = True  # run jobs from a code snapshot (tests of the executor may turn it off)
    job_env: dict[str, str] = field(default_factory=dict)  # extra environment for every job
    keep_run: Callable[[Any], bool] | None = None  # plan only the grid's runs it keeps (--until-decided's rounds)


@dataclass
class LaunchReport:
    experiment: str
    executor: str
    selections: list[Selection]
    submitted: list[Submitted] = field(default_factory=list)
    snapshot: str = ""
    dry_run: bool = False
    prepared: list[str] = field(default_factory=list)  # data caches prepared by this launch
    axes: dict[str, dict[str, Any]] = field(default_factory=dict)  # run id -> its varied axes (for displays)

    @property
    def launched(self) -> list[Selection]:
        return [s for s in self.selections if s.launches]

    def summary(self) -> str:
        n = len(self.launched)
        skipped = len(self.selections) - n
        verb = "would launch" if self.dry_run else "launched"
        text = f"{self.experiment}: {verb} {n} of {len(self.selections)} runs with the {self.executor} executor"
        if skipped:
            text += f" ({skipped} skipped)"
        if self.submitted:
            states: dict[str, int] = {}
            for s in self.submitted:
                states[s.state] = states.get(s.state, 0) + 1
            text += "; " + ", ".join(f"{k} {v}" for k, v in sorted(states.items()))
        if self.snapshot:
            text += f"; code snapshot {self.snapshot}"
        return text

    @property
    def failed(self) -> list[Submitted]:
        """The launched runs that ended failed (the local executor; a cluster's jobs are only queued here)."""
        return [s for s in self.submitted if s.state == "failed"]

    def failure_summary(self) -> str:
        """'2 of 4 runs failed; the first, 3fa2c1d0: SyntaxError: invalid syntax (my_layer/layers.py:34); fix it,
        then `cemctl launch EXP --retry-failed`' ('' when none failed): how many, and the first one's reason."""
        from cem_core.names import plural
        from cem_core.runfiles.failure import last_line

        failed = self.failed
        if not failed:
            return ""
        first = failed[0]
        why = last_line(first.reason) or "no reason recorded (see `cemctl logs`)"
        return f"{len(failed)} of {plural(len(self.submitted), 'run')} failed; the first, {first.run_id[:8]}: {why}"

    def to_json(self) -> dict[str, Any]:
        by_id = {s.run_id: s for s in self.submitted}
        return {
            "experiment": self.experiment, "executor": self.executor, "dry_run": self.dry_run, "snapshot": self.snapshot,
            "runs": [
                {
                    "run_id": s.run_id, "action": s.action, "reason": s.reason,
                    "job_id": by_id[s.run_id].job_id if s.run_id in by_id else None,
                    "state": by_id[s.run_id].state if s.run_id in by_id else None,
                    "end_reason": by_id[s.run_id].reason if s.run_id in by_id else None,
                }
                for s in self.selections
            ],
        }


@dataclass
class Target:
    experiment: str
    runs: list[tuple[str, Path]]  # (run_id, run_dir), grid order
    slurm_table: dict[str, Any]
    source: str  # file name for error messages
    axes: dict[str, dict[str, Any]] = field(default_factory=dict)  # run id -> the axes the grid varies


def _slurm_table(doc_text: str, source: str) -> dict[str, Any]:
    try:
        slurm = tomllib.loads(doc_text).get("slurm", {}) or {}
    except tomllib.TOMLDecodeError:
        return {}
    if not isinstance(slurm, dict):
        raise ConfigError("slurm", "must be a table ([slurm])", source=source)
    return slurm


def _target_exists(req: "LaunchRequest", url: str) -> None:
    """Refuse a target that names nothing before the database is opened (opening creates it): a grid file that is
    not there (the packaged grids listed), or a name that is no grid file while there is no database to hold an
    experiment of that name."""
    from cemctl.grid.files import find_grid
    from cemctl.services.targets import looks_like_file

    if find_grid(req.target) is not None:
        return
    if looks_like_file(req.target):
        from cemctl.services.plan import grid_path

        grid_path(req.target)  # raises: no such grid file (packaged grids: ...)
    if _dry_run_db(url) is None:
        from cemctl.grid.files import packaged_grids

        raise CemError(f"launch: {req.target!r} is no grid file and there is no results database yet to hold an "
                       f"experiment of that name (a grid file, or a packaged grid: {', '.join(packaged_grids())})")


def _dry_run_db(url: str) -> Any:
    """The results database if it exists (opened read-only where it cannot be written), else None."""
    from cemctl.db.engine import DatabaseError, open_existing_db

    try:
        return open_existing_db(url)
    except DatabaseError as e:
        if "no results database" in str(e):
            return None
        raise


def resolve_target(engine: Any, url: str, runs_root: Path, req: LaunchRequest) -> Target:
    """Plan a grid file (records it; a dry run only validates it) or look up a recorded experiment's runs."""
    from cemctl.db import get_experiment
    from cemctl.db.runs import pick_scale, scale_summaries
    from cemctl.services.targets import looks_like_file, resolve_runs

    from cemctl.grid.files import find_grid

    is_grid = looks_like_file(req.target) or (
        find_grid(req.target) is not None and (engine is None or get_experiment(engine, req.target) is None))
    grid_target = req.target
    if not is_grid and (req.seeds is not None or req.add_seeds) and engine is not None:
        exp = get_experiment(engine, req.target)  # more seeds: re-plan the experiment from its grid file
        if exp is not None:
            if not exp.grid_path or not Path(exp.grid_path).is_file():
                raise CemError(f"launch: --seeds re-plans {req.target!r} from its grid file, and "
                               f"{exp.grid_path or 'its grid file'} is gone; give the grid file")
            is_grid, grid_target = True, exp.grid_path
            recorded = recorded_changes(exp.overrides_json)  # the --set and --axis of its last plan: the same runs
            req = dataclasses.replace(req, scale=req.scale or exp.scale, overrides=recorded[0], axes=recorded[1])
    if is_grid:
        from cemctl.grid import DEFAULT_SCALE, load_grid
        from cemctl.services.plan import grid_path, plan_experiment

        scale = req.scale or DEFAULT_SCALE
        if req.dry_run:  # validate and show, write nothing (no database, no config.json)
            plan = load_grid(grid_path(grid_target), scale, req.overrides, seeds=req.seeds, add_seeds=req.add_seeds,
                             axes=req.axes)
            plan.runs = [pr for pr in plan.runs if req.keep_run is None or req.keep_run(pr)]
        else:
            plan = plan_experiment(grid_target, scale=scale, overrides=req.overrides, db_url=url,
                                   runs_root=runs_root, seeds=req.seeds, add_seeds=req.add_seeds, only=req.keep_run,
                                   axes=req.axes).plan
        runs = [(pr.run_id, runs_root / pr.run_id) for pr in plan.runs]
        return Target(plan.name, runs, _slurm_table(plan.text, grid_target), grid_target,
                      {pr.run_id: dict(pr.axes) for pr in plan.runs})
    if req.overrides or req.axes:
        option = "--set" if req.overrides else "--axis"
        raise ConfigError(option, f"applies to a grid file; {req.target!r} is a recorded experiment (give its grid "
                          f"file to re-plan with {option})")
    if engine is None:
        raise CemError(f"launch: {req.target!r} is not a grid file, and there is no results database to find it in "
                       f"({url}); give the grid file")
    resolved = resolve_runs(engine, req.target, runs_root)
    if resolved.kind != "experiment":
        raise CemError(f"launch: {req.target!r} is a run, not an experiment; launch its experiment with "
                       f"--run {resolved.name}")
    scales = scale_summaries(engine, resolved.name)
    if req.scale is None and len(scales) > 1:
        raise ConfigError("--scale", f"experiment {resolved.name!r} has runs at several scales; say which to launch",
                          allowed=[x.scale for x in scales])
    scale = pick_scale(engine, resolved.name, req.scale, need_done=False)  # type: ignore[assignment]
    resolved = resolve_runs(engine, resolved.name, runs_root, scale=scale, in_grid_only=True)
    exp = get_experiment(engine, resolved.name)
    source = exp.grid_path if exp is not None and exp.grid_path else req.target
    slurm = _slurm_table(exp.grid_text, source) if exp is not None and exp.grid_text else {}
    from cemctl.db.runs import run_axes

    return Target(resolved.name, [(r.run_id, r.run_dir) for r in resolved.runs], slurm, source,
                  run_axes(engine, resolved.name))


def recorded_changes(overrides_json: str | None) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """(the --set overrides, the --axis axes) an experiment's last plan recorded (its plan key)."""
    import json

    try:
        recorded = json.loads(overrides_json or "{}")
    except ValueError:
        return {}, {}
    if not isinstance(recorded, dict):
        return {}, {}
    axes = recorded.get("--axis")
    return ({k: v for k, v in recorded.items() if not k.startswith("--")},
            {str(k): list(v) for k, v in axes.items() if isinstance(v, list)} if isinstance(axes, dict) else {})


def build_executor(req: LaunchRequest, target: Target, runs_root: Path, on_tick: Callable[..., None] | None) -> Any:
    """The executor `req` names, built by itself from the command line's options and the grid's table."""
    cls = get_executor(req.executor)  # rejects unknown names
    options = {"gpus": req.gpus, "jobs_per_gpu": req.jobs_per_gpu, "gpus_per_run": req.gpus_per_run,
               "workers": req.workers, "slurm": req.slurm}
    table = {"slurm": target.slurm_table}.get(cls.name, {})  # the grid file's table of that executor
    return cls.from_launch(options, grid_table=table, source=target.source, runs_root=runs_root, on_tick=on_tick)


def launch(
    req: LaunchRequest,
    url: str,
    runs_root: Path | str,
    *,
    on_selected: Callable[[LaunchReport], None] | None = None,
    on_tick: Callable[..., None] | None = None,
    on_data: Callable[[str], None] | None = None,
) -> LaunchReport:
    """Plan, select, check the data (prepare it here, or refuse on a cluster), snapshot and run/submit.

    Returns what was (or would be) launched. `on_data` gets a line when data is being prepared.
    """
    from cemctl.db import sync_runs
    from cemctl.db.engine import open_db
    from cemctl.services.launch.repair import damaged_runs

    from cemctl.db.runs import refresh_plugin_copy, resolve_runs_root

    get_executor(req.executor)  # bad executor name: fail before planning anything
    _target_exists(req, url)  # a grid file or experiment that is not there: one line, no database created
    engine = _dry_run_db(url) if req.dry_run else open_db(url)  # a dry run creates nothing
    runs_root = resolve_runs_root(engine, runs_root).resolve()
    if not req.dry_run:  # the jobs import the plugin copy: it is what the sources are now
        refresh_plugin_copy(runs_root)
    if not req.dry_run and Path(str(req.target)).is_file():  # a registered confirmation design is never edited
        from cemctl.services.claim_plans import check_confirm_grid

        check_confirm_grid(engine, req.target, runs_root, req.scale)
    target = resolve_target(engine, url, runs_root, req)
    if not req.dry_run:  # the claims' declarations, registered before their runs (cemctl.services.claim_plans)
        from cemctl.services.claim_plans import register_claims

        register_claims(engine, target.experiment, runs_root, scale=req.scale)
    runs = target.runs
    if req.run_ids is not None:
        wanted = set(req.run_ids)
        unknown = wanted - {rid for rid, _ in runs}
        if unknown:
            raise CemError(f"run: {sorted(unknown)[0]!r} is not a run of {target.experiment}")
        runs = [r for r in runs if r[0] in wanted]
    timeout_s = runfiles.heartbeat_timeout_s(req.heartbeat_timeout_s)
    executor = build_executor(req, target, runs_root, on_tick)  # bad options fail here, dry run included
    if engine is not None and not req.dry_run:
        sync_runs(engine, runs_root, heartbeat_timeout_s=timeout_s, run_ids=[rid for rid, _ in runs])
    if engine is None:
        damaged: dict[str, str] = {}
    elif req.dry_run:  # not synced: the folders judged now by sync's rule, without writing
        from cemctl.db.ingest import damage_found

        damaged = damage_found(engine, runs)
    else:  # just synced: the database holds the rule's verdicts
        damaged = damaged_runs(engine, [rid for rid, _ in runs])
    if req.dry_run:  # runs not planned yet have no folder: they would start
        new = [(rid, d) for rid, d in runs if not Path(d).exists()]
        selections = [Selection(rid, d, "start", "new run, not planned yet") for rid, d in new]
        known = select_runs([r for r in runs if r not in new], retry_failed=req.retry_failed, damaged=damaged,
                            redo_damaged=req.redo_damaged, rerun_outdated=req.rerun_outdated)
        order = {rid: i for i, (rid, _) in enumerate(runs)}
        selections = sorted(selections + known, key=lambda sel: order[sel.run_id])
    else:
        selections = select_runs(runs, retry_failed=req.retry_failed, damaged=damaged, redo_damaged=req.redo_damaged,
                                 rerun_outdated=req.rerun_outdated)
    report = LaunchReport(target.experiment, req.executor, selections, dry_run=req.dry_run, axes=target.axes)
    if req.dry_run or not report.launched:
        if on_selected:
            on_selected(report)
        return report
    with contextlib.ExitStack() as claims:  # each run this launch starts stays claimed while it runs it
        _claim(claims, report, lambda runs: select_runs(runs, retry_failed=req.retry_failed, damaged=damaged,
                                                        redo_damaged=req.redo_damaged, rerun_outdated=req.rerun_outdated))
        if not report.launched:
            if on_selected:
                on_selected(report)
            return report
        _run(req, report, engine, damaged, target, runs_root, executor, timeout_s, on_selected, on_data)
    return report


def _claim(stack: contextlib.ExitStack, report: LaunchReport,
           select_again: Callable[[list[tuple[str, Path]]], list[Selection]]) -> None:
    """Claim every run the launch would start (`cem_core.runfiles.lock.claim_run`, held until `stack` closes): a
    run another command holds (a second launch of the same runs, a forget removing it) is skipped and says so; the
    claimed ones are selected again, since another launch may have queued or finished them since they were read."""
    from cem_core.runfiles import RunFileError
    from cem_core.runfiles.lock import claim_run

    claimed = []
    for i, sel in enumerate(report.selections):
        if not sel.launches:
            continue
        try:
            held = stack.enter_context(claim_run(sel.run_dir))
        except RunFileError:  # no lock file can be made in the folder (immutable, not ours): nobody else can claim
            held = True       # it either; it is started and fails alone with the trainer's reason, the others run
        if held:
            claimed.append(i)
        else:
            report.selections[i] = Selection(sel.run_id, sel.run_dir, SKIP, "another cemctl command (a launch of it, "
                                             "or forget) has it now; not started twice")
    again = select_again([(report.selections[i].run_id, report.selections[i].run_dir) for i in claimed])
    for i, sel in zip(claimed, again):
        report.selections[i] = sel


def _run(req: LaunchRequest, report: LaunchReport, engine: Any, damaged: dict[str, str], target: Target,
         runs_root: Path, executor: Any, timeout_s: float, on_selected: Callable[[LaunchReport], None] | None,
         on_data: Callable[[str], None] | None) -> None:
    """Repair, snapshot, prepare the data and hand the claimed runs' jobs to the executor."""
    from cemctl.db import sync_runs
    from cemctl.services.launch.repair import repair_damaged, set_aside_outdated
    from cemctl.services.launch.snapshot import take_snapshot

    for sel in report.launched:
        if sel.run_id in damaged:
            sel.reason += "; " + repair_damaged(engine, sel.run_id, sel.run_dir)
        elif sel.outdated:
            sel.reason += "; " + set_aside_outdated(engine, sel.run_id, sel.run_dir)
    from cem_core.data.prepare import REQUIRE_PREPARED_ENV

    snap = take_snapshot(runs_root) if req.snapshot else None  # first: an edited snapshot is refused before any work
    report.prepared = _check_data(req, target, report.launched, on_data)
    from cem_core.runfiles.failure import EXPERIMENT_ENV

    # The jobs only open prepared data, they never tokenize; a failure's advice names the experiment launched.
    env: dict[str, str] = {REQUIRE_PREPARED_ENV: "1", EXPERIMENT_ENV: target.experiment}
    snap_hash = ""
    if snap is not None:
        env.update(code_env(snap.path, snap.hash))
        snap_hash = snap.hash
    env.update(req.job_env)
    env.setdefault("CEMCTL_HEARTBEAT_TIMEOUT_S", str(timeout_s))
    report.snapshot = snap_hash
    jobs = []
    for sel in report.launched:
        runfiles.clear_cancel(sel.run_dir)
        jobs.append(Job(run_id=sel.run_id, run_dir=sel.run_dir, nproc=max(1, req.gpus_per_run), env=dict(env), snapshot=snap_hash))
    if on_selected:
        on_selected(report)
    try:
        report.submitted = executor.submit(jobs)
    finally:
        sync_runs(engine, runs_root, heartbeat_timeout_s=timeout_s, run_ids=[j.run_id for j in jobs])


def _check_data(req: LaunchRequest, target: Target, launched: list[Selection],
                on_data: Callable[[str], None] | None) -> list[str]:
    """Every launched run's data is prepared before any job starts: the local executor (and `--prepare`)
    prepares what is missing on this node; a cluster launch without `--prepare` is refused with one line
    naming `cemctl data prepare`. Returns a line per cache prepared here."""
    from cem_core.config import load_run_config
    from cemctl.services.data import check_launch_data

    configs = []
    for sel in launched:
        try:
            configs.append((target.experiment, sel.run_id, load_run_config(str(Path(sel.run_dir) / runfiles.CONFIG_FILE))))
        except CemError:
            continue  # the run fails with its own reason when it starts

    def on_start(need: Any) -> None:
        if on_data is not None:
            on_data(f"preparing data for {len(need.run_ids)} runs: {need.label} -> {need.base}")

    done = check_launch_data(configs, may_prepare=req.executor == "local" or req.prepare,
                             experiment=target.experiment, scale=req.scale,
                             workers=req.data_workers or max(1, os.cpu_count() or 1), on_start=on_start)
    lines = []
    for p in done:
        tokens = sum(int(v.get("tokens", 0)) for v in p.meta.get("splits", {}).values())
        lines.append(f"prepared {p.need.label}: {tokens} tokens in {p.meta.get('build_s', 0):.1f} s -> {p.path}")
        if on_data is not None:
            on_data(lines[-1])
    return lines


@dataclass
class Detached:
    """What `detach` left running: the orchestrator's pid and log, and how far it got before detach returned."""
    pid: int
    log: Path
    total: int  # the runs it was started to launch
    queued: int  # of those, the runs it had queued (or already run) when detach returned
    exit_code: int | None = None  # its exit status if it had already ended
    why: str = ""  # the last line of its log when it ended with a failure ('error: ...' for bad input)

    def summary(self) -> str:
        """'launch orchestrator running in the background: pid 123, 6 of 6 runs queued' and, on a line of its own
        (a path is never cut, and the first line fits 80 columns), 'log PATH' (or why it is not running)."""
        if self.exit_code is not None and self.queued < self.total:
            head = f"launch orchestrator ended (exit {self.exit_code}) after queuing {self.queued} of {self.total} runs"
        elif self.exit_code is not None:
            head = f"launch orchestrator already ended (exit {self.exit_code})"
        elif not self.total:  # --until-decided on a grid already trained: its rounds choose the runs
            head = f"launch orchestrator running in the background: pid {self.pid}"
        else:
            head = f"launch orchestrator running in the background: pid {self.pid}, {self.queued} of {self.total} runs queued"
            if self.queued < self.total:
                head += "\n(still preparing: `cemctl status --watch` shows the rest as it queues them)"
        if self.why:
            head += f"\n{self.why}"
        return f"{head}\nlog {self.log}"


def _last_log_line(log: Path) -> str:
    """The last line of an orchestrator's log (read from its last 4 KiB), printable; '' when it cannot be read."""
    from cem_core.names import printable
    from cem_core.runfiles.failure import last_line
    from cem_core.runfiles.files import read_bytes

    try:
        tail = read_bytes(log, offset=max(0, log.stat().st_size - 4096), max_bytes=4096)
    except (OSError, runfiles.RunFileError):
        return ""
    return printable(last_line(tail.decode("utf-8", "replace")))


def detach(argv: list[str], runs_root: Path | str, run_dirs: Sequence[Path] = (), *, wait_s: float = 60.0,
           poll_s: float = 0.2) -> Detached:
    """Run `cemctl launch ...` (argv without --detach) in the background, logging to a file, and wait (at most
    `wait_s`) until it has queued each of `run_dirs` (the runs it will launch): a run counts once its events.jsonl
    ends with an event written since (queued by the orchestrator, then running or ended by its trainer), so that a `cemctl status --watch` typed next finds the runs
    in flight instead of 'planned' (it used to end at once, nothing being in flight yet). Returns early when the
    orchestrator exits. The orchestrator survives the terminal closing (new session).
    """
    import subprocess

    from cem_core.runfolder import last_event

    logs = Path(runs_root).resolve() / ".launch"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"launch-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    started_at = time.time()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cemctl.cli", *argv], stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, cwd=os.getcwd(),
        )
    waiting = [Path(d) for d in run_dirs]
    queued = 0
    deadline = time.monotonic() + max(0.0, wait_s)
    while True:
        code = proc.poll()  # before the scan: a run queued just before it ended is counted
        still = []
        for d in waiting:
            event = last_event(d)
            when = (event or {}).get("time")
            if isinstance(when, (int, float)) and when >= started_at:  # queued, running or ended since
                queued += 1
            else:
                still.append(d)
        waiting = still
        if not waiting or code is not None or time.monotonic() >= deadline:
            return Detached(proc.pid, log_path, len(run_dirs), queued, code, _last_log_line(log_path) if code else "")
        time.sleep(poll_s)
