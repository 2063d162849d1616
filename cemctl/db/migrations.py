"""Schema versions of the results database; `open_db` upgrades older files in place.

The version lives in the `schema_version` table (one row per applied version).
A database is never discarded: each step below is applied inside one write
transaction (SQLite and PostgreSQL both roll DDL back on error), then stamped.

Versions:
  1  experiments, experiment_runs, runs (state, executor, progress), metrics,
     results, schema_version.  (A file with a `runs` table and no
     `schema_version` table is treated as version 1.)
  2  runs: state_reason, state_at, pid, heartbeat_at, tokens_per_s, params_total,
     params_non_embedding, flops_per_token and the incremental-ingest offsets;
     experiments.overrides_json; experiment_runs.position; metrics.extra_json;
     results: flops_per_token, train_flops, diverged_step; table run_events;
     indexes for status (runs by state) and report (links by run).
  3  metrics gets a `series` column and the unique key (run_id, kind, step, series),
     so the several energy lines of one step are kept apart (the table is rebuilt:
     SQLite cannot change a constraint in place).
  4  table `evals` (test-time recursion results of `cemctl eval`, unique
     (run_id, attn_steps, mlp_steps)); runs.evals_mtime (evals.json last ingested).
  5  experiment_runs keyed by (experiment, scale, --set overrides, run): one set of
     links per plan key, so re-planning at another scale no longer hides results;
     marks_json ([[mark]] labels) and planned_at. Old links take their experiment's
     recorded scale and overrides (the table is rebuilt: a new primary key).
  6  runs.config_mtime (config.json last checked against the run id; the `damaged` state).
  7  table `run_tags` (a run's tags and notes, mirrored from its tags.json: `cemctl tag`, `cemctl note`).
  8  results.code_fingerprint (the model and training code that produced the result: cem_core.fingerprint).
  9  table `run_environment` (what a run trained on, mirrored from its environment.json) and
     runs.environment_mtime (environment.json last ingested). Older runs have no row.
 10  table `result_history` (a run's earlier results, from the result.json of its set-aside folders).

To add version N: write `_to_vN(conn)` with explicit DDL, add it to
`MIGRATIONS`, bump `CURRENT_VERSION`, and add a test that opens a version N-1
file with data.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from sqlalchemy import inspect, select, text
from sqlalchemy.engine import Connection, Engine

from cemctl.db.errors import SCHEMA_VERSION, DatabaseError
from cemctl.db.models import Base, RunEvent, SchemaVersion

CURRENT_VERSION = SCHEMA_VERSION


def _add_columns(conn: Connection, table: str, columns: list[tuple[str, str]]) -> None:
    existing = {c["name"] for c in inspect(conn).get_columns(table)}
    for name, ddl in columns:
        if name not in existing:
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {name} {ddl}"))


def _to_v2(conn: Connection) -> None:
    _add_columns(conn, "experiments", [("overrides_json", "TEXT NOT NULL DEFAULT '{}'")])
    _add_columns(conn, "experiment_runs", [("position", "INTEGER NOT NULL DEFAULT 0")])
    _add_columns(
        conn,
        "runs",
        [
            ("state_reason", "TEXT"),
            ("state_at", "FLOAT"),
            ("pid", "INTEGER"),
            ("heartbeat_at", "FLOAT"),
            ("tokens_per_s", "FLOAT"),
            ("params_total", "BIGINT"),
            ("params_non_embedding", "BIGINT"),
            ("flops_per_token", "BIGINT"),
            ("metrics_offset", "BIGINT NOT NULL DEFAULT 0"),
            ("metrics_fingerprint", "VARCHAR(64) NOT NULL DEFAULT ''"),
            ("events_offset", "BIGINT NOT NULL DEFAULT 0"),
            ("events_fingerprint", "VARCHAR(64) NOT NULL DEFAULT ''"),
            ("events_lines", "INTEGER NOT NULL DEFAULT 0"),
            ("result_mtime", "FLOAT"),
        ],
    )
    _add_columns(conn, "metrics", [("extra_json", "TEXT")])
    _add_columns(
        conn,
        "results",
        [("flops_per_token", "BIGINT"), ("train_flops", "FLOAT"), ("diverged_step", "INTEGER")],
    )
    RunEvent.__table__.create(conn, checkfirst=True)  # type: ignore[attr-defined]  # a Table (mypy sees a FromClause)
    conn.execute(text("CREATE INDEX IF NOT EXISTS ix_runs_state ON runs (state)"))
    conn.execute(text("CREATE INDEX IF NOT EXISTS ix_experiment_runs_run_id ON experiment_runs (run_id)"))
    # Older rows: a state time so that newer file evidence can win over it.
    conn.execute(text("UPDATE runs SET state_at = COALESCE(updated_at, created_at) WHERE state_at IS NULL"))


_METRICS_V2_COLUMNS = ("run_id", "kind", "step", "tokens", "time_s", "train_loss", "val_loss", "lr", "grad_norm",
                       "tokens_per_s", "extra_json")


def _to_v3(conn: Connection) -> None:
    """Give metrics the `series` column and the unique key (run_id, kind, step, series)."""
    pk = "SERIAL PRIMARY KEY" if conn.dialect.name == "postgresql" else "INTEGER PRIMARY KEY AUTOINCREMENT"
    conn.execute(text("ALTER TABLE metrics RENAME TO metrics_v1"))
    if conn.dialect.name == "postgresql":  # constraint (index) names are per schema there
        for (name,) in conn.execute(text(
            "SELECT conname FROM pg_constraint WHERE conrelid = 'metrics_v1'::regclass AND contype IN ('u', 'p')"
        )).all():
            conn.execute(text(f'ALTER TABLE metrics_v1 RENAME CONSTRAINT "{name}" TO "{name}_v1"'))
    conn.execute(text(
        f"CREATE TABLE metrics (id {pk}, run_id VARCHAR(64) NOT NULL REFERENCES runs (id) ON DELETE CASCADE, "
        "kind VARCHAR(16) NOT NULL, step INTEGER NOT NULL, series VARCHAR(64) NOT NULL DEFAULT '', tokens BIGINT, "
        "time_s FLOAT, train_loss FLOAT, val_loss FLOAT, lr FLOAT, grad_norm FLOAT, tokens_per_s FLOAT, extra_json TEXT, "
        "CONSTRAINT uq_metrics_run_kind_step_series UNIQUE (run_id, kind, step, series))"
    ))
    cols = ", ".join(_METRICS_V2_COLUMNS)
    conn.execute(text(f"INSERT INTO metrics ({cols}) SELECT {cols} FROM metrics_v1"))
    conn.execute(text("DROP TABLE metrics_v1"))


def _to_v4(conn: Connection) -> None:
    """The `evals` table (`cemctl eval`) and runs.evals_mtime."""
    pk = "SERIAL PRIMARY KEY" if conn.dialect.name == "postgresql" else "INTEGER PRIMARY KEY AUTOINCREMENT"
    _add_columns(conn, "runs", [("evals_mtime", "FLOAT")])
    conn.execute(text(
        f"CREATE TABLE IF NOT EXISTS evals (id {pk}, run_id VARCHAR(64) NOT NULL REFERENCES runs (id) ON DELETE CASCADE, "
        "attn_steps INTEGER NOT NULL, mlp_steps INTEGER NOT NULL, eval_steps INTEGER, "
        "sublayer VARCHAR(16) NOT NULL DEFAULT 'both', test_loss FLOAT, test_ppl FLOAT, test_tokens BIGINT, "
        "flops_per_token BIGINT, trained_attn_steps INTEGER, trained_mlp_steps INTEGER, evaluated_at FLOAT, "
        "recorded_at FLOAT NOT NULL, CONSTRAINT uq_evals_run_attn_mlp UNIQUE (run_id, attn_steps, mlp_steps))"
    ))


def _to_v5(conn: Connection) -> None:
    """Links per plan key (scale, overrides), [[mark]] labels, planning time."""
    conn.execute(text("DROP INDEX IF EXISTS ix_experiment_runs_run_id"))
    conn.execute(text("ALTER TABLE experiment_runs RENAME TO experiment_runs_v4"))
    if conn.dialect.name == "postgresql":
        for (name,) in conn.execute(text(
            "SELECT conname FROM pg_constraint WHERE conrelid = 'experiment_runs_v4'::regclass AND contype IN ('u', 'p')"
        )).all():
            conn.execute(text(f'ALTER TABLE experiment_runs_v4 RENAME CONSTRAINT "{name}" TO "{name}_v4"'))
    conn.execute(text(
        "CREATE TABLE experiment_runs (experiment_id INTEGER NOT NULL REFERENCES experiments (id) ON DELETE CASCADE, "
        "scale VARCHAR(32) NOT NULL DEFAULT '', overrides_json VARCHAR(2000) NOT NULL DEFAULT '{}', "
        "run_id VARCHAR(64) NOT NULL REFERENCES runs (id), axes_json TEXT NOT NULL DEFAULT '{}', "
        "position INTEGER NOT NULL DEFAULT 0, marks_json TEXT NOT NULL DEFAULT '[]', planned_at FLOAT, "
        "PRIMARY KEY (experiment_id, scale, overrides_json, run_id))"
    ))
    conn.execute(text(
        "INSERT INTO experiment_runs (experiment_id, scale, overrides_json, run_id, axes_json, position, planned_at) "
        "SELECT l.experiment_id, COALESCE(e.scale, ''), COALESCE(e.overrides_json, '{}'), l.run_id, "
        "COALESCE(l.axes_json, '{}'), COALESCE(l.position, 0), e.updated_at "
        "FROM experiment_runs_v4 l JOIN experiments e ON e.id = l.experiment_id"
    ))
    conn.execute(text("DROP TABLE experiment_runs_v4"))
    conn.execute(text("CREATE INDEX IF NOT EXISTS ix_experiment_runs_run_id ON experiment_runs (run_id)"))


def _to_v6(conn: Connection) -> None:
    """runs.config_mtime: when config.json was last checked against the run id."""
    _add_columns(conn, "runs", [("config_mtime", "FLOAT")])


def _to_v7(conn: Connection) -> None:
    """The run_tags table (`cemctl tag`, `cemctl note`)."""
    conn.execute(text(
        "CREATE TABLE IF NOT EXISTS run_tags (run_id VARCHAR(64) NOT NULL PRIMARY KEY REFERENCES runs (id) "
        "ON DELETE CASCADE, tags_json TEXT NOT NULL DEFAULT '{}', notes_json TEXT NOT NULL DEFAULT '[]', "
        "file_mtime FLOAT, recorded_at FLOAT NOT NULL)"
    ))


def _to_v8(conn: Connection) -> None:
    """results.code_fingerprint (older results: NULL, the code that trained them is unknown)."""
    _add_columns(conn, "results", [("code_fingerprint", "VARCHAR(32)")])


def _to_v9(conn: Connection) -> None:
    """The run_environment table and runs.environment_mtime (older runs: no row, nothing recorded)."""
    _add_columns(conn, "runs", [("environment_mtime", "FLOAT")])
    conn.execute(text(
        "CREATE TABLE IF NOT EXISTS run_environment (run_id VARCHAR(64) NOT NULL PRIMARY KEY REFERENCES runs (id) "
        "ON DELETE CASCADE, attempt INTEGER, hostname VARCHAR(255), cpu_model VARCHAR(255), cpu_count INTEGER, "
        "device VARCHAR(32), gpu_model VARCHAR(255), gpu_memory_bytes BIGINT, driver_version VARCHAR(64), "
        "cuda_version VARCHAR(64), torch_version VARCHAR(64), python_version VARCHAR(64), cemctl_version VARCHAR(64), "
        "code_fingerprint VARCHAR(64), code_snapshot VARCHAR(64), peak_host_rss_bytes BIGINT, "
        "peak_gpu_allocated_bytes BIGINT, started_at FLOAT, ended_at FLOAT, environment_json TEXT NOT NULL DEFAULT '{}', "
        "file_mtime FLOAT, recorded_at FLOAT NOT NULL)"
    ))


def _to_v10(conn: Connection) -> None:
    """The result_history table (filled from the runs' set-aside folders at their next sync)."""
    pk = "SERIAL PRIMARY KEY" if conn.dialect.name == "postgresql" else "INTEGER PRIMARY KEY AUTOINCREMENT"
    conn.execute(text(
        f"CREATE TABLE IF NOT EXISTS result_history (id {pk}, run_id VARCHAR(64) NOT NULL REFERENCES runs (id) ON DELETE CASCADE, folder VARCHAR(128) NOT NULL, "
        "state VARCHAR(16), test_loss FLOAT, val_loss FLOAT, code_fingerprint VARCHAR(32), set_aside_at FLOAT, "
        "result_json TEXT NOT NULL DEFAULT '{}', CONSTRAINT uq_result_history_run_folder UNIQUE (run_id, folder))"
    ))


MIGRATIONS: dict[int, Callable[[Connection], None]] = {2: _to_v2, 3: _to_v3, 4: _to_v4, 5: _to_v5, 6: _to_v6,
                                                       7: _to_v7, 8: _to_v8, 9: _to_v9, 10: _to_v10}


def schema_version(conn: Connection) -> int:
    """0 for an empty database, else the newest applied version."""
    tables = set(inspect(conn).get_table_names())
    if "schema_version" in tables:
        version = conn.execute(select(SchemaVersion.version).order_by(SchemaVersion.version.desc())).scalar()
        if version is not None:
            return int(version)
    return 1 if "runs" in tables else 0


def _stamp(conn: Connection, version: int) -> None:
    table: Any = SchemaVersion.__table__  # a Table (mypy sees a FromClause)
    table.create(conn, checkfirst=True)
    conn.execute(table.insert().values(version=version, applied_at=time.time()))


def check_current(engine: Engine) -> int:
    """For a database opened read-only: its version must be this cemctl's (nothing can be migrated)."""
    with engine.connect() as conn:
        found = schema_version(conn)
        conn.rollback()
    if found == 0:
        raise DatabaseError("--db: the database is empty and cannot be written (read-only)")
    if found < CURRENT_VERSION:
        raise DatabaseError(f"--db: the results database has schema version {found}, this cemctl reads "
                            f"{CURRENT_VERSION}, and it is read-only here; open it once with write access to "
                            "upgrade it")
    if found > CURRENT_VERSION:
        raise DatabaseError(f"--db: the results database has schema version {found}, newer than this cemctl reads "
                            f"({CURRENT_VERSION}); upgrade cemctl")
    return found


def migrate(engine: Engine, *, write_engine: Engine | None = None) -> int:
    """Bring the schema to CURRENT_VERSION; returns the version it found. `write_engine`: the same database with
    write transactions that take the lock first (`cemctl.db.engine.writer`), used for the migration itself."""

    with engine.connect() as conn:  # fast path: nothing to do
        found = schema_version(conn)
        conn.rollback()
    if found == CURRENT_VERSION:
        return found
    if found > CURRENT_VERSION:
        raise DatabaseError(
            f"results database schema version {found} is newer than this cemctl supports ({CURRENT_VERSION}); upgrade cemctl"
        )
    with (write_engine or engine).begin() as conn:
        if conn.dialect.name == "postgresql":  # one migrator at a time
            conn.execute(text("SELECT pg_advisory_xact_lock(4242001)"))
        found = schema_version(conn)  # re-read under the write lock
        if found == 0:
            Base.metadata.create_all(conn)
            _stamp(conn, CURRENT_VERSION)
        elif found < CURRENT_VERSION:
            for version in range(found + 1, CURRENT_VERSION + 1):
                MIGRATIONS[version](conn)
                _stamp(conn, version)
    return found
