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

from cemctl.db.engine import DatabaseError, open_db, read_session, retry_locked, write_session
from cemctl.db.ingest import DEFAULT_HEARTBEAT_TIMEOUT_S, IngestStats, ingest_run, set_state, sync_runs
from cemctl.db.migrations import CURRENT_VERSION
from cemctl.db.models import (
    ACTIVE_STATES,
    RESULT_STATES,
    RUN_STATES,
    TERMINAL_STATES,
    Experiment,
    ExperimentRun,
    Metric,
    Result,
    Run,
    RunEvent,
)
from cemctl.db.runs import (
    get_experiment,
    get_run,
    list_experiments,
    list_runs,
    RecordedPlan,
    record_plan,
    run_axes,
    run_config,
    run_events,
)

__all__ = [
    "ACTIVE_STATES", "CURRENT_VERSION", "DEFAULT_HEARTBEAT_TIMEOUT_S", "DatabaseError", "Experiment",
    "ExperimentRun", "IngestStats", "Metric", "RESULT_STATES", "RUN_STATES", "RecordedPlan", "Result", "Run", "RunEvent",
    "TERMINAL_STATES", "get_experiment", "get_run", "ingest_run", "list_experiments", "list_runs", "open_db",
    "read_session", "record_plan", "retry_locked", "run_axes", "run_config", "run_events", "set_state",
    "sync_runs", "write_session",
]
