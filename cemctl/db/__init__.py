"""The results database (`cemctl plan`, `launch`, `status`, `report`, `sync`): the stable API.

Open it:
    engine = open_db(db_url(opt))          # cemctl.commands.common.db_url; SQLite WAL or PostgreSQL

Write (planner, executors):
    record_plan(engine, plan, runs_root) -> RecordedPlan(experiment_id, states {run_id: state}, created)
    set_state(engine, run_id, state, reason, executor=..., job_id=..., attempt=...) -> Run
        appends to <run_dir>/events.jsonl, then ingests the run
    write_session(engine)                   # BEGIN IMMEDIATE transaction for your own writes

Ingest the run directories (the ground truth):
    ingest_run(engine, run_dir, heartbeat_timeout_s=120) -> state
    sync_runs(engine, runs_root, heartbeat_timeout_s=120, run_ids=None) -> IngestStats

Read:
    list_runs(engine, experiment=None, states=None, run_ids=None) -> [Run]
    get_run, get_experiment, list_experiments, run_axes, run_events, run_config(run) -> RunConfig
    cemctl.db.frames (pandas): metrics_frame(engine, run_ids), evals_frame, energy_frame (runs: cemctl.records)

Tables and columns: `cemctl.db.models` (and docs/design.md, "Results database").
"""

import importlib
from typing import Any

# Names are imported on first use (PEP 562): `from cemctl.db.engine import ...` must not pay for the ingest, the
# migrations and the plan writer (`cemctl status` imports only what it reads with).
_HOMES = {
    "DatabaseError": "engine", "open_db": "engine", "read_session": "engine", "retry_locked": "engine",
    "write_session": "engine",
    "DEFAULT_HEARTBEAT_TIMEOUT_S": "ingest", "IngestStats": "ingest", "ingest_run": "ingest", "set_state": "ingest",
    "sync_runs": "ingest",
    "CURRENT_VERSION": "migrations",
    "ACTIVE_STATES": "models", "RESULT_STATES": "models", "RUN_STATES": "models", "TERMINAL_STATES": "models",
    "Experiment": "models", "ExperimentRun": "models", "Metric": "models", "Result": "models", "Run": "models",
    "RunEvent": "models",
    "get_experiment": "runs", "get_run": "runs", "list_experiments": "runs", "list_runs": "runs",
    "RecordedPlan": "runs", "record_plan": "runs", "run_axes": "runs", "run_config": "runs", "run_events": "runs",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'cemctl.db' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"cemctl.db.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ACTIVE_STATES", "CURRENT_VERSION", "DEFAULT_HEARTBEAT_TIMEOUT_S", "DatabaseError", "Experiment",
    "ExperimentRun", "IngestStats", "Metric", "RESULT_STATES", "RUN_STATES", "RecordedPlan", "Result", "Run", "RunEvent",
    "TERMINAL_STATES", "get_experiment", "get_run", "ingest_run", "list_experiments", "list_runs", "open_db",
    "read_session", "record_plan", "retry_locked", "run_axes", "run_config", "run_events", "set_state",
    "sync_runs", "write_session",
]
