"""`cemctl launch EXPERIMENT --until-decided [--max-seeds N] [--budget-hours H]`: seeds in rounds until decided.

    report = until_decided(LaunchRequest(target="fig2a", scale="cpu"), db_url, runs_root, max_seeds=16)
    report.stop, report.message, report.seeds   # why it stopped; seeds each arm has

The loop (the statistics: `cemctl.report.sequential`; docs/claims.md):

1. launch the grid as it is (its seeds), through the ordinary launcher;
2. record a look: the finished runs at the scale, in `<runs>/.claims/sequential/<experiment>@<scale>.json`
   with the design (alpha, spending, the seed cap N, the experiment's parts) fixed at the first look;
3. evaluate every claim of the page at the scale (`cemctl.report.claims.evaluate_page`: this experiment's
   parts over their looks with alpha spending, the step-down over every part);
4. decide (`cemctl.report.sequential.next_round`, pure): stop when every part of the experiment is decided or
   cannot be decided by more seeds (an own-optimum arm whose planned lr profile has fewer than 3 rates: the stop
   says which rates to add), when the next round would pass the seed cap or the budget of run-hours; otherwise
   bring the arms of the undecided parts (each learning rate of an own-optimum profile is an arm) to
   `round_seeds` more seeds and launch only those runs (the plan records only them), then go to 2. An
   own-optimum arm whose optimum is not bracketed (at the edge of its profile, or between its two outermost rates:
   `cemctl.report.tuned.edge_side`; or with only one rate beyond it on a side an extension reached: provisional)
   gets the next half-octave rate beyond that edge in the same round (`Profiles`: an `--axis train.lr=...` of the round's plan, recorded in the design), also when its other
   rates are at the seed cap: then the round trains only the new rate, at the cap's seeds.

Only the local executor waits for its runs, so only it can run rounds. The budget is a total over every session
of the design: each round's runs (round 0: the grid's own launch) are recorded in the design with their
run-hours (their own wall times), and a round is not started if its estimate (its runs x the mean wall time of
the finished runs) would take the recorded total past it. The last `--budget-hours` given holds until another is.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from cem_core.errors import CemError, ConfigError
from cemctl.services.launch.launcher import LaunchRequest, launch

ROUND_SEEDS = 2
DEFAULT_MAX_SEEDS = 16
CANNOT = "cannot be decided by more seeds"


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
    stop: str = ""  # decided | cannot be decided by more seeds | seed cap | budget | nothing to run
    message: str = ""
    rounds: list[Round] = field(default_factory=list)
    seeds: dict[str, int] = field(default_factory=dict)  # arm label -> finished seeds
    spent_hours: float = 0.0  # run-hours of the runs the loop started, in every session of this design
    session_hours: float = 0.0  # of those, this invocation's
    parts: Any = None  # the last page's rows of this experiment's parts
    design_path: Path | None = None
    blocked: dict[str, str] = field(default_factory=dict)  # part -> why more seeds cannot decide it
    extended: list[str] = field(default_factory=list)  # the profile extensions this invocation made

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

    out = {}
    for pr in plan_runs:
        cfg = {k: v for k, v in flatten(pr.config.to_dict()).items() if k != "train.seed"}
        out.setdefault(_arm_key(cfg), cfg)
    return out


def _part_arms(part: Any, arms: dict[str, dict[str, Any]]) -> list[str]:
    from cemctl.grid.claims import LR, SWEEP_STATISTICS, selector_matches

    free = part.tuned or part.statistic in SWEEP_STATISTICS
    selectors = [{k: v for k, v in sel.items() if not (free and k == LR)} for sel in part.arms]
    return sorted(key for key, cfg in arms.items() if any(selector_matches(cfg, sel) for sel in selectors))


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


def _until_decided(req: LaunchRequest, url: str, runs_root: Path | str, *, max_seeds: int = DEFAULT_MAX_SEEDS,
                  budget_hours: float | None = None, round_seeds: int = ROUND_SEEDS, alpha: float = 0.05,
                  launch_fn: Callable[..., Any] = launch, on_round: Callable[[str], None] | None = None,
                  on_launch: Callable[[Any], None] | None = None, launch_kw: dict[str, Any] | None = None
                  ) -> UntilDecidedReport:
    """Launch the experiment, then rounds of seeds for the arms of its undecided parts until every part is
    decided (or cannot be decided by more seeds), the seed cap or the budget is reached (see the module
    docstring)."""
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
    if not 3 <= max_seeds <= 1000:
        raise ConfigError("--max-seeds", f"must be from 3 to 1000, got {max_seeds}")
    if budget_hours is not None and not budget_hours > 0:
        raise ConfigError("--budget-hours", f"must be a positive number of run-hours, got {budget_hours}")
    say = on_round or (lambda line: None)
    kw = dict(launch_kw or {})
    session = time.time()
    if not Path(str(req.target)).is_file():  # a name: refuse before launching anything if its grid is no file here
        from cemctl.db.engine import DatabaseError, open_existing_db

        try:
            known = get_experiment(open_existing_db(url), str(req.target))
        except DatabaseError:
            known = None
        if known is not None and not _has_grid_file(known):
            raise CemError(no_grid_file(str(req.target), known.grid_path))
    first = launch_fn(req, url, runs_root, **kw)
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
    claims = [c for c in gather_claims(engine) if any(p.source == experiment for p in c.parts)]
    # an lr_optimum part (a bootstrap over seeds) has no sequential analysis: it is decided on the runs there are
    # and gets no seeds from the loop (its arms are whole sweeps)
    family = [(experiment, c.id, p.name) for c in claims for p in c.parts
              if p.source == experiment and p.statistic != "lr_optimum"]
    specs = {f"{c.id}. {p.name}": p for c in claims for p in c.parts if (experiment, c.id, p.name) in family}
    report = UntilDecidedReport(experiment, scale)
    if not family:
        raise CemError(f"launch --until-decided: {experiment!r} declares no [[claim]] part it can decide in rounds "
                       "(an lr_optimum part is bootstrapped on the runs there are)")
    record = read_design(root, experiment, scale)
    if record is not None and int(record["design"].get("max_seeds", -1)) != max_seeds:
        raise ConfigError("--max-seeds", f"the until-decided design of {experiment} ({scale}) was started with "
                          f"--max-seeds {record['design']['max_seeds']}; its alpha spending is planned for that "
                          "cap, so give the same")
    if record is None:
        record = {"design": {"experiment": experiment, "scale": scale, "alpha": alpha, "spending": SPENDING,
                             "max_seeds": max_seeds, "round_seeds": round_seeds, "budget_hours": budget_hours,
                             "family": [list(k) for k in family], "started_at": session}, "looks": []}
    # the budget is a total over every session of this design: the last one given holds until another is given
    if budget_hours is None:
        budget_hours = record["design"].get("budget_hours")
    record["design"]["budget_hours"] = budget_hours
    record.setdefault("rounds", [])
    record.setdefault("extensions", [])
    _note_round(record, 0, None, sorted(launched_ids), session)
    grid = grid_path(exp.grid_path)
    profiles = Profiles(grid, scale, req)
    arms = profiles.arms(record)
    part_arms = {key: _part_arms(p, arms) for key, p in specs.items()}
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
        mine = page.parts[[(experiment, str(r.claim), r.part) in family for r in page.parts.itertuples()]] \
            if not page.parts.empty else page.parts
        report.parts = mine
        rows = {f"{r.claim}. {r.part}": r for r in mine.itertuples()}
        decided = {k: r.label_holm not in ("inconclusive", "not run") for k, r in rows.items()}
        # a part whose planned lr profile lacks rates cannot be decided by more seeds: it takes none
        blocked = {k: why for k, p in specs.items() if not decided.get(k, False) and (why := _short_profile(p, arms))}
        report.blocked = blocked
        seeds: dict[str, int] = {}
        for row in runs.to_dict("records") if not runs.empty else []:
            key = _arm_key({k: v for k, v in _config(row).items() if k != "train.seed"})
            seeds[key] = seeds.get(key, 0) + 1
        hours_per_run = (sum(walls.values()) / len(walls) / 3600) if walls else 0.0
        labels = _labels(runs)

        def decide(part_arms: dict[str, list[str]]) -> Any:
            return next_round([{"key": k, "decided": decided.get(k, False), "blocked": blocked.get(k, ""),
                                "arms": v} for k, v in part_arms.items()],
                              arm_seeds=seeds, max_seeds=max_seeds, round_seeds=round_seeds, spent_hours=spent,
                              budget_hours=budget_hours, hours_per_run=hours_per_run)

        decision = decide(part_arms)
        report.seeds = {labels.get(a, a): seeds.get(a, 0) for a in sorted({a for v in part_arms.values() for a in v})}
        # an own-optimum arm whose optimum is not bracketed: the round adds the next rate beyond that edge, also when
        # its arms are at the seed cap (the new rate starts with none); a budget stop stays a stop
        extra = [] if decision.stop not in ("", "seed cap") else \
            [e for k in decision.undecided for e in profiles.extensions(k, specs[k], rows.get(k), arms)]
        if extra:
            wider = profiles.arms(record, extra)
            wider_parts = {key: _part_arms(p, wider) for key, p in specs.items()}
            wider_decision = decide(wider_parts)
            if not wider_decision.stop:
                arms, part_arms, decision = wider, wider_parts, wider_decision
                number_next = number + 1
                for e in extra:
                    e.update(round=number_next, time=time.time())
                    record["extensions"].append(e)
                    report.extended.append(f"{e['part']}, arm {e['arm']}: train.lr = {e['lr']:g} "
                                           f"(its optimum at or next to the {e['edge']} edge)")
            else:
                extra = []
        if decision.stop:
            report.stop, report.message = decision.stop, decision.message
            break
        number += 1
        ext = "" if not extra else "; the profile extended with " + ", ".join(
            f"train.lr = {e['lr']:g} (arm {e['arm']} of {e['part']})" for e in extra)
        say(f"round {number}: {len(decision.undecided)} part{'s' if len(decision.undecided) != 1 else ''} "
            f"undecided; {decision.message}{ext}")
        wanted = set(decision.arms)
        sub = dataclasses.replace(req, target=str(grid), scale=scale, seeds=list(range(decision.seeds)), add_seeds=0,
                                  axes=profiles.axes(record),
                                  keep_run=lambda pr, wanted=wanted: _arm_key(_planned_config(pr)) in wanted)
        # the round and its runs are on record before they train: a session that ends mid-round still counts them
        entry = _note_round(record, number, decision.seeds, sorted(set(profiles.run_ids(sub)) - set(ids)), session)
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


def _note_round(record: dict[str, Any], number: int, seeds: int | None, runs: list[str], session: float
                ) -> dict[str, Any] | None:
    """Record the runs a round (0: the grid's own launch) of this session starts: their run-hours count against
    the budget in every later session. Returns the entry (None when the round has no run)."""
    if not runs:
        return None
    entry = {"session": session, "round": number, "seeds": seeds, "runs": sorted(runs), "time": time.time()}
    record["rounds"].append(entry)
    return entry


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


def _free_selectors(part: Any) -> list[dict[str, Any]]:
    from cemctl.grid.claims import LR, SWEEP_STATISTICS

    free = part.tuned or part.statistic in SWEEP_STATISTICS
    return [{k: v for k, v in sel.items() if not (free and k == LR)} for sel in part.arms]


def _rates(selector: dict[str, Any], arms: dict[str, dict[str, Any]]) -> dict[str, list[float]]:
    """{setting: the planned learning rates} of the arms a selector without train.lr matches."""
    from cemctl.grid.claims import LR, selector_matches

    out: dict[str, set[float]] = {}
    for cfg in arms.values():
        if selector_matches(cfg, selector):
            out.setdefault(str(cfg.get("model.size", "")), set()).add(float(cfg.get(LR) or 0))
    return {k: sorted(v) for k, v in out.items()}


def _short_profile(part: Any, arms: dict[str, dict[str, Any]]) -> str:
    """Why more seeds cannot decide an own-optimum part: an arm whose planned profile has fewer rates than a
    profile needs (and the rates to add), else ''."""
    from cemctl.grid.claims import MIN_PROFILE, profile_advice

    if not part.tuned or part.statistic == "lr_optimum":
        return ""
    for k, selector in enumerate(_free_selectors(part)):
        by_setting = _rates(selector, arms)
        for setting, lrs in sorted(by_setting.items()):
            if len(lrs) < MIN_PROFILE:
                add = ", ".join(f"{v:g}" for v in profile_advice(lrs))
                where = f" ({setting})" if len(by_setting) > 1 else ""
                return (f"{CANNOT}: arm {k + 1}'s lr profile{where} has "
                        f"{len(lrs)} learning rate{'s' if len(lrs) != 1 else ''} "
                        f"({', '.join(f'{v:g}' for v in lrs)}): extend the profile with train.lr = {add}")
    return ""


class Profiles:
    """The learning rates the loop plans: the grid's train.lr axis at the scale, and the rates it added beyond the
    edge of an own-optimum arm's profile (recorded in the design as `extensions`, given to every round's plan as
    `--axis train.lr=...`, so the experiment's plan key records them and `launch EXPERIMENT` relaunches the same
    runs). A grid whose train.lr is not one of its axes (a zip or an [[extra]] sets it, or --set does) is not
    extended: the claims page says which rates to add."""

    def __init__(self, grid: Path, scale: str, req: LaunchRequest) -> None:
        from cemctl.grid.claims import LR
        from cemctl.grid.expand import add_axes
        from cemctl.grid.spec import parse_grid

        self.grid, self.scale, self.req = grid, scale, req
        spec = parse_grid(grid, scale)
        add_axes(spec, dict(req.axes), dict(req.overrides))
        settable = LR in spec.axes and LR not in req.overrides and not any(
            LR in z for z in spec.zips) and not any(LR in x.overrides or LR in x.axes for x in spec.extras)
        self.lr_axis: list[float] | None = [float(v) for v in spec.axes[LR]] if settable else None

    def axes(self, record: dict[str, Any], extra: Sequence[dict[str, Any]] = ()) -> dict[str, list[Any]]:
        from cemctl.grid.claims import LR

        added = [float(e["lr"]) for e in list(record.get("extensions", [])) + list(extra)]
        if not added or self.lr_axis is None:
            return dict(self.req.axes)
        rates = sorted(set(self.lr_axis) | set(added))
        return {**self.req.axes, LR: rates}

    def run_ids(self, req: LaunchRequest) -> list[str]:
        """The run ids a round's request plans (its seeds, axes and kept arms: the plan the launch makes)."""
        from cemctl.grid import load_grid

        plan = load_grid(self.grid, self.scale, req.overrides, seeds=req.seeds, axes=req.axes)
        return [pr.run_id for pr in plan.runs if req.keep_run is None or req.keep_run(pr)]

    def arms(self, record: dict[str, Any], extra: Sequence[dict[str, Any]] = ()) -> dict[str, dict[str, Any]]:
        """The planned arms: the grid's, and each added rate for the arm it was added to (the --axis plans it for
        every arm; the rounds launch only these)."""
        import math

        from cemctl.grid import load_grid
        from cemctl.grid.claims import LR, selector_matches

        added = list(record.get("extensions", [])) + list(extra)
        plan = load_grid(self.grid, self.scale, self.req.overrides, seeds=[0], axes=self.axes(record, extra))
        own = self.lr_axis or []

        def kept(cfg: dict[str, Any]) -> bool:
            lr = float(cfg.get(LR) or 0)
            if any(math.isclose(lr, v, rel_tol=1e-9) for v in own):
                return True
            return any(math.isclose(lr, float(e["lr"]), rel_tol=1e-9) and selector_matches(cfg, e["selector"])
                       for e in added)

        return {k: cfg for k, cfg in _planned_arms(plan.runs).items() if kept(cfg)}

    def extensions(self, key: str, part: Any, row: Any, arms: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """The rate beyond the edge each arm of an undecided own-optimum part sits at, where the profile the page
        used reaches the planned edge and the grid plans the arm at the new rate (its [[exclude]] may not)."""
        import math

        from cemctl.grid.claims import LR, half_octave, selector_matches

        if self.lr_axis is None or row is None or not part.tuned:
            return []
        edges, used = tuple(getattr(row, "edges", ()) or ()), tuple(getattr(row, "profiles", ()) or ())
        out = []
        for k, (where, selector) in enumerate(zip(edges, _free_selectors(part))):
            if not where or k >= len(used) or not used[k]:
                continue
            edge = where.split()[-1]  # at the edge rate, or in the end interval ('near high'): not bracketed
            planned = _rates(selector, arms)
            if len(planned) != 1:
                continue  # several sizes: the page gives no one profile
            lrs = next(iter(planned.values()))
            at = max(used[k]) if edge == "high" else min(used[k])
            if not math.isclose(at, max(lrs) if edge == "high" else min(lrs), rel_tol=1e-9):
                continue  # the planned edge has no finished profile yet: its seeds come first
            new = half_octave(at, 1 if edge == "high" else -1)
            entry = {"part": key, "arm": k + 1, "edge": edge, "lr": new, "from": at, "selector": selector}
            try:
                wider = self.arms({"extensions": [entry]})
            except ConfigError:
                continue
            if any(selector_matches(cfg, selector) and math.isclose(float(cfg.get(LR) or 0), new, rel_tol=1e-9)
                   for cfg in wider.values()):
                out.append(entry)
        return out


def _config(row: dict[str, Any]) -> dict[str, Any]:
    from cemctl.report.arms import config_of

    return config_of(row)


def _planned_config(pr: Any) -> dict[str, Any]:
    from cem_core.config import flatten

    return {k: v for k, v in flatten(pr.config.to_dict()).items() if k != "train.seed"}


def _labels(runs: Any) -> dict[str, str]:
    if runs is None or runs.empty or "arm_label" not in runs.columns:
        return {}
    out = {}
    for row in runs.to_dict("records"):
        key = _arm_key({k: v for k, v in _config(row).items() if k != "train.seed"})
        out.setdefault(key, str(row["arm_label"]))
    return out
