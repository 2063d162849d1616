"""Test-time recursion of trained runs (`cemctl eval RUN|EXPERIMENT --steps 1,2,4,8`): the orchestration.

    report = evaluate_target(db_url, "fig2c", runs_root, steps=[1, 2, 4], sublayer="both")
    report.rows      # one dict per (run, T): test loss / ppl, FLOPs per token, the trained ppl
    report.notes     # runs skipped (no CEM sublayer, not done) or failed, with the reason

The target is resolved by `cemctl.services.targets.resolve_runs`. Each run is
evaluated by `cem_core.train.recursion_eval.evaluate_steps` (which writes
RUN_DIR/evals.json) and ingested into the `evals` table. A single run that
cannot be evaluated is an error; in an experiment it is a note and the others
go on. torch is imported only here, when the command runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cem_core import runfiles
from cem_core.errors import CemError, ConfigError


@dataclass
class EvalReport:
    kind: str  # "experiment" | "run"
    name: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    evaluated_runs: int = 0


def evaluate_target(url: str, target: str, runs_root: Path, *, steps: str, sublayer: str = "both",
                    device: str | None = None, scale: str | None = None) -> EvalReport:
    from cem_core.train.recursion_eval import SUBLAYERS, EvalRefused, check_evaluable, evaluate_steps, parse_steps
    from cemctl.db import ingest_run, open_db
    from cemctl.services.targets import resolve_runs

    step_list = parse_steps(steps)
    if sublayer not in SUBLAYERS:
        raise ConfigError("--sublayer", f"unknown sublayer {sublayer!r}", value=sublayer, allowed=SUBLAYERS)
    engine = open_db(url)
    resolved = resolve_runs(engine, target, runs_root, scale=scale)
    report = EvalReport(resolved.kind, resolved.name)
    todo = []
    for ref in resolved.runs:
        try:
            check_evaluable(ref.run_dir, sublayer)
            todo.append(ref.run_dir)
        except EvalRefused as e:
            if resolved.kind == "run":
                raise
            report.notes.append(f"skipped {ref.run_id}: {e}")
    if not todo:
        raise EvalRefused(f"experiment {resolved.name!r}: no finished run with a CEM sublayer to evaluate "
                          f"({len(resolved.runs)} runs, all skipped)")
    for run_dir in todo:
        try:
            rows = evaluate_steps(run_dir, step_list, sublayer=sublayer, device=device)
        except EvalRefused as e:  # e.g. an unreadable final checkpoint: the other runs still count
            if resolved.kind == "run":
                raise
            report.notes.append(f"failed {run_dir.name}: {e}")
            continue
        try:
            ingest_run(engine, run_dir)
        except CemError as e:
            report.notes.append(f"{run_dir.name}: evaluated, not ingested: {e}")
        report.evaluated_runs += 1
        result = runfiles.read_result(run_dir)
        trained_ppl = result.test_ppl if result is not None else None
        report.rows += [{**r, "_run": run_dir.name, "_trained_ppl": trained_ppl} for r in rows]
    if not report.rows:
        raise EvalRefused(f"experiment {resolved.name!r}: no run could be evaluated ({len(report.notes)} skipped or failed)")
    return report
