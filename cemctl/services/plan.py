"""Plan an experiment: validate, write each run's config.json, record it (`cemctl plan FILE`).

    report = plan_experiment("experiments/fig2a.toml", scale="tiny", overrides={"train.lr": 0.004},
                             db_url="sqlite:///results.db", runs_root="runs")
    report.rows  -> one dict per run: run_id, axes, params, tokens, FLOPs, GPU-hours, state, new

Everything is validated before anything is written: a bad grid raises
`ConfigError` and leaves no database (not even an empty file) and no run dir.
Then each new run's `config.json` is written atomically into
`<runs_root>/<run_id>/` (the ground truth first) and the experiment and its
runs are recorded (`cemctl.db.record_plan`); runs already known keep their state.
Torch is never imported.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cem_core.errors import ConfigError
from cem_core.plugins import sync_plugin_copy
from cemctl.grid.estimate import (DEFAULT_CPU_GFLOPS, DEFAULT_GPU_MEM_GIB, DEFAULT_GPU_TFLOPS, DEFAULT_MFU, micro_batch_notes,
                                  plugin_variants, run_cost, same_model_notes, undeclared_flops)
from cemctl.grid.expand import Plan, load_grid
from cemctl.grid.kinds import DEFAULT_SCALE


@dataclass
class PlanReport:
    plan: Plan
    rows: list[dict[str, Any]]
    new_runs: int = 0
    totals: dict[str, Any] = field(default_factory=dict)
    claim_notes: list[str] = field(default_factory=list)  # own-optimum profiles short of rates (cemctl.grid.claims)
    notes: list[str] = field(default_factory=list)  # what the costs leave out (a plugin variant's undeclared FLOPs)
    variants: list[str] = field(default_factory=list)  # the plugin variants the runs use, by their declared labels
    recorded: bool = False  # the runs were recorded (not a dry run)
    database: str = ""  # where (or, for a dry run, where they would be): a path or a URL without its password

    def recorded_line(self) -> str:
        """'recorded 12 runs of fig2a at scale cpu in results.db (12 new); ...': what a plan wrote, unlike a dry run."""
        from cem_core.names import plural

        p = self.plan
        where = f" in {self.database}" if self.database else ""
        if not self.recorded:
            return f"dry run: nothing recorded (without --dry-run, plan records these {plural(len(self.rows), 'run')}{where})"
        added = f", {plural(len(p.added_axes), 'axis', 'axes')} from --axis" if p.added_axes else ""
        return (f"recorded {plural(len(self.rows), 'run')} of {p.name} at scale {p.scale}{where} ({self.new_runs} new"
                f"{added}); `cemctl launch {p.name}` trains those not done")

    def to_json(self) -> dict[str, Any]:
        p = self.plan
        return {
            "experiment": p.name, "figure": p.figure, "scale": p.scale, "grid": p.path,
            "overrides": p.overrides, "axes_added": p.added_axes, "varied": p.varied, "excluded": p.excluded,
            "duplicates": p.duplicates, "new_runs": self.new_runs, "recorded": self.recorded, "plugin_variants": self.variants,
            "database": self.database, "totals": self.totals, "notes": self.notes,
            "runs": self.rows, "claim_notes": self.claim_notes,
        }


def write_run_configs(plan: Plan, runs_root: Path | str) -> int:
    """Write `config.json` of every run that has none yet (atomically); returns how many were written.

    A run folder that is a symlink out of the runs root is refused before anything is written (RunFileError):
    the planner never writes, and `sync` never reads, a run outside the runs folder.
    """
    from cem_core.runfiles import CONFIG_FILE, RunFileError, atomic_write_json

    root = Path(runs_root)
    real_root = os.path.realpath(root)
    for pr in plan.runs:
        folder = root / pr.run_id
        if os.path.islink(folder) and os.path.dirname(os.path.realpath(folder)) != real_root:
            raise RunFileError(f"{folder}: refused: a symlink out of the runs folder (to {os.path.realpath(folder)}); "
                               "remove the link or give another --runs-dir")
    if plan.plugins:  # the copy the jobs import (launch snapshots it); never over an edit made in it
        sync_plugin_copy(root, plan.plugins)
    written = 0
    for pr in plan.runs:
        path = root / pr.run_id / CONFIG_FILE
        if not os.path.lexists(path):  # no fsync: a lost file is rewritten by the next plan
            atomic_write_json(path, pr.config.to_dict(), durable=False, indent=1, make_parents=True)
            written += 1
    return written


def claim_profile_notes(plan: Plan) -> list[str]:
    """What the grid's own-optimum claims still need at this scale: the lr profile points to add."""
    from cem_core.config import flatten
    from cemctl.grid.claims import profile_notes, recorded_claims

    claims = recorded_claims(plan.text, plan.path)
    if not claims:
        return []
    runs = [(flatten(pr.config.to_dict()), str(pr.config.model.size)) for pr in plan.runs]
    return profile_notes(runs, claims, plan.scale)


def grid_path(target: str | Path) -> Path:
    """The grid file a command-line target names (`cemctl.grid.files.find_grid`); a one-line error listing
    the packaged grids when it names none."""
    from cemctl.grid.files import find_grid, packaged_grids

    found = find_grid(str(target))
    if found is None:
        names = ", ".join(packaged_grids()) or "none"
        raise ConfigError("file", f"no such grid file (packaged grids: {names})", source=str(target))
    return found


@dataclass
class Calibration:
    """What runs already finished on this host measured (`measured_rates`): training FLOP/s per worker by model size
    and device kind ("cpu", "cuda"), from how long each took (its first start to its result), with how many runs."""

    host: str
    rates: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict)  # (size, device) -> (FLOP/s, runs)

    def rate(self, size: Any, device: str) -> float | None:
        got = self.rates.get((str(size), device))
        return got[0] if got else None

    def describe(self, device: str, sizes: Any = None) -> str:
        """'the throughput of 12 runs finished on this host (vm), on cpu: micro 11.8 GFLOP/s per worker'."""
        items = sorted((s, r, n) for (s, d), (r, n) in self.rates.items() if d == device
                       and (sizes is None or s in {str(x) for x in sizes}))
        if not items:
            return ""
        runs = sum(n for _, _, n in items)
        return (f"the throughput of {runs} run{'s' if runs != 1 else ''} finished on this host ({self.host}) on "
                f"{device}: " + ", ".join(f"{s} {r / 1e9:.3g} GFLOP/s per worker" for s, r, _ in items))


def measured_rates(db_url: str | None, *, host: str | None = None) -> Calibration | None:
    """The training throughput of the runs this database recorded as finished on `host` (default: this machine),
    per model size and device kind: the median of each run's training FLOPs over the seconds it took from its first
    start to its result (a run started more than once: its recorded wall time). None without a database or runs."""
    import socket
    import statistics

    from cemctl.db.engine import DatabaseError, open_readonly_db

    if db_url is None:
        return None
    host = host or socket.gethostname()
    try:
        engine = open_readonly_db(db_url)
        from cemctl.records import load_records

        records = load_records(engine, None, arms=False).records
    except (DatabaseError, OSError, ConfigError):
        return None
    except Exception:  # noqa: BLE001 - an estimate never stops a plan
        return None
    per: dict[tuple[str, str], list[float]] = {}
    for r in records:
        if r.get("state") != "done" or r.get("host") != host:
            continue
        flops, device, size = r.get("train_flops"), str(r.get("device") or ""), r.get("model.size")
        start, end, wall = r.get("started_at"), r.get("finished_at"), r.get("wall_time_s")
        took = end - start if (r.get("attempts") or 1) == 1 and isinstance(start, (int, float)) \
            and isinstance(end, (int, float)) and end > start else wall
        if not device or size is None or not isinstance(flops, (int, float)) or not isinstance(took, (int, float)) \
                or not (took > 0 and flops > 0 and math.isfinite(took) and math.isfinite(flops)):
            continue
        per.setdefault((str(size), device.split(":")[0]), []).append(float(flops) / float(took))
    if not per:
        return None
    return Calibration(host, {k: (statistics.median(v), len(v)) for k, v in per.items()})


def cost_rows(plan: Plan, *, gpu_tflops: float, mfu: float | None,
              cpu_gflops: float = DEFAULT_CPU_GFLOPS) -> list[dict[str, Any]]:
    rows = []
    for pr in plan.runs:
        c = run_cost(pr.config, gpu_tflops=gpu_tflops, mfu=mfu, cpu_gflops=cpu_gflops)
        rows.append(
            {
                "run_id": pr.run_id, "axes": pr.axes, "params_total": c.params_total,
                "params_non_embedding": c.params_non_embedding, "steps": c.steps, "tokens": c.tokens,
                "train_flops": c.train_flops, "gpu_hours": c.gpu_hours, "cpu_hours": c.cpu_hours,
                "state": "planned", "new": True,
                "marks": list(pr.marks),
            }
        )
    return rows


def known_states(db_url: str | None, run_ids: list[str]) -> dict[str, str]:
    """{run id: state} of the runs an existing database holds (opened read-only, never created; {} without one)."""
    if db_url is None:
        return {}
    from sqlalchemy import select

    from cemctl.db import read_session
    from cemctl.db.engine import DatabaseError, open_existing_db
    from cemctl.db.models import Run

    try:
        engine = open_existing_db(db_url)
    except DatabaseError as e:
        if "no results database" in str(e):
            return {}
        raise
    out: dict[str, str] = {}
    with read_session(engine) as s:
        for i in range(0, len(run_ids), 500):
            out.update(dict(s.execute(select(Run.id, Run.state).where(Run.id.in_(run_ids[i:i + 500]))).all()))
    return out


def check_claims(plan: Plan, db_url: str | None, *, overrides: dict[str, Any], axes: dict[str, list[Any]]) -> None:
    """The grid's [[claim]] tables against its runs and the project (ConfigError, nothing written): every arm
    selector matches an arm of the grid (at this scale, else at another scale the grid defines: with this
    command's overrides, or, where they do not apply there (a micro-batch that does not divide that scale's
    batch), with those of the keys the selectors name), and no claim collides with another recorded experiment's
    (`cemctl.grid.claims.clashes`)."""
    from cem_core.config import flatten
    from cemctl.grid.claims import clashes, describe_selector, unmatched_selectors
    from cemctl.grid.claims import recorded_claims
    from cemctl.grid.spec import parse_grid

    claims = recorded_claims(plan.text, plan.path)
    if not claims:
        return
    configs = [flatten(pr.config.to_dict()) for pr in plan.runs]
    missing = unmatched_selectors(claims, configs)
    if missing:
        for other in parse_grid(plan.path, plan.scale).scales_defined:
            if other == plan.scale or not missing:
                continue
            try:
                at = load_grid(plan.path, other, overrides, axes=axes)
            except ConfigError:  # an override that does not apply there: keep those of the keys selectors name
                named = {k for claim in claims for part in claim.parts for arm in part.arms for k in arm}
                try:
                    at = load_grid(plan.path, other, {k: v for k, v in overrides.items() if k in named},
                                   axes={k: v for k, v in (axes or {}).items() if k in named})
                except ConfigError:
                    continue
            found = unmatched_selectors(claims, [flatten(pr.config.to_dict()) for pr in at.runs])
            missing = [m for m in missing if m in found]
    if missing:
        i, j, k = missing[0]
        keys = ", ".join(k_ for k_ in plan.varied if k_ != "train.seed") or "none: every run has one arm"
        raise ConfigError(f"claim[{i}].part[{j}].arms[{k}]", f"claim {claims[i].id!r}: selector "
                          f"{describe_selector(claims[i].parts[j].arms[k])} matches no arm of this grid (the keys its "
                          f"arms vary: {keys})", source=plan.path)
    if db_url is None:
        return
    from cemctl.db.engine import DatabaseError, open_existing_db
    from cemctl.db.runs import list_experiments

    try:
        engine = open_existing_db(db_url)
    except DatabaseError as e:
        if "no results database" in str(e):
            return
        raise
    others = [(e.name, e.grid_path, recorded_claims(e.grid_text, e.grid_path or e.name))
              for e in list_experiments(engine) if e.name != plan.name]
    clash = clashes(claims, others)
    if clash is not None:
        raise clash.with_source(plan.path)


def plan_experiment(
    path: str | Path,
    *,
    scale: str = DEFAULT_SCALE,
    overrides: dict[str, Any] | None = None,
    db_url: str | None = None,
    runs_root: str | Path = "runs",
    gpu_tflops: float = DEFAULT_GPU_TFLOPS,
    mfu: float | None = DEFAULT_MFU,
    cpu_gflops: float | None = None,
    gpu_mem_gib: float = DEFAULT_GPU_MEM_GIB,
    record: bool = True,
    seeds: list[int] | None = None,
    add_seeds: int = 0,
    only: Callable[[Any], bool] | None = None,
    axes: dict[str, list[Any]] | None = None,
    calibrate_costs: bool = False,
) -> PlanReport:
    """Validate and expand the grid (with the command line's `axes`, `--axis`), then (if `record`) write config.json
    files and record the runs (`only`: the planned runs it keeps, e.g. the arms a round of `launch --until-decided`
    adds seeds to). `calibrate_costs`: the CPU- and GPU-hours from what runs of the same model size already
    measured on this host (`measured_rates`; `cemctl plan` asks for it), where `cpu_gflops` / `mfu` are not given."""
    if not (gpu_tflops > 0 and math.isfinite(gpu_tflops)):
        raise ConfigError("--gpu-tflops", f"must be a positive, finite number, got {gpu_tflops}")
    if mfu is not None and not 0 < mfu <= 1:
        raise ConfigError("--mfu", f"must be in (0, 1], got {mfu}")
    if not (gpu_mem_gib > 0 and math.isfinite(gpu_mem_gib)):
        raise ConfigError("--gpu-mem-gib", f"must be a positive, finite number, got {gpu_mem_gib}")
    if cpu_gflops is not None and not (cpu_gflops > 0 and math.isfinite(cpu_gflops)):
        raise ConfigError("--cpu-gflops", f"must be a positive, finite number, got {cpu_gflops}")
    plan = load_grid(grid_path(path), scale, overrides, seeds=seeds, add_seeds=add_seeds, axes=axes)
    check_claims(plan, db_url, overrides=overrides or {}, axes=axes or {})
    if only is not None:
        plan.runs = [pr for pr in plan.runs if only(pr)]
    rows = cost_rows(plan, gpu_tflops=gpu_tflops, mfu=mfu, cpu_gflops=cpu_gflops or DEFAULT_CPU_GFLOPS)
    configs = [pr.config for pr in plan.runs]
    calibrated = calibrate(rows, plan, measured_rates(db_url) if calibrate_costs else None, cpu_gflops=cpu_gflops,
                           mfu=mfu)
    from cemctl.db.engine import shown_url

    report = PlanReport(plan, rows, claim_notes=claim_profile_notes(plan), notes=undeclared_flops(configs) + same_model_notes(plan.runs)
                        + micro_batch_notes(configs, gpu_mem_gib),
                        variants=plugin_variants(configs), database=shown_url(db_url, relative=True) if db_url else "")
    if record:
        from cemctl.db import open_db, record_plan
        from cemctl.db.engine import DatabaseError, is_readonly

        if db_url is None:
            raise ConfigError("--db", "a database URL is needed to record the plan")
        engine = open_db(db_url)
        if is_readonly(engine):  # refuse before writing any config.json
            raise DatabaseError(f"--db: {db_url} is read-only here; planning records runs (use --dry-run to look only)")
        from cemctl.db.runs import refresh_plugin_copy, resolve_runs_root

        runs_root = resolve_runs_root(engine, runs_root)
        refresh_plugin_copy(runs_root)
        write_run_configs(plan, runs_root)
        recorded = record_plan(engine, plan, runs_root)
        for row in rows:
            row["state"] = recorded.states[row["run_id"]]
            row["new"] = row["run_id"] in recorded.created
        report.new_runs = sum(r["new"] for r in rows)
        report.recorded = True
    else:  # a dry run writes nothing, but a run the database already has is not new and a done run costs nothing
        if db_url is not None:  # and what recording would refuse (another grid's experiment of this name) it refuses
            from cemctl.db.engine import DatabaseError, open_existing_db
            from cemctl.db.runs import check_plan

            try:
                engine = open_existing_db(db_url)
            except DatabaseError as e:
                if "no results database" not in str(e):
                    raise
            else:
                check_plan(engine, plan)  # type: ignore[arg-type]
        known = known_states(db_url, [r["run_id"] for r in rows])
        for row in rows:
            if row["run_id"] in known:
                row["state"], row["new"] = known[row["run_id"]], False
        report.new_runs = sum(r["new"] for r in rows)
    report.totals = {
        "runs": len(rows),
        "tokens": sum(r["tokens"] for r in rows),
        "train_flops": sum(r["train_flops"] for r in rows),
        "gpu_hours": sum(r["gpu_hours"] for r in rows),
        "gpu_tflops": gpu_tflops,
        "mfu": mfu,  # None: measured by the model's width (cemctl/grid/estimate.py)
        "gpu_mem_gib": gpu_mem_gib,
        "cpu_hours": sum(r["cpu_hours"] for r in rows if r["new"] or r["state"] != "done"),
        "cpu_gflops": cpu_gflops or DEFAULT_CPU_GFLOPS,
        "calibrated": calibrated,  # {"cpu": "the throughput of ... on cpu: ...", "gpu": ...}: what the hours used
    }
    report.totals["gpu_fixed_hours"] = gpu_fixed_hours(plan) if not calibrated.get("gpu") else 0.0
    return report


def calibrate(rows: list[dict[str, Any]], plan: Plan, cal: "Calibration | None", *, cpu_gflops: float | None,
              mfu: float | None) -> dict[str, str]:
    """Replace the rows' CPU-hours (unless `--cpu-gflops` was given) and GPU-hours (unless `--mfu` was) with what
    runs of the same model size already measured on this host (`measured_rates`), where there are some; returns
    what each estimate used, for the totals line."""
    out: dict[str, str] = {}
    if cal is None:
        return out
    sizes = {pr.run_id: pr.config.model.size for pr in plan.runs}
    used: dict[str, set[Any]] = {"cpu": set(), "cuda": set()}
    for row in rows:
        size = sizes.get(row["run_id"])
        if cpu_gflops is None and (rate := cal.rate(size, "cpu")):
            row["cpu_hours"] = row["train_flops"] / rate / 3600.0
            used["cpu"].add(size)
        if mfu is None and (rate := cal.rate(size, "cuda")):
            row["gpu_hours"] = row["train_flops"] / rate / 3600.0
            used["cuda"].add(size)
    for device, key in (("cpu", "cpu"), ("cuda", "gpu")):
        if used[device]:
            missing = sorted({str(s) for s in sizes.values()} - {str(s) for s in used[device]})
            out[key] = cal.describe(device, used[device]) + (f"; {', '.join(missing)}: not measured here, the "
                                                             "default assumed" if missing else "")
    return out


def gpu_fixed_hours(plan: Plan) -> float:
    """The part of the GPU-hours that is each run's fixed cost on a GPU whatever its FLOPs (start, compilation,
    evaluation: `cemctl.grid.estimate.GPU_RUN_OVERHEAD_S`): plan says how much of the total it is, so that runs of
    different sizes reading alike is explained."""
    from cemctl.grid.estimate import GPU_RUN_OVERHEAD_CEM_S, GPU_RUN_OVERHEAD_S, _has_cem

    return sum((GPU_RUN_OVERHEAD_CEM_S if _has_cem(pr.config) else GPU_RUN_OVERHEAD_S) for pr in plan.runs) / 3600.0


def launch_estimate(db_url: str | None, run_dirs: list[Path], workers: int) -> str:
    """'estimate: about 6 min for 4 runs with 2 workers (at the throughput of 12 runs finished on this host ...)':
    what a local launch without a GPU will take, from what runs of the same model sizes measured here, where some
    did; '' when none of the launched sizes was measured here (the grid's ETA then follows its first runs)."""
    from cem_core.runfiles.saved_config import read_run_config
    from cemctl.grid.estimate import run_cost

    cal = measured_rates(db_url)
    if cal is None or not run_dirs:
        return ""
    seconds, sizes, unmeasured = 0.0, set(), 0
    for d in run_dirs:
        try:
            cfg = read_run_config(d).config
            flops = run_cost(cfg).train_flops
        except Exception:  # noqa: BLE001 - an estimate never stops a launch
            return ""
        rate = cal.rate(cfg.model.size, "cpu")
        if rate is None:
            unmeasured += 1
            continue
        seconds += flops / rate
        sizes.add(cfg.model.size)
    if not sizes:
        return ""
    from cemctl.records.formats import duration

    measured = len(run_dirs) - unmeasured
    left_out = f"; {unmeasured} run{'s' if unmeasured != 1 else ''} of sizes not measured here not counted" \
        if unmeasured else ""
    return (f"estimate: about {duration(seconds / max(1, min(workers, measured)))} for {measured} "
            f"run{'s' if measured != 1 else ''} with {workers} worker{'s' if workers != 1 else ''} "
            f"(at {cal.describe('cpu', sizes)}{left_out})")
