"""`cemctl confirm EXPERIMENT --scale S`: stage 2 of a claim, a confirmation grid made from stage 1 and registered.

    result = confirm_design(db_url, "fig2a", scale="cpu", runs_root="runs", max_seeds=16, budget_hours=4)
    result.path, result.seeds, result.run_hours, result.lines   # the grid written, its fresh seeds, the estimate

Stage 1 is the experiment's runs: each part that chooses a rate (`at = "own_optimum"`, `optimal_loss`,
`lr_optimum`) takes each arm's rate by its grid's rule from the arm's lr profile (`cemctl.report.claims.choose_rate`).
This writes, beside the experiment's grid file, `<experiment>-confirm.toml`: a grid of exactly the cells stage 2
trains (each arm of each part at its chosen rate, at every model size; an lr_optimum's arms at both chosen rates;
a fixed part's arms at their rate), with

- its `[confirm]` table: the experiment, the stage-1 seeds (never trained again: `plan` and `launch` refuse them),
  the rule, the level and the power;
- every part as a `[[claim.part]]` with its `rates`, its margin in nats (from stage 1's reference arm), its variance
  model (declared, else Welch) and its expectation: the registered hypothesis;
- its seeds: fresh ones after the largest stage-1 seed, as many as 80% power at each part's margin needs at the
  page's first step-down level (alpha over the page's parts) with stage 1's per-arm s.d.s, the largest over the
  parts, at most `max_seeds` and at most what `budget_hours` buys at stage 1's mean run time of those cells;

then records it (`cemctl plan`) and registers it (`.claims/registry.jsonl`) before any of its runs trains. `cemctl
launch <experiment>-confirm --scale S` trains it (with `--until-decided`: in rounds of its registered seeds, alpha
spending over the looks). The written configurations are checked against stage 1's: at a stage-1 seed, a cell at a
rate stage 1 ran is the same run id (the arms differ in nothing but the seed).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cem_core.errors import CemError, ConfigError

SUFFIX = "-confirm"
MIN_SEEDS = 3


@dataclass
class PartPlan:
    claim: str
    part: Any  # PartSpec (stage 1)
    rates: dict[str, list[float]]  # setting -> each arm's rate (an lr_optimum: the two rates)
    margin: float  # nats
    variance: str
    sds: dict[str, list[float]]  # setting -> the stage-1 s.d. of each cell the part compares
    seeds_needed: int | None  # for the target power at the level (None: more than the cap)
    notes: list[str] = field(default_factory=list)


@dataclass
class ConfirmResult:
    experiment: str  # the confirmation grid's experiment
    path: Path
    seeds: list[int]
    cells: int
    run_hours: float  # the estimate: cells x seeds x stage 1's mean run time of those cells
    level: float  # the level the power was planned at
    power: dict[str, float]  # part -> its power at the chosen seeds
    lines: list[str]  # what the command prints
    written: bool = True  # False: the same grid was there already


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"not a TOML value: {value!r}")


def _grid_keys(spec: Any) -> set[str]:
    """Every key the grid sets per run (its axes, zips and extras): with its base, the run's config."""
    keys = set(spec.axes)
    for z in spec.zips:
        keys |= set(z)
    for x in spec.extras:
        keys |= set(x.overrides) | set(x.axes)
    return keys - {"train.seed"}


def confirm_design(db_url: str, experiment: str, *, scale: str | None, runs_root: Path | str,
                   out: Path | str | None = None, max_seeds: int = 16, budget_hours: float | None = None,
                   power: float = 0.8, alpha: float = 0.05, seeds: list[int] | None = None, at_edge: bool = False,
                   ladder: tuple[str, ...] = (), transfer: str = "width", now: float | None = None,
                   record: bool = True) -> ConfirmResult:
    from cem_core.config import flatten
    from cemctl.db.engine import open_existing_db
    from cemctl.db.runs import get_experiment, resolve_runs_root
    from cemctl.grid.claims import LR, check_fresh_seeds, half_octave, selector_matches, variance_model
    from cemctl.records import load_records
    from cemctl.report.aggregate import finished
    from cemctl.report.arms import with_arms
    from cemctl.report.claims import SETTING, PooledArms, _fresh_arms, _margin, estimate_part
    from cemctl.services.claims import gather_claims

    if not 3 <= max_seeds <= 1000:
        raise ConfigError("--max-seeds", f"must be from 3 to 1000, got {max_seeds}")
    if budget_hours is not None and not budget_hours > 0:
        raise ConfigError("--budget-hours", f"must be a positive number of run-hours, got {budget_hours}")
    if not 0 < power < 1:
        raise ConfigError("--power", f"must be between 0 and 1, got {power}")
    from cemctl.grid.claims import TRANSFER

    if transfer not in TRANSFER:
        raise ConfigError("--transfer", f"unknown transfer rule {transfer!r}", allowed=TRANSFER)
    engine = open_existing_db(db_url)
    root = resolve_runs_root(engine, runs_root)
    if record and Path(root).is_dir():  # the runs as their folders say (stage 1 chooses from them)
        from cemctl.db.ingest import sync_runs

        sync_runs(engine, root)
    exp = get_experiment(engine, experiment)
    if exp is None or not exp.grid_text:
        raise CemError(f"confirm: no experiment {experiment!r} is recorded (plan and launch its grid first)")
    here = bool(exp.grid_path) and Path(exp.grid_path).is_file()
    scale = scale or exp.scale
    claims = gather_claims(engine)
    mine = [(c, p) for c in claims for p in c.parts if p.source == experiment and p.rates is None]
    if not mine:
        raise CemError(f"confirm: {experiment!r} declares no [[claim]] part")
    if any(p.confirm is not None for _, p in mine):
        raise CemError(f"confirm: {experiment!r} is itself a confirmation grid")
    frame = load_records(engine, None, scale=scale, per_scale=True).frame()
    done = finished(frame, "test_loss") if not frame.empty else frame
    if not done.empty and "arm" not in done.columns:
        done = with_arms(done)
    spec1, plan1 = _recorded_grid(exp, scale)  # the grid as stage 1 was planned (an import's too)
    ids1 = {pr.run_id for pr in plan1.runs}
    mine_runs = done[done["run_id"].isin(ids1)] if not done.empty else done
    if mine_runs.empty:
        raise CemError(f"confirm: no run of {experiment!r} has finished at scale {scale}: stage 1 chooses from them")
    stage1_seeds = sorted({int(s) for s in mine_runs["train.seed"]})
    settings = sorted({str(s) for s in done[SETTING]})
    arms_by = _fresh_arms(done, settings, only=stage1_seeds)  # stage 1: never an earlier confirmation's seeds
    claims_all = [p for c in claims for p in c.parts]
    page_parts = sum(1 for p in claims_all if (p.source or "") and p.rates is None)
    level = alpha / max(1, page_parts)
    walls = {str(r): float(w) for r, w in zip(done["run_id"], done.get("wall_time_s", [math.nan] * len(done)))
             if isinstance(w, (int, float)) and math.isfinite(w)}
    plans: list[PartPlan] = []
    problems: list[str] = []
    for claim, part in mine:
        stage = "stage 1" if part.chooses else "fixed"
        try:
            est = estimate_part(part, arms_by, stage=stage, scale=scale)
        except PooledArms as e:
            problems.append(f"claim {claim.id}, {part.name!r}: {e}")
            continue
        if est.est is None:
            problems.append(f"claim {claim.id}, {part.name!r}: no stage-1 estimate ({est.why})")
            continue
        rates: dict[str, list[float]] = {}
        for s in est.settings:
            if part.chooses:
                choices = est.choices[s]
                edges = [f"arm {k + 1}'s rate {c.lr:g} is " + ("its only rate" if c.edge == "both" else
                                                                      f"the {c.edge}est of its profile")
                         for k, c in enumerate(choices) if c.edge]
                if edges and not at_edge:
                    problems.append(f"claim {claim.id}, {part.name!r} ({s}): " + "; ".join(edges) + " (extend the "
                                    "profile first, or pass --at-edge to confirm at it)")
                chosen = [c.lr for c in choices]
                if part.statistic == "lr_optimum":
                    lo, hi = sorted(chosen)
                    if math.isclose(lo, hi, rel_tol=1e-9):
                        lo, hi = (lo, half_octave(lo, 1)) if part.expect != "lower" else (half_octave(lo, -1), lo)
                    chosen = [lo, hi]
            else:
                chosen = [_fixed_rate(sel, arms_by[s], selector_matches) for sel in part.arms]
            rates[s] = chosen
        ref_margin = _margin(part, est.refs) if part.unit == "nats" else \
            0.01 * abs(sum(est.refs) / len(est.refs)) if est.refs and all(math.isfinite(r) for r in est.refs) \
            else math.nan
        if part.statistic == "lr_optimum":  # the smallest preference worth finding: 1% of arm 2's loss at its rate
            refs = [sum(a.losses) / len(a.losses) for s in est.settings for a in arms_by[s]
                    if _in(a.config, part.arms[-1], selector_matches) and a.values
                    and math.isclose(float(a.config.get(LR) or 0), est.choices[s][-1].sampled, rel_tol=1e-9)]
            ref_margin = 0.01 * (sum(refs) / len(refs)) if refs else math.nan
        model, _ = variance_model(part)
        sds = {s: _cell_sds(part, arms_by[s], rates[s], selector_matches) for s in rates}
        needed = _seeds_for(part, sds, ref_margin, level, power, model, max_seeds)
        plans.append(PartPlan(claim.id, part, rates, ref_margin, model, sds, needed))
    if problems:
        raise ConfigError("confirm", "; ".join(problems), source=exp.grid_path)
    base_ctx: dict[str, Any] = {}
    if ladder:
        _add_ladder(plans, ladder, transfer, arms_by, base_ctx)
    n = max([p.seeds_needed or max_seeds for p in plans] + [MIN_SEEDS])
    n = min(n, max_seeds)
    cells = _cells(plans)
    hours_per_cell = _hours(cells, arms_by, walls, selector_matches, base_ctx)
    run_hours = n * hours_per_cell
    if budget_hours is not None and run_hours > budget_hours:
        afford = int(budget_hours // hours_per_cell) if hours_per_cell > 0 else n
        if afford < MIN_SEEDS:
            raise ConfigError("--budget-hours", f"{budget_hours:g} run-hours buy {afford} seed"
                              f"{'s' if afford != 1 else ''} of the {len(cells)} cells (about "
                              f"{hours_per_cell:.2f} run-hours a seed at stage 1's run times); a confirmation needs "
                              f"{MIN_SEEDS} at least")
        n = afford
        run_hours = n * hours_per_cell
    if seeds is None:
        start = max(stage1_seeds) + 1
        seeds = list(range(start, start + n))
    else:
        n = len(seeds)
        run_hours = n * hours_per_cell
    from cemctl.grid.claims import ConfirmSpec

    confirm = ConfirmSpec(experiment, tuple(stage1_seeds), next((p.part.choose for p in plans), "best_sampled"),
                          alpha, power, _dt.datetime.fromtimestamp(now if now is not None else
                                                                   _dt.datetime.now().timestamp(),
                                                                   _dt.timezone.utc).strftime("%Y-%m-%d"),
                          tuple(ladder), transfer)
    check_fresh_seeds(confirm, seeds, "--seeds")
    powers = {f"{p.claim}. {p.part.name}": _power(p, n, level) for p in plans}
    name = f"{experiment}{SUFFIX}"
    path = Path(out) if out is not None else (Path(exp.grid_path).with_name(f"{name}.toml") if here
                                               else Path(f"{name}.toml"))
    keys = _grid_keys(spec1)
    configs, planned_here = {}, 0
    flats = [flatten(pr.config.to_dict()) for pr in plan1.runs]
    for setting, sel in cells:
        cfg, same = _config_of(flats, sel, setting, keys, selector_matches, base_ctx)
        if cfg is None:
            raise CemError(f"confirm: no planned run of {experiment!r} has the arm {sel} at {setting}")
        if base_ctx:  # a ladder: every cell names its size and the one context length
            cfg = {**cfg, "model.size": cfg.get("model.size", setting),
                   "model.context_len": cfg.get("model.context_len", base_ctx["context"])}
        configs[(setting, json.dumps(sel, sort_keys=True))] = cfg
        planned_here += same
    text = _grid_text(name, experiment, scale, spec1, confirm, seeds, list(configs.values()), plans, level, powers,
                      run_hours, hours_per_cell, budget_hours, max_seeds, [c for c, _ in mine])
    _check_same_runs(text, path, scale, stage1_seeds[0], ids1, planned_here)
    written = True
    if path.exists():
        if path.read_text() != text:
            raise CemError(f"confirm: {path} exists with other contents (an earlier confirmation design?); a "
                           "registered design is never replaced: give another file with -o")
        written = False
    lines = _summary(name, path, scale, plans, seeds, len(cells), run_hours, level, powers, stage1_seeds, budget_hours)
    if record:
        from cem_core.runfiles import atomic_write_bytes
        from cemctl.services.claim_plans import register_claims
        from cemctl.services.plan import plan_experiment

        if written:
            atomic_write_bytes(path, text.encode())
        plan_experiment(path, scale=scale, db_url=db_url, runs_root=root)
        register_claims(open_existing_db(db_url), name, root, scale=scale, now=now)
    return ConfirmResult(name, path, seeds, len(cells), run_hours, level, powers, lines, written)


def _recorded_grid(exp: Any, scale: str) -> tuple[Any, Any]:
    """(spec, plan) of the grid stage 1 was planned from at the scale: its file here, else the recorded copy of its
    text (an imported experiment), parsed beside nothing, and refused if it names plugins: nothing from an archive
    is imported here."""
    import tempfile
    import tomllib

    from cemctl.grid.spec import parse_grid

    from cemctl.grid.expand import expand as expand_spec

    if exp.grid_path and Path(exp.grid_path).is_file() and Path(exp.grid_path).read_text() == exp.grid_text:
        spec = parse_grid(exp.grid_path, scale, strict_claims=False)
        return spec, expand_spec(spec)
    try:
        plugins = tomllib.loads(exp.grid_text).get("experiment", {}).get("plugins")
    except tomllib.TOMLDecodeError:
        plugins = None
    if plugins:
        raise CemError(f"confirm: {exp.name!r} was planned from {exp.grid_path or 'a grid'} with plugins, not a file "
                       "here; plan its grid file here first (plugins are never imported from a recorded copy)")
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / f"{exp.name}.toml"
        probe.write_text(exp.grid_text)
        spec = parse_grid(probe, scale, strict_claims=False)
        return spec, expand_spec(spec)


def _in(config: dict[str, Any], selector: dict[str, Any], matches: Any) -> bool:
    from cemctl.grid.claims import LR

    return matches(config, {k: v for k, v in selector.items() if k != LR})


def _fixed_rate(selector: dict[str, Any], arms: list[Any], matches: Any) -> float:
    """A fixed part's rate for one arm: its selector's, else its arm's (the grid sets it once)."""
    from cemctl.grid.claims import LR

    if LR in selector:
        return float(selector[LR])
    hit = next(a for a in arms if matches(a.config, selector))
    return float(hit.config.get(LR) or 0)


def _part_cells(part: Any, setting: str, rates: list[float]) -> list[dict[str, Any]]:
    """The cells (selectors with their rate) a stage-2 part compares at one setting."""
    import dataclasses

    return dataclasses.replace(part, rates={setting: tuple(rates)}).selectors_at(setting) or []


def _cells(plans: list[PartPlan]) -> list[tuple[str, dict[str, Any]]]:
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for p in plans:
        for s, rates in p.rates.items():
            for sel in _part_cells(p.part, s, rates):
                out.setdefault(json.dumps([s, sel], sort_keys=True), (s, sel))
    return list(out.values())


def _cell_sds(part: Any, arms: list[Any], rates: list[float], matches: Any) -> list[float]:
    """Each cell's stage-1 s.d. of the test loss (a rate stage 1 did not run: the arm's pooled s.d. over its
    profile)."""
    from cemctl.grid.claims import LR

    out = []
    for sel in _part_cells(part, "_", rates):
        free = {k: v for k, v in sel.items() if k != LR}
        profile = [a for a in arms if matches(a.config, free)]
        at = [a for a in profile if math.isclose(float(a.config.get(LR) or 0), float(sel[LR]), rel_tol=1e-9)]
        use = at if at and len(at[0].values) >= 2 else profile
        ss = dfs = 0.0
        for a in use:
            v = a.losses
            if len(v) >= 2:
                m = sum(v) / len(v)
                ss += sum((x - m) ** 2 for x in v)
                dfs += len(v) - 1
        out.append(math.sqrt(ss / dfs) if dfs else math.nan)
    return out


def _seeds_for(part: Any, sds: dict[str, list[float]], margin: float, level: float, target: float, model: str,
               cap: int) -> int | None:
    """Seeds per arm for `target` power at the margin at `level` (Welch, or paired on the arms' s.d.s as if
    uncorrelated: conservative), the most over the part's settings."""
    from cemctl.report.stats import seeds_for_power

    need = 0
    coefs = (1.0, -1.0, -1.0, 1.0) if len(next(iter(sds.values()), [])) == 4 else (1.0, -1.0)
    for cell_sds in sds.values():
        if not (math.isfinite(margin) and margin > 0) or not all(math.isfinite(s) for s in cell_sds):
            return None
        n = seeds_for_power(target, max_n=cap, expect="lower" if part.expect != "close" else "close", margin=margin,
                            method="Welch", alpha=level, arm_sds=cell_sds, coefs=coefs)
        if n is None:
            return None
        need = max(need, n)
    return max(need, MIN_SEEDS)


def _power(p: PartPlan, n: int, level: float) -> float:
    from cemctl.report.stats import power_at

    out = []
    for cell_sds in p.sds.values():
        coefs = (1.0, -1.0, -1.0, 1.0) if len(cell_sds) == 4 else (1.0, -1.0)
        if not (math.isfinite(p.margin) and p.margin > 0 and all(math.isfinite(s) for s in cell_sds)):
            return math.nan
        out.append(power_at(n, expect="lower" if p.part.expect != "close" else "close", margin=p.margin,
                            method="Welch", alpha=level, arm_sds=cell_sds, coefs=coefs))
    return min(out) if out else math.nan


def _hours(cells: list[tuple[str, dict[str, Any]]], arms_by: dict[str, list[Any]], walls: dict[str, float],
           matches: Any, base_ctx: dict[str, Any] | None = None) -> float:
    """Run-hours of one seed of every cell: each cell at its arm's mean stage-1 run time (over the arm's rates;
    the mean of every run where the arm never ran); a ladder rung at the tuned size's time scaled by its
    parameters (non-embedding, the presets'), as a step's compute scales."""
    from cem_core.sizes import SIZES
    from cemctl.grid.claims import LR

    every = [w for w in walls.values()]
    fallback = sum(every) / len(every) if every else 0.0
    total = 0.0
    for setting, sel in cells:
        free = {k: v for k, v in sel.items() if k != LR}
        scale = 1.0
        if base_ctx and setting != base_ctx.get("size"):
            scale = _params(SIZES[setting]) / _params(SIZES[base_ctx["size"]])
            setting = base_ctx["size"]
        arms = [a for a in arms_by.get(setting, []) if matches(a.config, free)]
        ws = [walls[r] for a in arms for r in a.run_ids if r in walls]
        total += scale * (sum(ws) / len(ws) if ws else fallback) / 3600
    return total


def _params(size: Any) -> float:
    """A preset's layer parameters, roughly (attention 4 d^2 and MLP 3 d m per layer): the ratio of two sizes'
    compute per token."""
    return size.n_layers * (4 * size.d_model ** 2 + 3 * size.d_model * size.d_mlp)


def _add_ladder(plans: list[PartPlan], ladder: tuple[str, ...], transfer: str, arms_by: dict[str, list[Any]],
                base_ctx: dict[str, Any]) -> None:
    """The ladder's rungs: each loss part's arms at every size of `ladder` at the rate transferred from the one size
    stage 1 tuned (`cemctl.grid.claims.transfer_rate`); `base_ctx` gets {"size", "context", "d"} of that size
    (every rung at its context length)."""
    from cem_core.sizes import SIZES
    from cemctl.grid.claims import transfer_rate

    tuned = sorted({s for p in plans for s in p.rates})
    if len(tuned) != 1:
        raise ConfigError("--ladder", f"a ladder transfers the rate from one tuned size; stage 1 has "
                          f"{len(tuned)} ({', '.join(tuned) or 'none'})")
    base = tuned[0]
    unknown = [s for s in ladder if s not in SIZES]
    if unknown or base in ladder:
        raise ConfigError("--ladder", f"must list model sizes other than {base}", value=", ".join(unknown or [base]),
                          allowed=[s for s in SIZES if s != base])
    cfg = next((a.config for a in arms_by.get(base, [])), {})  # type: ignore[var-annotated]
    base_ctx.update(size=base, context=int(cfg.get("model.context_len") or SIZES[base].context_len),
                    d=int(cfg.get("model.d_model") or SIZES[base].d_model))
    for p in plans:
        if p.part.statistic == "lr_optimum":
            continue  # a preference between rates is tested where the rates were chosen
        for rung in ladder:
            p.rates[rung] = [transfer_rate(r, transfer, base_ctx["d"], SIZES[rung].d_model) for r in p.rates[base]]
            p.sds[rung] = p.sds[base]


def _config_of(flats: list[dict[str, Any]], sel: dict[str, Any], setting: str, keys: set[str], matches: Any,
               base_ctx: dict[str, Any] | None = None) -> tuple[dict[str, Any] | None, int]:
    """(the grid keys' values of a cell: a stage-1 planned run of the arm at this size, at the cell's rate, or
    None; 1 when stage 1 planned that rate for the arm, else 0). A ladder rung: the arm at the tuned size, with
    this size and the tuned size's context length."""
    from cemctl.grid.claims import LR

    free = {k: v for k, v in sel.items() if k != LR}
    hits = [f for f in flats if str(f.get("model.size")) == setting and matches(f, free)]
    if not hits and base_ctx and setting != base_ctx.get("size"):
        cfg, _ = _config_of(flats, sel, base_ctx["size"], keys, matches)
        if cfg is None:
            return None, 0
        return {**cfg, "model.size": setting, "model.context_len": base_ctx["context"], LR: float(sel[LR])}, 0
    if not hits:
        return None, 0
    same = [f for f in hits if math.isclose(float(f.get(LR) or 0), float(sel[LR]), rel_tol=1e-9)]
    flat = (same or hits)[0]
    cfg = {k: flat[k] for k in sorted(keys) if k in flat}
    cfg[LR] = float(sel[LR])
    return cfg, 1 if same else 0


def _grid_text(name: str, experiment: str, scale: str, spec1: Any, confirm: Any, seeds: list[int],
               cells: list[dict[str, Any]], plans: list[PartPlan], level: float, powers: dict[str, float],
               run_hours: float, hours_per_cell: float, budget_hours: float | None, max_seeds: int,
               claims: list[Any]) -> str:
    keys = sorted({k for c in cells for k in c})
    lines = [f"# Stage 2 of {experiment}'s claims at scale {scale}: the confirmation design `cemctl confirm` made on "
             f"{confirm.registered}, registered before any of its runs trained.",
             f"# Each arm at the rate stage 1 chose ({confirm.choose.replace('_', ' ')}) on seeds "
             f"{', '.join(map(str, confirm.stage1_seeds))}; trained on fresh seeds only. Do not edit it after a run "
             "has finished (launch refuses): make a new design instead.",
             f"# Seeds: {len(seeds)} per cell, for {confirm.power:.0%} power at each part's margin at level "
             f"{level:.4g} (alpha {confirm.alpha:g} over the page's parts), at most {max_seeds}"
             + (f", within {budget_hours:g} run-hours" if budget_hours is not None else "") + ".",
             f"# Estimated cost: {len(cells)} cells x {len(seeds)} seeds = {len(cells) * len(seeds)} runs, about "
             f"{run_hours:.1f} run-hours ({hours_per_cell * 60:.1f} run-minutes a seed of every cell, stage 1's run "
             "times).",
             "# Power at these seeds: " + "; ".join(f"{k}: {v:.2f}" if math.isfinite(v) else f"{k}: -"
                                                   for k, v in powers.items()),
             "[experiment]",
             f"name = {_toml(name)}",
             f"description = {_toml(f'Confirmation (stage 2) of {experiment} at {scale}: each arm at its chosen rate on fresh seeds')}",
             "",
             "[confirm]",
             f"of = {_toml(experiment)}",
             f"stage1_seeds = {_toml(list(confirm.stage1_seeds))}",
             f"choose = {_toml(confirm.choose)}",
             f"alpha = {_toml(confirm.alpha)}",
             f"power = {_toml(confirm.power)}",
             f"registered = {_toml(confirm.registered)}"]
    if confirm.ladder:
        lines += [f"ladder = {_toml(list(confirm.ladder))}  # sizes at a transferred rate: the ladder, not the decision",
                  f"transfer = {_toml(confirm.transfer)}"]
    lines += ["",
             "[[zip]]  # the cells: each arm at its chosen rate (every key the experiment's grid sets per run)"]
    for k in keys:
        lines.append(f"{json.dumps(k)} = {_toml([c.get(k) for c in cells])}")
    by_claim: dict[str, list[PartPlan]] = {}
    for p in plans:
        by_claim.setdefault(p.claim, []).append(p)
    for claim in {c.id: c for c in claims}.values():
        if claim.id not in by_claim:
            continue
        lines += ["", "[[claim]]", f"id = {_toml(claim.id)}", f"statement = {_toml(claim.statement)}"]
        for p in by_claim[claim.id]:
            part = p.part
            from cemctl.grid.claims import LR

            arms = [{k: v for k, v in sel.items() if k != LR} for sel in part.arms]
            lines += ["[[claim.part]]", f"name = {_toml(part.name)}", f"statistic = {_toml(part.statistic)}",
                      "arms = [" + ",\n        ".join(_toml(a) for a in arms) + "]",
                      f"expect = {_toml(part.expect)}",
                      f"margin = {_toml(round(p.margin, 6) if part.statistic != 'lr_optimum' else 0.0)}"
                      + ("  # nats, from stage 1's reference arm" if part.statistic != "lr_optimum" else
                         "  # a preference between two rates is tested for its direction only"),
                      f"variance = {_toml(p.variance)}",
                      f"rates = {_toml({s: list(r) for s, r in p.rates.items()})}"]
            if part.reference != len(part.arms) - 1:
                lines.append(f"reference = {part.reference + 1}")
            from cemctl.grid.claims import CHANGES_ALLOWED, changed_keys

            differ = changed_keys(arms)  # an older recorded grid may not have said it: the design says it
            changes = list(part.changes) or (differ if len(differ) > CHANGES_ALLOWED[part.statistic] else [])
            if changes:
                lines.append(f"changes = {_toml(changes)}")
    base = dict(spec1.base)
    lines += ["", f"[scale.{scale}]", f"seeds = {_toml(seeds)}", f"[scale.{scale}.base]"]
    lines += [f"{json.dumps(k)} = {_toml(v)}" for k, v in base.items() if k not in keys]
    return "\n".join(lines) + "\n"


def _check_same_runs(text: str, path: Path, scale: str, seed: int, stage1_ids: set[str], expected: int) -> None:
    """The confirmation grid's cells at a stage-1 seed are stage 1's runs wherever stage 1 ran that rate: the
    configurations differ in nothing but the seed (checked on the text, before anything is written)."""
    import tempfile

    from cemctl.grid.expand import expand
    from cemctl.grid.spec import parse_grid

    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / path.name
        probe.write_text(text)
        spec = parse_grid(probe, scale)
        spec.confirm, spec.seeds = None, [seed]
        ids = {pr.run_id for pr in expand(spec).runs}
    if len(ids & stage1_ids) < expected:
        raise CemError(f"confirm: the confirmation grid's cells are not stage 1's configurations ({len(ids & stage1_ids)} "
                       f"of the {expected} cells at rates stage 1 ran are its runs at seed {seed}); nothing was written")


def _summary(name: str, path: Path, scale: str, plans: list[PartPlan], seeds: list[int], cells: int, run_hours: float,
             level: float, powers: dict[str, float], stage1_seeds: list[int], budget_hours: float | None
             ) -> list[str]:
    out = [f"confirmation design {name}: {path}"]
    for p in plans:
        rates = "; ".join(f"{s}: {' / '.join(f'{r:g}' for r in rs)}" for s, rs in p.rates.items())
        key = f"{p.claim}. {p.part.name}"
        pw = powers.get(key, math.nan)
        out.append(f"  {key}: rates {rates}; margin {p.margin:.4g} nats; {p.variance}; power "
                   + (f"{pw:.2f}" if math.isfinite(pw) else "-") + f" at level {level:.3g}")
    out.append(f"  seeds {', '.join(map(str, seeds))} (stage 1 used {', '.join(map(str, stage1_seeds))}); "
               f"{cells} cells x {len(seeds)} seeds = {cells * len(seeds)} runs, about {run_hours:.1f} run-hours"
               + (f" (budget {budget_hours:g})" if budget_hours is not None else ""))
    out.append(f"registered before any of its runs trained; train it: cemctl launch {name} --scale {scale} "
               f"(or in rounds of its seeds: --until-decided)")
    return out
