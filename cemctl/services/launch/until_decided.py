"""`cemctl launch EXPERIMENT --until-decided [--max-seeds N] [--budget-hours H]`: seeds in rounds until decided.

    report = until_decided(LaunchRequest(target="fig2a", scale="cpu"), db_url, runs_root, max_seeds=16)
    report.stop, report.message, report.seeds   # why it stopped; seeds each arm has

The loop (the statistics: `cemctl.report.sequential`; docs/claims.md):

1. launch the grid as it is (its seeds), through the ordinary launcher;
2. record a look: the finished runs at the scale, in `<runs>/.claims/sequential/<experiment>@<scale>.json`
   with the design (alpha, spending, the seed cap N, the experiment's parts) fixed at the first look;
3. evaluate every claim of the page at the scale (`cemctl.report.claims.evaluate_page`: this experiment's
   parts over their looks with alpha spending, the step-down over every part);
4. decide (`cemctl.report.sequential.next_round`, pure): stop when every part of the experiment is decided,
   when the next round would pass the seed cap or the budget of run-hours; otherwise bring the arms of the
   undecided parts (each learning rate of an own-optimum profile is an arm) to `round_seeds` more seeds and
   launch only those runs (the plan records only them), then go to 2.

Only the local executor waits for its runs, so only it can run rounds. The budget counts the run-hours of the
runs this loop launched (their own wall times); a round is not started if its estimate (its runs x the mean
wall time of the finished runs) would pass it.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cem_core.errors import CemError, ConfigError
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
    spent_hours: float = 0.0
    parts: Any = None  # the last page's rows of this experiment's parts
    design_path: Path | None = None

    def summary(self) -> str:
        return (f"{self.experiment} ({self.scale}): stopped after {len(self.rounds)} round"
                f"{'s' if len(self.rounds) != 1 else ''}: {self.stop}: {self.message}; {self.spent_hours:.2f} "
                f"run-hours launched")


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


def until_decided(req: LaunchRequest, url: str, runs_root: Path | str, *, max_seeds: int = DEFAULT_MAX_SEEDS,
                  budget_hours: float | None = None, round_seeds: int = ROUND_SEEDS, alpha: float = 0.05,
                  launch_fn: Callable[..., Any] = launch, on_round: Callable[[str], None] | None = None,
                  on_launch: Callable[[Any], None] | None = None, launch_kw: dict[str, Any] | None = None
                  ) -> UntilDecidedReport:
    """Launch the experiment, then rounds of seeds for the arms of its undecided parts until every part is
    decided, the seed cap or the budget is reached (see the module docstring)."""
    from cemctl.db.engine import open_db
    from cemctl.db.runs import get_experiment, resolve_runs_root
    from cemctl.grid import load_grid
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
    first = launch_fn(req, url, runs_root, **kw)
    if on_launch is not None:
        on_launch(first)
    experiment = first.experiment
    launched_ids = {s.run_id for s in first.submitted}
    engine = open_db(url)
    root = resolve_runs_root(engine, runs_root)
    exp = get_experiment(engine, experiment)
    if exp is None or not exp.grid_path or not Path(exp.grid_path).is_file():
        raise CemError(f"launch --until-decided: {experiment!r} has no grid file to plan more seeds from")
    scale = req.scale or exp.scale
    claims = [c for c in gather_claims(engine) if any(p.source == experiment for p in c.parts)]
    # an lr_optimum part (a bootstrap over seeds) has no sequential analysis: it is decided on the runs there are
    # and gets no seeds from the loop (its arms are whole sweeps)
    family = [(experiment, c.id, p.name) for c in claims for p in c.parts
              if p.source == experiment and p.statistic != "lr_optimum"]
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
                             "family": [list(k) for k in family], "started_at": time.time()}, "looks": []}
    grid = grid_path(exp.grid_path)
    arms = _planned_arms(load_grid(grid, scale, seeds=[0]).runs)
    part_arms = {f"{c.id}. {p.name}": _part_arms(p, arms) for c in claims for p in c.parts
                 if (experiment, c.id, p.name) in family}
    number = 0
    while True:
        runs = finished_runs(engine, scale)
        ids = sorted(str(r) for r in runs["run_id"]) if not runs.empty else []
        if not record["looks"] or set(record["looks"][-1]["runs"]) != set(ids):
            record["looks"].append({"time": time.time(), "runs": ids})
        report.design_path = write_design(root, experiment, scale, record)
        page = evaluate_page(runs, gather_claims(engine), scales=[scale], designs=load_designs(root, scale))
        mine = page.parts[[(experiment, str(r.claim), r.part) in family for r in page.parts.itertuples()]] \
            if not page.parts.empty else page.parts
        report.parts = mine
        # a part whose lr profile lacks rates cannot be decided by more seeds: it takes none (plan says what to add)
        decided = {f"{r.claim}. {r.part}": r.label_holm not in ("inconclusive", "not run")
                   or "learning rate" in str(getattr(r, "why_not_run", "") or "") for r in mine.itertuples()}
        seeds: dict[str, int] = {}
        for row in runs.to_dict("records") if not runs.empty else []:
            key = _arm_key({k: v for k, v in _config(row).items() if k != "train.seed"})
            seeds[key] = seeds.get(key, 0) + 1
        walls = [float(w) for w in (runs["wall_time_s"] if "wall_time_s" in runs.columns else []) if w == w]
        hours_per_run = (sum(walls) / len(walls) / 3600) if walls else 0.0
        spent = sum(float(w) for rid, w in zip(runs.get("run_id", []), runs.get("wall_time_s", []))
                    if str(rid) in launched_ids and w == w) / 3600
        report.spent_hours = spent
        labels = _labels(runs)
        report.seeds = {labels.get(a, a): seeds.get(a, 0) for a in sorted({a for v in part_arms.values() for a in v})}
        decision = next_round([{"key": k, "decided": decided.get(k, False), "arms": v} for k, v in part_arms.items()],
                              arm_seeds=seeds, max_seeds=max_seeds, round_seeds=round_seeds, spent_hours=spent,
                              budget_hours=budget_hours, hours_per_run=hours_per_run)
        if decision.stop:
            report.stop, report.message = decision.stop, decision.message
            break
        number += 1
        say(f"round {number}: {len(decision.undecided)} part{'s' if len(decision.undecided) != 1 else ''} "
            f"undecided; {decision.message}")
        wanted = set(decision.arms)
        sub = dataclasses.replace(req, target=str(grid), scale=scale, seeds=list(range(decision.seeds)), add_seeds=0,
                                  keep_run=lambda pr, wanted=wanted: _arm_key(_planned_config(pr)) in wanted)
        result = launch_fn(sub, url, runs_root, **kw)
        if on_launch is not None:
            on_launch(result)
        started = [s.run_id for s in result.submitted]
        launched_ids.update(started)
        report.rounds.append(Round(number, decision.seeds, len(started), decision.undecided, decision.message))
        if not started:
            report.stop = "nothing to run"
            report.message = (f"round {number} started no run (the runs it needs failed or are running elsewhere; "
                              "`cemctl status` says which)")
            break
    record["stopped"] = {"time": time.time(), "reason": report.stop, "message": report.message,
                         "seeds": report.seeds}
    report.design_path = write_design(root, experiment, scale, record)
    return report


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
