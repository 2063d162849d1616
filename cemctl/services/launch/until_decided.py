"""`cemctl launch EXPERIMENT --until-decided [--max-seeds N] [--budget-hours H]`: seeds in rounds until decided.

    report = until_decided(LaunchRequest(target="fig2a", scale="cpu"), db_url, runs_root, max_seeds=16)
    report.stop, report.message, report.seeds   # why it stopped; seeds each arm has

The loop (the statistics: `cemctl.report.sequential`; docs/claims.md):

1. launch the grid as it is (its seeds; a confirmation grid: the first 3 of its registered seeds), through the
   ordinary launcher;
2. record a look: the finished runs at the scale, in `<runs>/.claims/sequential/<experiment>@<scale>.json`
   with the design (alpha, spending, the seed cap N, the experiment's parts) fixed at the first look;
3. evaluate every claim of the page at the scale (`cemctl.report.claims.evaluate_page`: this experiment's
   parts over their looks with alpha spending, the step-down over every part);
4. decide (`cemctl.report.sequential.next_round`, pure): stop when every part of the experiment is decided, when
   the next round would pass the seed cap or the budget of run-hours; otherwise bring the arms of the undecided
   parts to `round_seeds` more seeds and launch only those runs (the plan records only them), then go to 2.

The parts it decides are the decisive ones: fixed parts and a confirmation grid's (stage 2); a stage-1 part
(each arm's rate chosen on its own seeds) is exploratory and never decided by more of the same seeds
(`cemctl confirm` makes its stage 2). A confirmation grid's rounds take its registered seeds in order,
never a stage-1 seed, and its cap is their number. Only the local executor waits for its runs, so only it can run
rounds. The budget is a total over every session of the design: each round's runs (round 0: the grid's own
launch) are recorded in the design with their run-hours (their own wall times), and a round is not started if its
estimate (its runs x the mean wall time of the finished runs) would take the recorded total past it. The last
`--budget-hours` given holds until another is.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cem_core.errors import CemError, ConfigError
from cemctl.grid.kinds import DEFAULT_SCALE
from cemctl.services.launch.launcher import LaunchRequest, launch

ROUND_SEEDS = 2
DEFAULT_MAX_SEEDS = 16


@dataclass
class Round:
    number: int
    seeds: int  # seeds per arm after it (the target)
    launched: int  # runs started
    undecided: list[str]
    message: str


@dataclass
class UntilDecidedReport:
    experiment: str
    scale: str
    stop: str = ""  # decided | seed cap | budget | nothing to run
    message: str = ""
    rounds: list[Round] = field(default_factory=list)
    seeds: dict[str, int] = field(default_factory=dict)  # arm label -> finished seeds
    spent_hours: float = 0.0  # run-hours of the runs the loop started, in every session of this design
    session_hours: float = 0.0  # of those, this invocation's
    parts: Any = None  # the last page's rows of this experiment's parts
    design_path: Path | None = None

    def summary(self) -> str:
        return (f"{self.experiment} ({self.scale}): stopped after {len(self.rounds)} round"
                f"{'s' if len(self.rounds) != 1 else ''}: {self.stop}: {self.message}; {self.spent_hours:.2f} "
                f"run-hours spent by its rounds in all ({self.session_hours:.2f} in this session)")


def _arm_key(config: dict[str, Any]) -> str:
    from cem_core.arms import DEFAULT_NUISANCE, arm_id

    return arm_id(config, DEFAULT_NUISANCE)


def _planned_arms(plan_runs: list[Any]) -> dict[str, dict[str, Any]]:
    """{arm key: flat config} of the grid's planned runs."""
    from cem_core.config import flatten

    out = {}  # type: ignore[var-annotated]
    for pr in plan_runs:
        cfg = {k: v for k, v in flatten(pr.config.to_dict()).items() if k != "train.seed"}
        out.setdefault(_arm_key(cfg), cfg)
    return out


def _part_arms(part: Any, arms: dict[str, dict[str, Any]]) -> list[str]:
    """The planned arms a decisive part compares (a confirmation part: each arm at its registered rate)."""
    from cemctl.grid.claims import selector_matches

    out = []
    for key, cfg in arms.items():
        selectors = part.selectors_at(str(cfg.get("model.size"))) if part.rates is not None else part.arms
        if any(selector_matches(cfg, sel) for sel in selectors or []):
            out.append(key)
    return sorted(out)


def _has_grid_file(exp: Any) -> bool:
    """The experiment's recorded grid is a file here (not an import's `ARCHIVE:FILE` copy)."""
    return bool(exp.grid_path) and Path(exp.grid_path).is_file()


def no_grid_file(experiment: str, grid: str | None) -> str:
    """Why the rounds cannot plan more seeds for an experiment whose grid is no file here (an import's copy), and
    what to do."""
    return (f"launch --until-decided: {experiment!r} was planned from {grid or 'no grid file'}, not a file here, so "
            "its rounds cannot plan more seeds; launch its grid file instead (`cemctl launch PATH --until-decided`), "
            f"and if that file has changed since, `cemctl forget {experiment}` first (runs that hold results are kept)")


def until_decided(req: LaunchRequest, url: str, runs_root: Path | str, **kw: Any) -> UntilDecidedReport:
    """`_until_decided`, one loop per experiment at a time: their rounds share one design file, so a second loop on
    the same experiment is refused in one line before it launches anything."""
    from cem_core.runfiles.lock import one_at_a_time
    from cemctl.db.engine import DatabaseError, open_existing_db
    from cemctl.db.runs import resolve_runs_root
    from cemctl.grid.files import find_grid
    from cemctl.grid.spec import experiment_name

    grid = find_grid(str(req.target))
    name = experiment_name(grid) if grid is not None and grid.is_file() else str(req.target)
    try:
        engine = open_existing_db(url)
    except DatabaseError:
        engine = None
    root = resolve_runs_root(engine, runs_root)
    with one_at_a_time(root / ".locks" / f"{name}.until-decided.lock",
                       f"launch --until-decided: another --until-decided loop on {name} is running in {root} (they "
                       "would share its design); nothing was launched"):
        return _until_decided(req, url, runs_root, **kw)


def _until_decided(req: LaunchRequest, url: str, runs_root: Path | str, *, max_seeds: int | None = None,
                  budget_hours: float | None = None, round_seeds: int = ROUND_SEEDS, alpha: float = 0.05,
                  launch_fn: Callable[..., Any] = launch, on_round: Callable[[str], None] | None = None,
                  on_launch: Callable[[Any], None] | None = None, launch_kw: dict[str, Any] | None = None
                  ) -> UntilDecidedReport:
    """Launch the experiment, then rounds of seeds for the arms of its undecided parts until every part is
    decided, the seed cap or the budget is reached (see the module docstring). `max_seeds`: the cap (default 16;
    a confirmation grid's is its registered seed count, and a design started with a cap keeps it)."""
    from cemctl.db.engine import open_db
    from cemctl.db.runs import get_experiment, resolve_runs_root
    from cemctl.report.claims import evaluate_page
    from cemctl.report.sequential import SPENDING, next_round
    from cemctl.services.claim_plans import finished_runs, load_designs, read_design, write_design
    from cemctl.services.claims import gather_claims
    from cemctl.services.plan import grid_path

    if req.executor != "local":
        raise ConfigError("--until-decided", f"runs rounds and waits for each; the {req.executor} executor returns "
                          "at once (use the local executor)")
    if req.dry_run:
        raise ConfigError("--until-decided", "decides from results; it has no dry run (plan with --dry-run first)")
    if max_seeds is not None and not 3 <= max_seeds <= 1000:
        raise ConfigError("--max-seeds", f"must be from 3 to 1000, got {max_seeds}")
    if budget_hours is not None and not budget_hours > 0:
        raise ConfigError("--budget-hours", f"must be a positive number of run-hours, got {budget_hours}")
    say = on_round or (lambda line: None)
    kw = dict(launch_kw or {})
    session = time.time()
    # everything that can refuse is checked before the first launch trains anything
    known = _known_experiment(url, req)
    if known is not None and not _has_grid_file(known):
        raise CemError(no_grid_file(str(req.target), known.grid_path))
    grid = Path(str(req.target)) if Path(str(req.target)).is_file() else (
        grid_path(known.grid_path) if known is not None else None)
    scale = req.scale or (known.scale if known is not None else None) or DEFAULT_SCALE
    spec = _spec(grid, scale, req) if grid is not None else None
    confirm = spec.confirm if spec is not None else None
    grid_seeds = list(spec.seeds) if spec is not None and spec.seeds is not None else [0]
    if confirm is not None:
        if max_seeds is not None and max_seeds != len(grid_seeds):
            raise ConfigError("--max-seeds", f"a confirmation grid's cap is its registered seeds ({len(grid_seeds)} in "
                              f"{grid}); give --max-seeds {len(grid_seeds)} or leave it out")
        max_seeds = len(grid_seeds)
        if req.seeds is not None or req.add_seeds:
            raise ConfigError("--seeds", "a confirmation grid trains its registered seeds, in order; its rounds choose "
                              "how many (leave --seeds and --add-seeds out)")
    record = None
    if spec is not None:
        from cemctl.db.engine import DatabaseError, open_existing_db

        try:
            root0 = resolve_runs_root(open_existing_db(url), runs_root)
        except DatabaseError:
            root0 = Path(runs_root)
        record = read_design(root0, spec.name, scale)
    if record is not None and max_seeds is not None and int(record["design"].get("max_seeds", -1)) != max_seeds:
        raise ConfigError("--max-seeds", f"the until-decided design of {spec.name} ({scale}) was started with "  # type: ignore[union-attr]
                          f"--max-seeds {record['design']['max_seeds']}; its alpha spending is planned for that "
                          "cap, so give the same (or leave it out)")
    if max_seeds is None:
        max_seeds = int(record["design"]["max_seeds"]) if record is not None else DEFAULT_MAX_SEEDS
    first_req = req
    if confirm is not None:
        first_req = dataclasses.replace(req, seeds=grid_seeds[:min(3, len(grid_seeds))], add_seeds=0)
    first = launch_fn(first_req, url, runs_root, **kw)
    if on_launch is not None:
        on_launch(first)
    experiment = first.experiment
    launched_ids = {s.run_id for s in first.submitted}
    engine = open_db(url)
    root = resolve_runs_root(engine, runs_root)
    exp = get_experiment(engine, experiment)
    if exp is None or not _has_grid_file(exp):
        raise CemError(no_grid_file(experiment, exp.grid_path if exp is not None else ""))
    scale = req.scale or exp.scale
    claims = gather_claims(engine)
    specs = {f"{c.id}. {p.name}": p for c in claims for q in c.parts for p in (q, q.confirmation)
             if p is not None and p.source == experiment and not p.chooses}
    family = [(experiment, key.split(". ", 1)[0], p.name) for key, p in specs.items()]
    report = UntilDecidedReport(experiment, scale)
    if not family:
        raise CemError(f"launch --until-decided: {experiment!r} declares no [[claim]] part it can decide in rounds "
                       "(a part that chooses each arm's rate is decided by a confirmation on fresh seeds: `cemctl "
                       f"confirm {experiment} --scale {scale}`)")
    record = read_design(root, experiment, scale)
    if record is None:
        record = {"design": {"experiment": experiment, "scale": scale, "alpha": alpha, "spending": SPENDING,
                             "max_seeds": max_seeds, "round_seeds": round_seeds, "budget_hours": budget_hours,
                             "family": [list(k) for k in family], "started_at": session}, "looks": []}
    # the budget is a total over every session of this design: the last one given holds until another is given
    if budget_hours is None:
        budget_hours = record["design"].get("budget_hours")
    record["design"]["budget_hours"] = budget_hours
    record.setdefault("rounds", [])
    _note_round(record, 0, None, sorted(launched_ids), session)
    grid = grid_path(exp.grid_path)
    arms = _planned_arms(_load(grid, scale, req, grid_seeds[:1]).runs)
    part_arms = {key: _part_arms(p, arms) for key, p in specs.items()}
    stage1 = set(confirm.stage1_seeds) if confirm is not None else set()
    number = 0
    while True:
        runs = finished_runs(engine, scale)
        ids = sorted(str(r) for r in runs["run_id"]) if not runs.empty else []
        if not record["looks"] or set(record["looks"][-1]["runs"]) != set(ids):
            record["looks"].append({"time": time.time(), "runs": ids})
        walls = _walls(runs)
        spent = _spent(record, walls)
        report.spent_hours = spent
        report.session_hours = sum(walls.get(r, 0.0) for r in launched_ids) / 3600
        report.design_path = write_design(root, experiment, scale, record)
        page = evaluate_page(runs, gather_claims(engine), scales=[scale], designs=load_designs(root, scale))
        mine = page.parts[[f"{r.claim}. {r.part}" in specs for r in page.parts.itertuples()]] \
            if not page.parts.empty else page.parts
        report.parts = mine
        rows = {f"{r.claim}. {r.part}": r for r in mine.itertuples()}
        decided = {k: r.label_holm not in ("inconclusive", "not run") for k, r in rows.items()}
        seeds: dict[str, int] = {}
        arm_walls: dict[str, list[float]] = {}  # an arm's runs' wall times, stage 1's included: what its next run costs
        for row in runs.to_dict("records") if not runs.empty else []:
            cfg = _config(row)
            key = _arm_key({k: v for k, v in cfg.items() if k != "train.seed"})
            if str(row["run_id"]) in walls:
                arm_walls.setdefault(key, []).append(walls[str(row["run_id"])])
            if int(cfg.get("train.seed") or 0) in stage1:
                continue  # a stage-1 run at a confirmed rate is not one of the confirmation's seeds
            seeds[key] = seeds.get(key, 0) + 1
        hours_per_run = (sum(walls.values()) / len(walls) / 3600) if walls else 0.0
        labels = _labels(runs)
        decision = next_round([{"key": k, "decided": decided.get(k, False), "arms": v} for k, v in part_arms.items()],
                              arm_seeds=seeds, max_seeds=max_seeds, round_seeds=round_seeds, spent_hours=spent,
                              budget_hours=budget_hours, hours_per_run=hours_per_run,
                              arm_hours={a: sum(w) / len(w) / 3600 for a, w in arm_walls.items()},
                              unfinished_round=_unfinished_round(record, set(ids), _states(engine, record, ids)))
        report.seeds = {labels.get(a, a): seeds.get(a, 0) for a in sorted({a for v in part_arms.values() for a in v})}
        if decision.stop:
            report.stop, report.message = decision.stop, decision.message
            break
        number += 1
        say(f"round {number}: {len(decision.undecided)} part{'s' if len(decision.undecided) != 1 else ''} "
            f"undecided; {decision.message}")
        wanted = set(decision.arms)
        sub = dataclasses.replace(req, target=str(grid), scale=scale, seeds=_seed_list(grid_seeds, decision.seeds,
                                                                                        confirm is not None),
                                  add_seeds=0, keep_run=lambda pr, wanted=wanted: _arm_key(_planned_config(pr)) in wanted)  # type: ignore[misc]
        # the round and its runs are on record before they train: a session that ends mid-round still counts them
        planned = [pr.run_id for pr in _load(grid, scale, sub, sub.seeds).runs if sub.keep_run(pr)]  # type: ignore[arg-type, misc]
        entry = _note_round(record, number, decision.seeds, sorted(set(planned) - set(ids)), session)
        report.design_path = write_design(root, experiment, scale, record)
        result = launch_fn(sub, url, runs_root, **kw)
        if on_launch is not None:
            on_launch(result)
        started = [s.run_id for s in result.submitted]
        launched_ids.update(started)
        if entry is not None:
            entry["runs"] = sorted(started)  # what it started (a run running elsewhere is not this loop's)
        else:
            _note_round(record, number, decision.seeds, started, session)
        report.rounds.append(Round(number, decision.seeds, len(started), decision.undecided, decision.message))
        if not started:
            report.stop = "nothing to run"
            report.message = (f"round {number} started no run (the runs it needs failed or are running elsewhere; "
                              "`cemctl status` says which)")
            break
    record["stopped"] = {"time": time.time(), "reason": report.stop, "message": report.message,
                         "seeds": report.seeds, "spent_hours": report.spent_hours}
    report.design_path = write_design(root, experiment, scale, record)
    return report


def _known_experiment(url: str, req: LaunchRequest) -> Any:
    """The recorded experiment a name (not a grid file) launches, or None."""
    from cemctl.db.engine import DatabaseError, open_existing_db
    from cemctl.db.runs import get_experiment

    if Path(str(req.target)).is_file():
        return None
    try:
        return get_experiment(open_existing_db(url), str(req.target))
    except DatabaseError:
        return None


def _spec(grid: Path, scale: str, req: LaunchRequest) -> Any:
    from cemctl.grid.spec import parse_grid

    return parse_grid(grid, scale)


def _load(grid: Path, scale: str, req: LaunchRequest, seeds: list[int]) -> Any:
    from cemctl.grid import load_grid

    return load_grid(grid, scale, req.overrides, seeds=seeds, axes=req.axes)


def _seed_list(grid_seeds: list[int], n: int, confirm: bool) -> list[int]:
    """The first n seeds of a round: the grid's in order, then (an ordinary grid) the next integers after its
    largest; a confirmation grid never goes past its registered seeds."""
    out = list(grid_seeds[:n])
    nxt = max(grid_seeds) + 1
    while len(out) < n and not confirm:
        out.append(nxt)
        nxt += 1
    return out


def _note_round(record: dict[str, Any], number: int, seeds: int | None, runs: list[str], session: float
                ) -> dict[str, Any] | None:
    """Record the runs a round (0: the grid's own launch) of this session starts: their run-hours count against
    the budget in every later session. Returns the entry (None when the round has no run)."""
    if not runs:
        return None
    entry = {"session": session, "round": number, "seeds": seeds, "runs": sorted(runs), "time": time.time()}
    record["rounds"].append(entry)
    return entry


def _unfinished_round(record: dict[str, Any], finished: set[str],
                      state_of: Callable[[str], str | None] = lambda _rid: None) -> int | None:
    """The seeds per arm of the last recorded round if one of its runs has neither finished nor ended for good (the
    session ended, or the loop was stopped, mid-round: planned, queued, running, stale), else None. A run that
    failed or was cancelled (`RunState.terminal`) settles its place: the loop moves on, as it would had it
    finished."""
    from cem_core.runfiles import RunState

    last = _last_round(record)
    if last is None:
        return None
    for rid in set(last["runs"]) - finished:
        state = state_of(rid)
        if state not in {s.value for s in RunState} or not RunState(state).terminal:
            return int(last["seeds"])
    return None


def _last_round(record: dict[str, Any]) -> dict[str, Any] | None:
    """The last recorded round that brought seeds (round 0 records the launch's own runs, without)."""
    return next((e for e in reversed(record.get("rounds", [])) if e.get("seeds")), None)


def _states(engine: Any, record: dict[str, Any], finished: list[str]) -> Callable[[str], str | None]:
    """The run states of the last round's runs that have not finished, read in one query (`state_of` above)."""
    from cemctl.records import load_records

    last = _last_round(record)
    pending = sorted(set(last["runs"]) - set(finished)) if last else []
    states = {r.run_id: r.state for r in load_records(engine, run_ids=pending, arms=False)} if pending else {}
    return states.get


def _walls(runs: Any) -> dict[str, float]:
    """{run id: wall time in seconds} of the finished runs that have one."""
    if runs is None or runs.empty or "wall_time_s" not in runs.columns:
        return {}
    return {str(rid): float(w) for rid, w in zip(runs["run_id"], runs["wall_time_s"]) if w == w and w is not None}


def _spent(record: dict[str, Any], walls: dict[str, float]) -> float:
    """Run-hours of every run the loop started, in every session (each run once); each round's are written beside
    it."""
    seen: set[str] = set()
    for entry in record.get("rounds", []):
        entry["hours"] = sum(walls.get(r, 0.0) for r in entry["runs"]) / 3600
        seen.update(entry["runs"])
    return sum(walls.get(r, 0.0) for r in seen) / 3600


def _config(row: dict[str, Any]) -> dict[str, Any]:
    from cemctl.report.arms import config_of

    return config_of(row)


def _planned_config(pr: Any) -> dict[str, Any]:
    from cem_core.config import flatten

    return {k: v for k, v in flatten(pr.config.to_dict()).items() if k != "train.seed"}


def _labels(runs: Any) -> dict[str, str]:
    if runs is None or runs.empty or "arm_label" not in runs.columns:
        return {}
    out = {}  # type: ignore[var-annotated]
    for row in runs.to_dict("records"):
        key = _arm_key({k: v for k, v in _config(row).items() if k != "train.seed"})
        out.setdefault(key, str(row["arm_label"]))
    return out
